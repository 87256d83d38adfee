#include "support/reference.h"

#include <cmath>
#include <cstring>
#include <limits>

#include <glm/gtc/packing.hpp>

namespace eaglevk::testing {

std::vector<float> random_floats(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> out(n);
  for (float& v : out) v = dist(rng);
  return out;
}

std::vector<uint16_t> to_f16(const std::vector<float>& x) {
  std::vector<uint16_t> out(x.size());
  // _Float16 conversion rounds to nearest even, as torch does (glm's packHalf1x16 does not
  // always).
  for (size_t i = 0; i < x.size(); ++i) {
    _Float16 h = static_cast<_Float16>(x[i]);
    std::memcpy(&out[i], &h, 2);
  }
  return out;
}

std::vector<uint16_t> to_bf16(const std::vector<float>& x) {
  std::vector<uint16_t> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &x[i], 4);
    bits += 0x7fff + ((bits >> 16) & 1);  // round to nearest even
    out[i] = uint16_t(bits >> 16);
  }
  return out;
}

float f16_to_float(uint16_t h) { return glm::unpackHalf1x16(h); }  // exact

float bf16_to_float(uint16_t h) {
  uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

std::vector<float> round_through(const std::vector<float>& x, ops::WeightType t) {
  std::vector<float> out(x);
  if (t == ops::WeightType::F16)
    for (float& v : out) v = float(static_cast<_Float16>(v));
  if (t == ops::WeightType::BF16) {
    auto b = to_bf16(x);
    for (size_t i = 0; i < x.size(); ++i) out[i] = bf16_to_float(b[i]);
  }
  return out;
}

std::vector<uint8_t> weight_bytes(const std::vector<float>& x, ops::WeightType t) {
  std::vector<uint8_t> out;
  if (t == ops::WeightType::F32) {
    out.resize(x.size() * 4);
    std::memcpy(out.data(), x.data(), out.size());
  } else {
    auto h = t == ops::WeightType::F16 ? to_f16(x) : to_bf16(x);
    out.resize(h.size() * 2);
    std::memcpy(out.data(), h.data(), out.size());
  }
  return out;
}

std::vector<double> ref_matmul(const std::vector<float>& x, const std::vector<float>& w, uint32_t rows, uint32_t n,
                               uint32_t k) {
  std::vector<double> y(size_t(rows) * n);
  for (uint32_t r = 0; r < rows; ++r)
    for (uint32_t j = 0; j < n; ++j) {
      double s = 0;
      for (uint32_t i = 0; i < k; ++i) s += double(x[size_t(r) * k + i]) * double(w[size_t(j) * k + i]);
      y[size_t(r) * n + j] = s;
    }
  return y;
}

std::vector<double> ref_rms_norm(const std::vector<float>& x, const std::vector<float>* w, uint32_t rows, uint32_t dim,
                                 float eps) {
  std::vector<double> y(size_t(rows) * dim);
  for (uint32_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (uint32_t i = 0; i < dim; ++i) ss += double(x[size_t(r) * dim + i]) * x[size_t(r) * dim + i];
    double scale = 1.0 / std::sqrt(ss / dim + eps);
    for (uint32_t i = 0; i < dim; ++i)
      y[size_t(r) * dim + i] = x[size_t(r) * dim + i] * scale * (w ? double((*w)[i]) : 1.0);
  }
  return y;
}

std::vector<double> ref_rope(const std::vector<float>& x, const std::vector<int32_t>& pos,
                             const std::vector<float>& inv_freq, uint32_t rows, uint32_t heads, uint32_t head_dim,
                             bool interleaved) {
  std::vector<double> y(x.begin(), x.end());
  uint32_t half = head_dim / 2;
  for (uint32_t r = 0; r < rows; ++r)
    for (uint32_t h = 0; h < heads; ++h)
      for (uint32_t i = 0; i < half; ++i) {
        double angle = double(float(pos[r]) * inv_freq[i]);
        size_t base = size_t(r) * heads * head_dim + size_t(h) * head_dim;
        size_t a = interleaved ? base + 2 * i : base + i;
        size_t b = interleaved ? base + 2 * i + 1 : base + i + half;
        double x0 = x[a], x1 = x[b];
        y[a] = x0 * std::cos(angle) - x1 * std::sin(angle);
        y[b] = x1 * std::cos(angle) + x0 * std::sin(angle);
      }
  return y;
}

std::vector<double> ref_attention(const std::vector<float>& q, const std::vector<float>& k_cache,
                                  const std::vector<float>& v_cache, const std::vector<int32_t>& pos, uint32_t rows,
                                  const RefAttention& a) {
  uint32_t hd = a.head_dim, kv_dim = a.kv_heads * hd, group = a.heads / a.kv_heads;
  std::vector<double> out(size_t(rows) * a.heads * hd, 0.0);
  for (uint32_t r = 0; r < rows; ++r)
    for (uint32_t h = 0; h < a.heads; ++h) {
      uint32_t kvh = h / group;
      double qs = a.scale * (a.qscale ? (*a.qscale)[r] : 1.0f);
      std::vector<double> scores;
      std::vector<uint32_t> keys;
      for (uint32_t j = 0; j < a.kv_len; ++j) {
        if (int32_t(j) > pos[r]) continue;
        if (a.chunk && j / a.chunk != uint32_t(pos[r]) / a.chunk) continue;
        if (a.mask && !((*a.mask)[size_t(r) * a.mask_words + j / 32] >> (j % 32) & 1)) continue;
        double s = 0;
        for (uint32_t d = 0; d < hd; ++d)
          s += double(q[(size_t(r) * a.heads + h) * hd + d]) * k_cache[size_t(j) * kv_dim + kvh * hd + d];
        scores.push_back(s * qs);
        keys.push_back(j);
      }
      if (keys.empty()) continue;
      double m = -std::numeric_limits<double>::infinity();
      for (double s : scores) m = std::max(m, s);
      double sum = 0;
      for (double& s : scores) sum += (s = std::exp(s - m));
      for (uint32_t d = 0; d < hd; ++d) {
        double acc = 0;
        for (size_t i = 0; i < keys.size(); ++i) acc += scores[i] * v_cache[size_t(keys[i]) * kv_dim + kvh * hd + d];
        out[(size_t(r) * a.heads + h) * hd + d] = acc / sum;
      }
    }
  return out;
}

std::vector<double> ref_swiglu(const std::vector<float>& gate, const std::vector<float>& up) {
  std::vector<double> y(gate.size());
  for (size_t i = 0; i < gate.size(); ++i) y[i] = gate[i] / (1.0 + std::exp(-double(gate[i]))) * up[i];
  return y;
}

std::vector<double> ref_softmax(const std::vector<float>& x, uint32_t rows, uint32_t n, float inv_temp) {
  std::vector<double> y(x.size());
  for (uint32_t r = 0; r < rows; ++r) {
    double m = -std::numeric_limits<double>::infinity(), sum = 0;
    for (uint32_t i = 0; i < n; ++i) m = std::max(m, double(x[size_t(r) * n + i]) * inv_temp);
    for (uint32_t i = 0; i < n; ++i) sum += (y[size_t(r) * n + i] = std::exp(double(x[size_t(r) * n + i]) * inv_temp - m));
    for (uint32_t i = 0; i < n; ++i) y[size_t(r) * n + i] /= sum;
  }
  return y;
}

std::vector<int32_t> ref_argmax(const std::vector<float>& x, uint32_t rows, uint32_t n) {
  std::vector<int32_t> out(rows);
  for (uint32_t r = 0; r < rows; ++r) {
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; ++i)
      if (x[size_t(r) * n + i] > x[size_t(r) * n + best]) best = i;
    out[r] = int32_t(best);
  }
  return out;
}

}  // namespace eaglevk::testing
