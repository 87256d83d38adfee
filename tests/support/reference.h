#pragma once
// Plain CPU references for every op: obvious loops, double accumulation. They define what
// the shaders must compute.
#include <cstdint>
#include <random>
#include <vector>

#include "runtime/ops/tensor.h"

namespace eaglevk::testing {

std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f);

// Host encodings of weights and what they decode to.
std::vector<uint16_t> to_f16(const std::vector<float>& x);
std::vector<uint16_t> to_bf16(const std::vector<float>& x);
float f16_to_float(uint16_t h);
float bf16_to_float(uint16_t h);
// Rounds x through the precision t (identity for f32).
std::vector<float> round_through(const std::vector<float>& x, ops::WeightType t);
// The bytes a weight buffer of type t holds for x.
std::vector<uint8_t> weight_bytes(const std::vector<float>& x, ops::WeightType t);

std::vector<double> ref_matmul(const std::vector<float>& x, const std::vector<float>& w, uint32_t rows, uint32_t n,
                               uint32_t k);
std::vector<double> ref_rms_norm(const std::vector<float>& x, const std::vector<float>* w, uint32_t rows, uint32_t dim,
                                 float eps);
std::vector<double> ref_rope(const std::vector<float>& x, const std::vector<int32_t>& pos,
                             const std::vector<float>& inv_freq, uint32_t rows, uint32_t heads, uint32_t head_dim,
                             bool interleaved);
struct RefAttention {
  uint32_t heads, kv_heads, head_dim, kv_len, chunk;
  float scale;
  const std::vector<uint32_t>* mask = nullptr;  // [rows][mask_words]
  uint32_t mask_words = 0;
  const std::vector<float>* qscale = nullptr;
};
// k_cache / v_cache: [kv_len][kv_heads * head_dim] already rounded to f16.
std::vector<double> ref_attention(const std::vector<float>& q, const std::vector<float>& k_cache,
                                  const std::vector<float>& v_cache, const std::vector<int32_t>& pos, uint32_t rows,
                                  const RefAttention& a);
std::vector<double> ref_swiglu(const std::vector<float>& gate, const std::vector<float>& up);
std::vector<double> ref_softmax(const std::vector<float>& x, uint32_t rows, uint32_t n, float inv_temp);
std::vector<int32_t> ref_argmax(const std::vector<float>& x, uint32_t rows, uint32_t n);

}  // namespace eaglevk::testing
