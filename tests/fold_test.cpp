// Folds at the model level, each against its unfolded reference: RMSNorms folded into the
// products that consume them (Gpu::fold_norms, the profile's fold.norms=on), and rope with the KV-cache
// write folded into the q/k/v products, or for Llama-4's rope layers with QK norm into one
// dispatch with the norm (Gpu::fold_rope, on by default; fold.rope=off turns it off). Both tiny targets give the same greedy tokens and the same logits bits as with the
// separate dispatches, and EAGLE-3 speculation on both pairs the same tokens and acceptance
// counts (the draft's proposals come from its own folded products). ops_test checks the
// kernels bitwise in every vendor's configuration; this checks that the models fold the right
// norm into the right product, and rotate and cache the right columns.
#include "runtime/engine/generate.h"
#include "runtime/engine/decoder.h"
#include "support/decoding.h"
#include "support/gpu_fixture.h"
#include "support/pairs.h"

namespace eaglevk::testing {
namespace {

constexpr uint32_t kContext = 256;

enum class Fold { Norms, Rope };

struct FoldScope {
  FoldScope(Fold which, bool fold) : flag(which == Fold::Norms ? gpu().fold_norms : gpu().fold_rope), saved(flag) {
    flag = fold;
  }
  ~FoldScope() { flag = saved; }
  bool& flag;
  bool saved;
};

struct FoldCase {
  const char* pair;
  Fold fold;
};

// Dispatches a decode step of the target saves with the fold: norms, the attention norm of
// every layer and the final norm (at least); rope, the rope_kv_write (or kv_write) of every layer
// whose rotation and cache write fold into the q/k/v product, and two of the three dispatches
// (rope, QK norm, kv_write) of a Llama-4 rope layer with QK norm, which become one.
uint32_t dispatches_saved(const models::TargetModel& target, Fold fold) {
  const uint32_t layers = target.config().num_hidden_layers;
  if (fold == Fold::Norms) return layers + 1;
  const auto* llama4 = std::get_if<models::Llama4Model>(&target.family);
  if (!llama4) return layers;
  uint32_t saved = 0;
  for (uint32_t l = 0; l < layers; ++l) saved += llama4->config.rope_layer[l] && llama4->config.use_qk_norm ? 2 : 1;
  return saved;
}

class Folds : public GpuTest, public ::testing::WithParamInterface<FoldCase> {};

TEST_P(Folds, GiveTheTokensLogitsAndAcceptanceOfSeparateDispatches) {
  const FoldCase& c = GetParam();
  Pair& p = pair(c.pair);
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
    FoldScope scope(c.fold, fold);
    engine::Decoder runner = plain_decoder(p.target, kContext, 8);
    plain[fold] = testing::generate(runner, prompt, o);
    dispatches[fold] = runner.recorder().dispatches();  // of a decode step
    engine::Decoder spec = chain_decoder(p.target, p.draft, kContext, 3);
    engine::GenerationOptions greedy = o;
    greedy.logprobs = 0;
    spec_tokens[fold] = spec.generate(prompt, greedy, stats[fold]).tokens;
  }
  const uint32_t fewer = dispatches_saved(p.target, c.fold);
  EXPECT_GT(fewer, 0u);
  if (c.fold == Fold::Norms) EXPECT_LE(dispatches[1] + fewer, dispatches[0]);
  else EXPECT_EQ(dispatches[1] + fewer, dispatches[0]);
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

INSTANTIATE_TEST_SUITE_P(Pairs, Folds,
                         ::testing::Values(FoldCase{"A", Fold::Norms}, FoldCase{"B", Fold::Norms},
                                           FoldCase{"A", Fold::Rope}, FoldCase{"B", Fold::Rope}),
                         [](const auto& info) {
                           return std::string(info.param.fold == Fold::Norms ? "Norms" : "Rope") + info.param.pair;
                         });

}  // namespace
}  // namespace eaglevk::testing
