// EAGLE-3 on pair B: tiny-llama4 (MoE, multimodal checkpoint) with a speculators-format head
// that taps the non-default layers 1, 3, 6 from its config. Lossless for k = 1, 3, 5 and
// acceptance within 5% of golden.json; the family default layers change acceptance and stay
// lossless.
#include "runtime/engine/speculative.h"
#include "support/gpu_fixture.h"
#include "support/pairs.h"

namespace eaglevk::testing {
namespace {

struct PairB : GpuTest {};

TEST_F(PairB, DraftTapsLayersFromItsConfig) {
  Pair& p = pair("B");
  EXPECT_EQ(p.draft.config.format, "speculators");
  EXPECT_EQ(p.draft.aux_layers, (std::vector<uint32_t>{1, 3, 6}));
  EXPECT_FALSE(p.draft.aux_layers_default);
  EXPECT_TRUE(p.draft.embed.buffer);  // the head ships its own embed_tokens
}

TEST_F(PairB, LosslessAndAcceptanceForEveryK) { check_lossless_and_acceptance(pair("B"), {1, 3, 5}); }

// The family default (2, 4, 5) instead of the config's (1, 3, 6): the head sees states it
// was not trained on, so acceptance changes, and the output is still the target's own.
TEST_F(PairB, DefaultTapLayersChangeAcceptanceButStayLossless) {
  Pair& p = pair("B");
  check_lossless_and_acceptance(p, {3}, {2, 4, 5}, /*compare_golden=*/false);
  models::Eagle3Model moved = models::load_eagle3(gpu().ctx, p.draft_dir, p.target.config(), {2, 4, 5});
  engine::SpeculativeDecoder right(gpu(), p.target, p.draft, 512, 3, 64), wrong(gpu(), p.target, moved, 512, 3, 64);
  engine::SpecStats a, b;
  for (size_t i = 0; i < 5; ++i) {
    engine::GenerationOptions o;
    o.n_predict = 64;
    o.ignore_eos = true;
    right.generate(p.golden.prompts[i].prompt_ids, o, a);
    wrong.generate(p.golden.prompts[i].prompt_ids, o, b);
  }
  EXPECT_GT(a.mean_acceptance_length(), b.mean_acceptance_length() + 0.1);
}

}  // namespace
}  // namespace eaglevk::testing
