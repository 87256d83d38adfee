#include "runtime/engine/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>

#include <eaglevk/error.h>

namespace eaglevk::engine {

void check_sampling(const SamplingParams& p) {
  if (!std::isfinite(p.temperature) || p.temperature < 0)
    fail_setting(Setting::Temperature, "the temperature must be a finite number >= 0, got {}", p.temperature);
  if (p.top_k < 0) fail_setting(Setting::TopK, "top-k must be >= 0, got {}", p.top_k);
  if (!(p.top_p > 0 && p.top_p <= 1)) fail_setting(Setting::TopP, "top-p must be in (0, 1], got {}", p.top_p);
}

void check_logprobs(uint32_t n) {
  if (n > kMaxLogprobs)
    fail_setting(Setting::Logprobs, "the most likely tokens reported per token are at most {}, got {}", kMaxLogprobs, n);
}

void check_row_token(int32_t id, uint64_t position, std::string_view whose) {
  if (id == kNonFiniteRow) fail_non_finite_row(position, whose);
}

void fail_non_finite_row(uint64_t position, std::string_view whose) {
  throw NonFiniteLogits(fmt::format(
      "the {}'s logits row deciding the token at position {} is not finite (it holds a NaN or an infinity): the "
      "model's weights hold NaN or infinite values, or its activations overflowed; generation stopped",
      whose, position));
}

ops::SampleParams device_params(const SamplingParams& p, uint32_t position) {
  return ops::SampleParams{p.greedy() ? 0.0f : p.temperature, uint32_t(std::max(p.top_k, 0)), p.top_p, p.seed, position};
}

void write_row_settings(const SamplingParams& p, int32_t* record) {
  const ops::SampleParams d = device_params(p, 0);
  // The kernel's push constants carry 1 / T computed on the host; the record carries the same float.
  const float inv_temp = d.temperature > 0 ? 1.0f / d.temperature : 0.0f;
  record[SAMPLE_ROW_INV_TEMP] = std::bit_cast<int32_t>(inv_temp);
  record[SAMPLE_ROW_TOP_K] = int32_t(d.top_k);
  record[SAMPLE_ROW_TOP_P] = std::bit_cast<int32_t>(d.top_p);
  record[SAMPLE_ROW_SEED_LO] = int32_t(uint32_t(d.seed));
  record[SAMPLE_ROW_SEED_HI] = int32_t(uint32_t(d.seed >> 32));
}

std::vector<std::pair<int32_t, double>> filtered_distribution(std::span<const float> logits, const SamplingParams& p) {
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  auto by_logit = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  std::sort(order.begin(), order.end(), by_logit);
  // top-k keeps every logit >= the k-th largest (HF's `scores < topk[..., -1]` removal, and
  // the device's threshold): tokens tied with the k-th all stay.
  size_t keep = logits.size();
  if (p.top_k > 0 && size_t(p.top_k) < keep) {
    keep = size_t(p.top_k);
    while (keep < order.size() && logits[order[keep]] == logits[order[keep - 1]]) ++keep;
  }
  order.resize(keep);
  double inv_t = 1.0 / std::max(double(p.temperature), 1e-6);
  double max_logit = double(logits[order[0]]) * inv_t, total = 0;
  std::vector<std::pair<int32_t, double>> dist;
  dist.reserve(keep);
  for (int32_t id : order) {
    double e = std::exp(double(logits[id]) * inv_t - max_logit);
    dist.push_back({id, e});
    total += e;
  }
  if (p.top_p < 1) {
    double mass = 0;
    size_t n = 0;
    while (n < dist.size() && mass < p.top_p * total) mass += dist[n++].second;
    // As on the device (a threshold on the probability): tokens tied with the last kept stay.
    while (n > 0 && n < dist.size() && dist[n].second == dist[n - 1].second) ++n;
    dist.resize(std::max<size_t>(n, 1));
    total = 0;
    for (auto& d : dist) total += d.second;
  }
  for (auto& d : dist) d.second /= total;
  return dist;
}

std::vector<std::pair<int32_t, float>> top_logits(std::span<const float> logits, uint32_t k) {
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  k = std::min<uint32_t>(k, uint32_t(logits.size()));
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  std::vector<std::pair<int32_t, float>> out;
  for (uint32_t i = 0; i < k; ++i) out.push_back({order[i], logits[order[i]]});
  return out;
}

TokenLogprobs token_logprobs(std::span<const float> logits, int32_t token, uint32_t n) {
  // log p_i = l_i - (max + log sum exp(l_j - max)), summed in double.
  float max = -std::numeric_limits<float>::infinity();
  for (float v : logits) max = std::max(max, v);
  double sum = 0;
  for (float v : logits) sum += std::exp(double(v) - double(max));
  const double log_z = double(max) + std::log(sum);
  TokenLogprobs out;
  out.token = token;
  out.logprob = float(double(logits[size_t(token)]) - log_z);
  for (auto [id, v] : top_logits(logits, n)) out.top.push_back({id, float(double(v) - log_z)});
  return out;
}

}  // namespace eaglevk::engine
