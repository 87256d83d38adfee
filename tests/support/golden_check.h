#pragma once
// A target model against a golden file of golden.json's shape: the top-5 logits at the last
// prompt position and the argmax at every prompt position of every prompt, and the first 64
// greedy tokens of the first 2 prompts (of every one with EAGLEVK_GOLDEN_ALL=1). A
// greedy divergence is allowed only at a step whose golden top-2 margin is below `tie_margin`
// (by default the tolerance), and a top-5 id may differ only where two golden logits are
// closer than the tolerance.
#include <string>

#include "models/target.h"
#include "support/golden.h"

namespace eaglevk::testing {

struct GoldenSummary {
  size_t prompts = 0, full_matches = 0, verified_tokens = 0, argmax_equal = 0, argmax_total = 0;
  float worst_logit_error = 0;
  std::vector<std::vector<int32_t>> greedy;  // eaglevk's 64 tokens per decoded prompt (the first ones)
  std::vector<std::vector<std::pair<int32_t, float>>> top5;
};

// Records gtest failures for every disagreement beyond the tolerance and prints a summary line.
GoldenSummary expect_matches_golden(const models::TargetModel& model, const Golden& golden, float tolerance,
                                    const std::string& label, float tie_margin = 0);

}  // namespace eaglevk::testing
