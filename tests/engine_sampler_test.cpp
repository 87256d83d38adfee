// The host's filtered distribution (HF's filter order: temperature, top-k, top-p), which the
// device sampler's tests use as their reference, and top_logits. Draws are tested on the
// device (sampling_test, spec_sampling_test).
#include <cmath>
#include <map>

#include <gtest/gtest.h>

#include "runtime/engine/sampler.h"

namespace eaglevk::engine {
namespace {

// The device keeps every token at or above its top-k and top-p thresholds, so a tie at the
// boundary keeps all the tied tokens; the host reference must do the same.
TEST(Sampler, TiesAtTheTopKAndTopPBoundariesAreAllKept) {
  SamplingParams p{1.0f, 2, 1.0f, 0};
  // top-2: 3.0, then 2.0 twice.
  auto dist = filtered_distribution(std::vector<float>{1.0f, 3.0f, 2.0f, 2.0f, 0.0f}, p);
  ASSERT_EQ(dist.size(), 3u);
  EXPECT_EQ(dist[0].first, 1);
  EXPECT_EQ(dist[1].first, 2);
  EXPECT_EQ(dist[2].first, 3);
  EXPECT_DOUBLE_EQ(dist[1].second, dist[2].second);
  // top-p 0.3: the first of two equal favourites (0.47 each) reaches it; its twin stays.
  p = {1.0f, 0, 0.3f, 0};
  dist = filtered_distribution(std::vector<float>{2.0f, 2.0f, 0.0f}, p);
  ASSERT_EQ(dist.size(), 2u);
  EXPECT_DOUBLE_EQ(dist[0].second, 0.5);
  // No tie: exactly k.
  p = {1.0f, 2, 1.0f, 0};
  EXPECT_EQ(filtered_distribution(std::vector<float>{1.0f, 3.0f, 2.0f, 2.5f, 0.0f}, p).size(), 2u);
}

TEST(Sampler, FilteredDistributionMatchesHandComputation) {
  std::vector<float> logits = {1.0f, 3.0f, 2.0f, 0.0f, 3.0f};
  SamplingParams p{0.5f, 3, 1.0f, 0};
  auto dist = filtered_distribution(logits, p);
  // top-3 by logit, ties to the lower id: 1, 4, 2; probabilities softmax(logit / 0.5).
  ASSERT_EQ(dist.size(), 3u);
  EXPECT_EQ(dist[0].first, 1);
  EXPECT_EQ(dist[1].first, 4);
  EXPECT_EQ(dist[2].first, 2);
  double z = 2 * std::exp(6.0) + std::exp(4.0);
  EXPECT_NEAR(dist[0].second, std::exp(6.0) / z, 1e-12);
  EXPECT_NEAR(dist[2].second, std::exp(4.0) / z, 1e-12);

  // top-p keeps a token while the mass of the more likely ones is below p (HF's rule):
  // the masses are 0.468, 0.468, 0.063.
  p.top_p = 0.9f;
  dist = filtered_distribution(logits, p);
  ASSERT_EQ(dist.size(), 2u);
  EXPECT_NEAR(dist[0].second, 0.5, 1e-12);
  p.top_p = 0.95f;
  EXPECT_EQ(filtered_distribution(logits, p).size(), 3u);
  // 0.4 is reached by the first 3.0, and its twin (id 4) is kept with it, as on the device.
  p.top_p = 0.4f;
  dist = filtered_distribution(logits, p);
  ASSERT_EQ(dist.size(), 2u);
  EXPECT_DOUBLE_EQ(dist[0].second, 0.5);
  EXPECT_DOUBLE_EQ(dist[1].second, 0.5);
}

TEST(Sampler, TopLogitsTiesToTheLowestIndex) {
  std::vector<float> logits = {1.0f, 5.0f, 5.0f, 2.0f};
  auto top = top_logits(logits, 3);
  EXPECT_EQ(top[0].first, 1);
  EXPECT_EQ(top[1].first, 2);
  EXPECT_EQ(top[2].first, 3);
}

}  // namespace
}  // namespace eaglevk::engine
