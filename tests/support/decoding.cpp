#include "support/decoding.h"

#include <gtest/gtest.h>

#include <cstring>

#include "support/gpu_fixture.h"

namespace eaglevk::testing {

engine::Decoder plain_decoder(const models::TargetModel& target, uint32_t context, uint32_t max_rows) {
  return engine::Decoder(gpu(), target, nullptr, {.context = context, .max_rows = max_rows});
}

engine::Decoder chain_decoder(const models::TargetModel& target, const models::Eagle3Model& draft, uint32_t context,
                              uint32_t k, uint32_t max_rows) {
  return engine::Decoder(gpu(), target, &draft, {.context = context, .k = k, .max_rows = max_rows});
}

engine::Decoder tree_decoder(const models::TargetModel& target, const models::Eagle3Model& draft, uint32_t context,
                             const engine::TreeParams& tree, uint32_t max_rows) {
  return engine::Decoder(gpu(), target, &draft, {.context = context, .tree = tree, .max_rows = max_rows});
}

engine::GenerationResult generate(engine::Decoder& decoder, std::vector<int32_t> prompt,
                                  const engine::GenerationOptions& options, const engine::TokenCallback& on_token) {
  engine::SpecStats stats;
  return decoder.generate(std::move(prompt), options, stats, on_token);
}

namespace {
bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }
}  // namespace

void expect_same_generation(const engine::GenerationResult& got, const engine::GenerationResult& want,
                            const std::string& what) {
  EXPECT_EQ(got.tokens, want.tokens) << what;
  ASSERT_EQ(got.logprobs.size(), want.logprobs.size()) << what;
  for (size_t i = 0; i < got.logprobs.size(); ++i) {
    EXPECT_TRUE(same_bits(got.logprobs[i].logprob, want.logprobs[i].logprob)) << what << ", token " << i;
    ASSERT_EQ(got.logprobs[i].top.size(), want.logprobs[i].top.size()) << what;
    for (size_t j = 0; j < got.logprobs[i].top.size(); ++j) {
      EXPECT_EQ(got.logprobs[i].top[j].first, want.logprobs[i].top[j].first) << what << ", token " << i;
      EXPECT_TRUE(same_bits(got.logprobs[i].top[j].second, want.logprobs[i].top[j].second)) << what << ", token " << i;
    }
  }
}

}  // namespace eaglevk::testing
