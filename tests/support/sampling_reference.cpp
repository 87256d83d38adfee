#include "support/sampling_reference.h"
#include "support/target_runner.h"

#include <cmath>

#include "support/real_dims.h"

namespace eaglevk::testing {

std::vector<std::map<int32_t, double>> plain_sampling_distributions(TargetRunner& runner,
                                                                   const std::vector<int32_t>& prompt,
                                                                   const engine::SamplingParams& params, uint32_t depth) {
  std::vector<std::map<int32_t, double>> out(depth);
  // Every history the filter can produce, with its probability.
  std::vector<std::pair<std::vector<int32_t>, double>> histories = {{prompt, 1.0}};
  for (uint32_t t = 0; t < depth; ++t) {
    std::vector<std::pair<std::vector<int32_t>, double>> next;
    for (const auto& [ids, p_history] : histories)
      for (const auto& [token, p] : engine::filtered_distribution(last_logits(runner, ids, runner.max_rows()), params)) {
        out[t][token] += p_history * p;
        if (t + 1 < depth) {
          std::vector<int32_t> longer = ids;
          longer.push_back(token);
          next.push_back({std::move(longer), p_history * p});
        }
      }
    histories = std::move(next);
  }
  return out;
}

std::pair<double, int> chi_square_fit(const std::vector<int32_t>& samples, const std::map<int32_t, double>& dist) {
  std::map<int32_t, double> seen;
  for (int32_t x : samples) seen[x] += 1;
  const double n = double(samples.size());
  std::vector<std::pair<double, double>> bins;  // observed, expected
  std::pair<double, double> pooled{0, 0};
  for (const auto& [id, p] : dist) {
    const double observed = seen.count(id) ? seen[id] : 0.0;
    if (n * p >= 5) bins.push_back({observed, n * p});
    else pooled = {pooled.first + observed, pooled.second + n * p};
  }
  for (const auto& [id, count] : seen)
    if (!dist.count(id)) pooled.first += count;
  if (pooled.first + pooled.second > 0) bins.push_back(pooled);
  double stat = 0;
  for (const auto& [observed, expected] : bins) {
    // A token drawn that the distribution cannot give fails the test outright.
    if (expected <= 0) return {observed > 0 ? INFINITY : stat, int(bins.size()) - 1};
    stat += (observed - expected) * (observed - expected) / expected;
  }
  return {stat, int(bins.size()) - 1};
}

double chi_square_999(int df) {
  const double z = 3.0902, v = 2.0 / (9.0 * df);
  return df * std::pow(1 - v + z * std::sqrt(v), 3);
}

}  // namespace eaglevk::testing
