#include "support/pairs.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "runtime/engine/generate.h"
#include "runtime/engine/speculative.h"
#include "support/gpu_fixture.h"

namespace eaglevk::testing {

const std::vector<int32_t>& Pair::plain_tokens(size_t i) {
  if (plain.size() != golden.prompts.size()) plain.resize(golden.prompts.size());
  if (plain[i].empty()) {
    engine::TargetRunner runner(gpu(), target, 512, 64);
    engine::GenerationOptions o;
    o.n_predict = 64;
    o.ignore_eos = true;
    plain[i] = engine::generate(runner, golden.prompts[i].prompt_ids, o).tokens;
  }
  return plain[i];
}

Pair& pair(const std::string& name) {
  gpu();  // constructed first so that it is destroyed after the pairs' buffers
  static std::map<std::string, std::unique_ptr<Pair>> pairs;
  auto& slot = pairs[name];
  if (!slot) {
    std::string target = name == "A" ? "tiny-llama3" : "tiny-llama4";
    std::string draft = target + "-eagle3";
    models::TargetModel t = models::load_target(gpu().ctx, asset(target));
    models::Eagle3Model d = models::load_eagle3(gpu().ctx, asset(draft), t.config());
    slot = std::make_unique<Pair>(Pair{asset(target), asset(draft), std::move(t), std::move(d), load_golden(asset(target)), {}});
  }
  return *slot;
}

engine::SpecStats expect_lossless(Pair& p, const models::Eagle3Model& draft, uint32_t k, size_t prompts) {
  engine::SpeculativeDecoder spec(gpu(), p.target, draft, 512, k, 64);
  engine::SpecStats total;
  for (size_t i = 0; i < p.golden.prompts.size() && i < prompts; ++i) {
    engine::GenerationOptions o;
    o.n_predict = 64;
    o.ignore_eos = true;
    engine::SpecStats stats;
    auto r = spec.generate(p.golden.prompts[i].prompt_ids, o, stats);
    EXPECT_EQ(r.tokens, p.plain_tokens(i)) << "k " << k << " prompt " << i;
    total.merge(stats);
    // AL = 1 + sum of the per-position rates, by definition.
    double sum = 1;
    for (double v : stats.acceptance_per_position()) sum += v;
    EXPECT_NEAR(stats.mean_acceptance_length(), sum, 1e-9);
  }
  return total;
}

// Greedy speculative output equals plain greedy output token for token on every golden
// prompt, and the acceptance counters agree with golden.json within 5%.
std::vector<engine::SpecStats> check_lossless_and_acceptance(Pair& p, const std::vector<uint32_t>& ks,
                                                             const std::vector<uint32_t>& aux, bool compare_golden) {
  std::vector<engine::SpecStats> totals;
  models::Eagle3Model overridden;
  const models::Eagle3Model* draft = &p.draft;
  if (!aux.empty()) {
    overridden = models::load_eagle3(gpu().ctx, p.draft_dir, p.target.config(), aux);
    draft = &overridden;
  }
  for (uint32_t k : ks) {
    engine::SpecStats total = expect_lossless(p, *draft, k);
    std::string key = std::to_string(k);
    fmt::print("{} aux {},{},{} k={}: drafts {} accepted {} AL {:.3f}", p.target_dir.substr(p.target_dir.rfind('/') + 1),
               draft->aux_layers[0], draft->aux_layers[1], draft->aux_layers[2], k, total.num_drafts,
               total.num_accepted_tokens, total.mean_acceptance_length());
    if (compare_golden && p.golden.raw["acceptance"].contains(key)) {
      const auto& gold = p.golden.raw["acceptance"][key];
      double want = gold["mean_acceptance_length"];
      EXPECT_NEAR(total.mean_acceptance_length(), want, 0.05 * want) << "k " << k;
      fmt::print(" (golden {:.3f}); per position eaglevk/golden", want);
      auto rates = total.acceptance_per_position();
      for (size_t j = 0; j < rates.size(); ++j)
        fmt::print(" {:.3f}/{:.3f}", rates[j], gold["acceptance_rate_per_position"][j].get<double>());
    }
    fmt::print("\n");
    totals.push_back(total);
  }
  return totals;
}

}  // namespace eaglevk::testing
