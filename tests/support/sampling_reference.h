#pragma once
// The distribution tests' reference: what plain sampling from the target gives, worked out
// exactly from its logits (engine::filtered_distribution, HF's definition, which sampling_test
// holds the device sampler to), and Pearson's goodness-of-fit test of draws against it.
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "runtime/engine/sampler.h"
#include "support/target_runner.h"

namespace eaglevk::testing {

// The exact distributions of the 1st to `depth`-th tokens plain sampling generates after
// `prompt` with `params` (the seed aside): element t is token t + 1's, a mixture over every
// history of t tokens the filter keeps (one target pass per history).
std::vector<std::map<int32_t, double>> plain_sampling_distributions(TargetRunner& runner,
                                                                   const std::vector<int32_t>& prompt,
                                                                   const engine::SamplingParams& params, uint32_t depth);

// Pearson's chi-square statistic of `samples` against `dist`, tokens whose expected count is
// under 5 pooled into one bin (with every token `dist` does not hold): {statistic, degrees of
// freedom}.
std::pair<double, int> chi_square_fit(const std::vector<int32_t>& samples, const std::map<int32_t, double>& dist);

// The chi-square distribution's 99.9th percentile (Wilson and Hilferty's approximation).
double chi_square_999(int df);

}  // namespace eaglevk::testing
