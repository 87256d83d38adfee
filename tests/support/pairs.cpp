#include "support/decoding.h"
#include "support/pairs.h"

#include <algorithm>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "runtime/engine/generate.h"
#include "runtime/engine/decoder.h"
#include "support/gpu_fixture.h"

namespace eaglevk::testing {

const std::vector<int32_t>& Pair::plain_tokens(size_t i) {
  if (plain.size() != golden.prompts.size()) plain.resize(golden.prompts.size());
  if (plain[i].empty()) {
    engine::Decoder runner = plain_decoder(target, 512, 64);
    engine::GenerationOptions o;
    o.n_predict = 64;
    o.ignore_eos = true;
    plain[i] = testing::generate(runner, golden.prompts[i].prompt_ids, o).tokens;
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
  engine::Decoder spec = chain_decoder(p.target, draft, 512, k, 64);
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

std::vector<engine::SpecStats> check_lossless_and_acceptance(Pair& p, const std::vector<uint32_t>& ks, size_t prompts) {
  std::vector<engine::SpecStats> totals;
  prompts = std::min(prompts, p.golden.prompts.size());
  for (uint32_t k : ks) {
    engine::SpecStats total = expect_lossless(p, p.draft, k, prompts);
    const GoldenAcceptance want = golden_acceptance(p.golden, k, prompts);
    fmt::print("{} k={} on {} prompts: drafts {} accepted {} AL {:.3f} (golden: drafts {} accepted {} AL {:.3f})\n",
               p.target_dir.substr(p.target_dir.rfind('/') + 1), k, prompts, total.num_drafts, total.num_accepted_tokens,
               total.mean_acceptance_length(), want.drafts, want.accepted, want.mean_acceptance_length());
    EXPECT_NEAR(total.mean_acceptance_length(), want.mean_acceptance_length(), 0.05 * want.mean_acceptance_length())
        << "k " << k;
    totals.push_back(total);
  }
  return totals;
}

}  // namespace eaglevk::testing
