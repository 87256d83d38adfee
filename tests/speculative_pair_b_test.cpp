// EAGLE-3 on pair B: tiny-llama4 (MoE, multimodal checkpoint) with a speculators-format head
// that taps the non-default layers 1, 3, 6 from its config. Lossless for k = 1, 3, 5 and
// acceptance within 5% of golden.json's on the first 3 golden prompts (every one with
// EAGLEVK_GOLDEN_ALL=1); the family default layers change acceptance and stay lossless.
#include "runtime/engine/decoder.h"
#include "support/decoding.h"
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

TEST_F(PairB, LosslessAndAcceptanceForEveryK) {
  Pair& p = pair("B");
  check_lossless_and_acceptance(p, {1, 3, 5}, golden_prompts_to_decode(3, p.golden.prompts.size()));
}

// The family default (2, 4, 5) instead of the config's (1, 3, 6): the head sees states it
// was not trained on, so acceptance changes, and the output is still the target's own.
TEST_F(PairB, DefaultTapLayersChangeAcceptanceButStayLossless) {
  Pair& p = pair("B");
  models::Eagle3Model moved = models::load_eagle3(gpu().ctx, p.draft_dir, p.target.config(), {2, 4, 5});
  // Five prompts show both (on the first two alone the moved taps happen to accept more): the
  // output stays plain decoding's, acceptance drops.
  const engine::SpecStats wrong = expect_lossless(p, moved, 3, 5), right = expect_lossless(p, p.draft, 3, 5);
  EXPECT_GT(right.mean_acceptance_length(), wrong.mean_acceptance_length() + 0.1);
}

}  // namespace
}  // namespace eaglevk::testing
