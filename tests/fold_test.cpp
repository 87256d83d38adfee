// RMSNorms folded into the products that consume them (Gpu::fold_norms, EAGLEVK_FOLD_NORMS=1),
// at the model level: both tiny targets give the same greedy tokens and the same logits bits
// as with a norm dispatch before each product, and EAGLE-3 speculation on both pairs the same
// tokens and acceptance counts (the draft's proposals come from its own folded products).
// ops_test checks the kernels bitwise in every vendor's configuration; this checks that the
// models fold the right norm into the right product.
#include "runtime/engine/generate.h"
#include "runtime/engine/speculative.h"
#include "support/gpu_fixture.h"
#include "support/pairs.h"

namespace eaglevk::testing {
namespace {

constexpr uint32_t kContext = 256;

struct FoldScope {
  explicit FoldScope(bool fold) : saved(gpu().fold_norms) { gpu().fold_norms = fold; }
  ~FoldScope() { gpu().fold_norms = saved; }
  bool saved;
};

class FoldedNorms : public GpuTest, public ::testing::WithParamInterface<const char*> {};

TEST_P(FoldedNorms, GiveTheTokensLogitsAndAcceptanceOfNormDispatches) {
  Pair& p = pair(GetParam());
  const std::vector<int32_t>& prompt = p.golden.prompts[0].prompt_ids;
  engine::GenerationOptions o;
  o.n_predict = 24;
  o.ignore_eos = true;
  o.logprobs = 2;
  engine::GenerationResult plain[2];
  std::vector<int32_t> spec_tokens[2];
  engine::SpecStats stats[2];
  uint32_t dispatches[2] = {0, 0};
  for (bool fold : {false, true}) {
    FoldScope scope(fold);
    engine::TargetRunner runner(gpu(), p.target, kContext, 8);
    plain[fold] = engine::generate(runner, prompt, o);
    dispatches[fold] = runner.recorder().dispatches();  // of a decode step
    engine::SpeculativeDecoder spec(gpu(), p.target, p.draft, kContext, 3);
    engine::GenerationOptions greedy = o;
    greedy.logprobs = 0;
    spec_tokens[fold] = spec.generate(prompt, greedy, stats[fold]).tokens;
  }
  // Folded: no attention-norm dispatch in any layer, and none before the lm_head.
  EXPECT_LE(dispatches[1] + p.target.config().num_hidden_layers + 1, dispatches[0]);
  ASSERT_EQ(plain[0].tokens.size(), o.n_predict);
  EXPECT_EQ(plain[1].tokens, plain[0].tokens);
  ASSERT_EQ(plain[1].logprobs.size(), plain[0].logprobs.size());
  for (size_t i = 0; i < plain[0].logprobs.size(); ++i)
    EXPECT_EQ(plain[1].logprobs[i].logprob, plain[0].logprobs[i].logprob) << "token " << i;
  EXPECT_EQ(spec_tokens[0], plain[0].tokens);
  EXPECT_EQ(spec_tokens[1], spec_tokens[0]);
  EXPECT_EQ(stats[1].num_drafts, stats[0].num_drafts);
  EXPECT_EQ(stats[1].num_accepted_tokens, stats[0].num_accepted_tokens);
}

INSTANTIATE_TEST_SUITE_P(Pairs, FoldedNorms, ::testing::Values("A", "B"));

}  // namespace
}  // namespace eaglevk::testing
