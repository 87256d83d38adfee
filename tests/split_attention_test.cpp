// Attention split along the context (flash-decoding, ops::AttentionSplit: the GPUs' default)
// at the model level, on lavapipe with the profile's attention.split=64 so that the tiny prompts span
// several splits: both tiny targets against golden.json as model_golden_test checks them (the
// prompt's top-5 logits and argmax, 64 greedy tokens), and EAGLE-3 chain and tree drafting on
// both pairs lossless against plain decoding with the same split. ops_test checks the kernels
// (reference, batch invariance, trees, regions, rows in chunks).
#include <cstdlib>
#include <optional>
#include <string>

#include "runtime/engine/generate.h"
#include "runtime/engine/decoder.h"
#include "support/decoding.h"
#include "support/target_runner.h"
#include "support/golden_check.h"
#include "support/gpu_fixture.h"
#include "support/pairs.h"

namespace eaglevk::testing {
namespace {

constexpr uint32_t kContext = 256;

// Model states read the profile's attention.split when they are made: appended to whatever
// EAGLEVK_PROFILE_OVERRIDE the run has (the last setting of a key wins).
struct SplitScope {
  explicit SplitScope(const char* keys) {
    if (const char* old = std::getenv("EAGLEVK_PROFILE_OVERRIDE")) saved = old;
    const std::string split = std::string("attention.split=") + keys;
    setenv("EAGLEVK_PROFILE_OVERRIDE", saved ? (*saved + "," + split).c_str() : split.c_str(), 1);
  }
  ~SplitScope() {
    if (saved) setenv("EAGLEVK_PROFILE_OVERRIDE", saved->c_str(), 1);
    else unsetenv("EAGLEVK_PROFILE_OVERRIDE");
  }
  std::optional<std::string> saved;
};

class SplitAttention : public GpuTest, public ::testing::WithParamInterface<const char*> {};

TEST_P(SplitAttention, MatchesGoldenAndDraftingStaysLossless) {
  Pair& p = pair(GetParam());
  const std::vector<int32_t>& prompt = p.golden.prompts[0].prompt_ids;
  engine::GenerationOptions o;
  o.n_predict = 40;
  o.ignore_eos = true;
  o.logprobs = 1;
  std::vector<float> unsplit_logprobs;
  {
    SplitScope off("0");
    engine::Decoder runner = plain_decoder(p.target, kContext, 8);
    for (const engine::TokenLogprobs& t : testing::generate(runner, prompt, o).logprobs)
      unsplit_logprobs.push_back(t.logprob);
  }
  SplitScope split("64");
  expect_matches_golden(p.target, p.golden, 2e-3f, std::string("split 64, pair ") + GetParam());

  ASSERT_EQ(TargetRunner(gpu(), p.target, kContext, 8).state().split_keys, 64u);
  engine::Decoder runner = plain_decoder(p.target, kContext, 8);
  const engine::GenerationResult plain = testing::generate(runner, prompt, o);
  ASSERT_EQ(plain.tokens.size(), o.n_predict);
  // Positions past 64 merge two splits: other sums than the unsplit kernel's, so other bits
  // (this shows the split ran; the golden check above shows it is right).
  std::vector<float> split_logprobs;
  for (const engine::TokenLogprobs& t : plain.logprobs) split_logprobs.push_back(t.logprob);
  EXPECT_NE(split_logprobs, unsplit_logprobs);

  engine::GenerationOptions greedy = o;
  greedy.logprobs = 0;
  engine::SpecStats stats;
  engine::Decoder chain = chain_decoder(p.target, p.draft, kContext, 3);
  EXPECT_EQ(chain.generate(prompt, greedy, stats).tokens, plain.tokens) << "chain, k = 3";
  EXPECT_GT(stats.num_accepted_tokens, 0u);
  engine::TreeParams tree;
  tree.steps = 3;
  tree.topk = 2;
  tree.draft_tokens = 6;
  engine::Decoder trees = tree_decoder(p.target, p.draft, kContext, tree);
  EXPECT_EQ(trees.generate(prompt, greedy, stats).tokens, plain.tokens) << "tree";
}

INSTANTIATE_TEST_SUITE_P(Pairs, SplitAttention, ::testing::Values("A", "B"));

}  // namespace
}  // namespace eaglevk::testing
