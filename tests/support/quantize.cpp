#include "support/quantize.h"

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>

#include <eaglevk/error.h>

#include "loader/fp8.h"
#include "loader/quant.h"
#include "loader/quant_blocks.h"
#include "shaders/shared_constants.h"

// The quantizers that write llama.cpp's blocks: test data, and byte-for-byte checks against
// llama-quantize's output. eaglevk itself only reads blocks (loader/quant.cpp). As there, the
// arithmetic follows ggml's reference code in float, in its order, and this file is compiled
// without floating-point contraction (tests/CMakeLists.txt): an FMA would round once where ggml
// rounds twice.

namespace eaglevk::testing {

using loader::DType;
using loader::dtype_name;
using loader::e4m3_to_f32;
using loader::f16_to_f32;
using loader::f32_to_e4m3;
using loader::f32_to_f16;
using loader::kE4M3Max;
using loader::blocks::kIq4Levels;
using loader::blocks::kMxfp4Levels;
using loader::blocks::load_half;
using loader::blocks::q3_scale;
using loader::blocks::unpack_scale_min;
using loader::blocks::mxfp4_half_scale;

namespace {

void store_half(uint8_t* p, float value) {
  const uint16_t bits = f32_to_f16(value);
  std::memcpy(p, &bits, 2);
}

// Round half to even, like ggml's nearest_int (which adds 1.5 * 2^23 and reads the mantissa).
// That trick is only defined for |x| < 2^22; beyond it (an infinite or huge candidate scale) we
// saturate instead, and every caller clamps the result to its quant range anyway.
int nearest_int(float x) {
  if (!(std::fabs(x) < 4194304.0f)) return std::isnan(x) ? 0 : (x > 0 ? 4194304 : -4194304);
  return static_cast<int>(std::nearbyint(x));
}

// The element of largest magnitude, with its sign (the first one on ties).
float signed_absmax(const float* x, int n) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

void min_max(const float* x, int n, float& min, float& max) {
  min = FLT_MAX;
  max = -FLT_MAX;
  for (int j = 0; j < n; ++j) {
    if (x[j] < min) min = x[j];
    if (x[j] > max) max = x[j];
  }
}

void pack_q5(const int* q, uint8_t* qh_bytes, uint8_t* qs) {
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    qs[j] = uint8_t((q[j] & 0xF) | (q[j + 16] & 0xF) << 4);
    qh |= uint32_t((q[j] >> 4) & 1) << j;
    qh |= uint32_t((q[j + 16] >> 4) & 1) << (j + 16);
  }
  std::memcpy(qh_bytes, &qh, 4);
}

// Symmetric 4-bit: the largest-magnitude element maps to -8 exactly, so its sign picks which end
// of [-8, 7] gets the extra level. ggml rounds by adding 8.5 and truncating (x * id >= -8 keeps
// the sum non-negative), then clips 16 to 15.
void quant_q4_0(const float* x, uint8_t* b) {
  const float d = signed_absmax(x, 32) / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  store_half(b, d);
  for (int j = 0; j < 16; ++j) {
    const int lo = std::min(15, static_cast<int>(x[j] * id + 8.5f));
    const int hi = std::min(15, static_cast<int>(x[j + 16] * id + 8.5f));
    b[2 + j] = uint8_t(lo | hi << 4);
  }
}

// Affine 4-bit over [min, max]; the offset is the block minimum itself.
void quant_q4_1(const float* x, uint8_t* b) {
  float min, max;
  min_max(x, 32, min, max);
  const float d = (max - min) / 15.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  store_half(b, d);
  store_half(b + 2, min);
  for (int j = 0; j < 16; ++j) {
    const int lo = std::min(15, static_cast<int>((x[j] - min) * id + 0.5f));
    const int hi = std::min(15, static_cast<int>((x[j + 16] - min) * id + 0.5f));
    b[4 + j] = uint8_t(lo | hi << 4);
  }
}

void quant_q5_0(const float* x, uint8_t* b) {
  const float d = signed_absmax(x, 32) / -16.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  store_half(b, d);
  int q[32];
  for (int j = 0; j < 32; ++j) q[j] = std::min(31, static_cast<int>(x[j] * id + 16.5f));
  pack_q5(q, b + 2, b + 6);
}

// Like Q4_1; ggml does not clip here (the top element lands on 31 + a rounding error < 0.5).
void quant_q5_1(const float* x, uint8_t* b) {
  float min, max;
  min_max(x, 32, min, max);
  const float d = (max - min) / 31.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  store_half(b, d);
  store_half(b + 2, min);
  int q[32];
  for (int j = 0; j < 32; ++j) q[j] = static_cast<uint8_t>((x[j] - min) * id + 0.5f);
  pack_q5(q, b + 4, b + 8);
}

// Symmetric 8-bit, max |x| -> 127, rounding half away from zero (roundf), as ggml does.
void quant_q8_0(const float* x, uint8_t* b) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  store_half(b, d);
  for (int j = 0; j < 32; ++j) b[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::round(x[j] * id)));
}

void pack_scale_min(uint8_t* s, int j, int scale, int min) {  // s starts zeroed
  if (j < 4) {
    s[j] |= uint8_t(scale);
    s[j + 4] |= uint8_t(min);
  } else {
    s[j + 4] |= uint8_t((scale & 0xF) | (min & 0xF) << 4);
    s[j - 4] |= uint8_t((scale >> 4) << 6);
    s[j] |= uint8_t((min >> 4) << 6);
  }
}

// An asymmetric fit of n values to x ~ scale * L - min_out, L in [0, nmax], min_out >= 0, by
// weighted least squares (ggml's make_qkx2_quants). Starting from the plain min/max grid it
// tries nsteps + 1 grid spacings around nmax / (max - min); for each it rounds, solves the 2x2
// normal equations for scale and min and keeps the fit with the smallest weighted error, squared
// or (absolute_error, as Q2_K asks) absolute. The first-level fit keeps min at 0 when the data do
// not reach below zero, so a positive block never gets a negative offset.
float fit_scale_min(const float* x, const float* w, int n, int nmax, float rmin, float rdelta, int nsteps,
                    bool absolute_error, uint8_t* L, float& min_out) {
  auto cost = [absolute_error](float diff) { return absolute_error ? std::fabs(diff) : diff * diff; };
  float min = x[0], max = x[0];
  float sum_w = w[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    min = std::min(min, x[i]);
    max = std::max(max, x[i]);
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    std::fill(L, L + n, 0);
    min_out = -min;
    return 0.0f;
  }
  float iscale = static_cast<float>(nmax) / (max - min);
  float scale = 1.0f / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    L[i] = uint8_t(std::clamp(nearest_int(iscale * (x[i] - min)), 0, nmax));
    const float diff = scale * static_cast<float>(L[i]) + min - x[i];
    best_error += w[i] * cost(diff);
  }
  uint8_t candidate[QK_K_ELEMS];
  for (int step = 0; step <= nsteps; ++step) {
    iscale = (rmin + rdelta * static_cast<float>(step) + static_cast<float>(nmax)) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest_int(iscale * (x[i] - min)), 0, nmax);
      candidate[i] = uint8_t(l);
      const float fl = static_cast<float>(l);
      sum_l += w[i] * fl;
      sum_l2 += w[i] * fl * fl;   // (w * l) * l, as ggml
      sum_xl += w[i] * fl * x[i]; // (w * l) * x
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (!(det > 0)) continue;
    float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
    float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
    if (this_min > 0) {  // an offset above zero is not representable (min_out >= 0): refit through 0
      this_min = 0;
      this_scale = sum_xl / sum_l2;
    }
    float error = 0;
    for (int i = 0; i < n; ++i) {
      const float diff = this_scale * static_cast<float>(candidate[i]) + this_min - x[i];
      error += w[i] * cost(diff);
    }
    if (error < best_error) {
      std::copy(candidate, candidate + n, L);
      best_error = error;
      scale = this_scale;
      min = this_min;
    }
  }
  min_out = -min;
  return scale;
}

// A symmetric fit x ~ scale * (L - nmax), L - nmax in [-nmax, nmax - 1], weighted by x^2 (ggml's
// make_qx_quants with rmse_type 1 and no importance weights). The scale is signed: the largest
// magnitude maps to -nmax, the end of the range with the extra level. It tries the grid spacings
// (nmax + 0.1 k) / max for k = -9..9 and keeps the one whose least-squares scale explains most of
// the weighted energy (largest sumlx^2 / suml2).
float fit_symmetric(const float* x, int n, int nmax, uint8_t* L) {
  const float max = signed_absmax(x, n);
  if (std::fabs(max) < 1e-15f) {  // an all-zero group
    std::fill(L, L + n, 0);
    return 0.0f;
  }
  auto project = [&](float iscale, float& sumlx, float& suml2, bool store) {
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
      if (store) L[i] = uint8_t(l + nmax);
      const float w = x[i] * x[i], fl = static_cast<float>(l);
      sumlx += w * x[i] * fl;  // ((w * x) * l), as ggml
      suml2 += w * fl * fl;
    }
  };
  float sumlx, suml2;
  project(static_cast<float>(-nmax) / max, sumlx, suml2, true);
  float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int k = -9; k <= 9; ++k) {
    if (k == 0) continue;
    const float iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(k)) / max;
    project(iscale, sumlx, suml2, false);
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      project(iscale, sumlx, suml2, true);
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// A symmetric 3-bit fit x ~ scale * (L - nmax), L - nmax in [-nmax, nmax - 1], weighted by x^2
// (ggml's make_q3_quants with its refinement): from the grid that maps the largest magnitude to
// -nmax it moves one value at a time to the level its least-squares scale without that value
// suggests, keeping each move that explains more of the weighted energy (sumlx^2 / suml2), for
// at most five passes. Returns that scale.
float fit_q3(const float* x, int n, int nmax, int8_t* L) {
  const float max = signed_absmax(x, n);
  if (std::fabs(max) < 1e-15f) {
    std::fill(L, L + n, 0);
    return 0.0f;
  }
  const float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    L[i] = int8_t(l);
    const float w = x[i] * x[i], fl = static_cast<float>(l);
    sumlx += w * x[i] * fl;  // ((w * x) * l), as ggml
    suml2 += w * fl * fl;
  }
  for (int pass = 0; pass < 5; ++pass) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i], old = static_cast<float>(L[i]);
      float slx = sumlx - w * x[i] * old;
      if (!(slx > 0)) continue;
      float sl2 = suml2 - w * old * old;
      const int l = std::clamp(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
      if (l == L[i]) continue;
      const float fl = static_cast<float>(l);
      slx += w * x[i] * fl;
      sl2 += w * fl * fl;
      if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
        L[i] = int8_t(l);
        sumlx = slx;
        suml2 = sl2;
        ++changed;
      }
    }
    if (changed == 0) break;
  }
  for (int i = 0; i < n; ++i) L[i] = int8_t(L[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// Packs 256 2-bit codes as code2 reads them.
void pack_code2(const uint8_t* L, uint8_t* qs) {
  for (int h = 0; h < 2; ++h)
    for (int l = 0; l < 32; ++l) {
      const uint8_t* q = L + 128 * h + l;
      qs[32 * h + l] = uint8_t(q[0] | q[32] << 2 | q[64] << 4 | q[96] << 6);
    }
}

// Q2_K (ggml's reference): each group of 16 fitted asymmetrically to 2 bits (weights |x|, absolute
// error, grid -0.5 + 0.1 k, k = 0..15); the groups' scales and mins quantized to 4 bits against
// the block's largest ones, and the values re-rounded with the stored scales.
void quant_q2_k(const float* x, uint8_t* b) {
  uint8_t L[QK_K_ELEMS];
  float scales[16], mins[16];
  float max_scale = 0, max_min = 0;
  for (int g = 0; g < 16; ++g) {
    float w[16];
    for (int l = 0; l < 16; ++l) w[l] = std::fabs(x[16 * g + l]);
    scales[g] = fit_scale_min(x + 16 * g, w, 16, 3, -0.5f, 0.1f, 15, true, L + 16 * g, mins[g]);
    max_scale = std::max(max_scale, scales[g]);
    max_min = std::max(max_min, mins[g]);
  }
  std::memset(b, 0, QK2_K_BYTES);
  uint8_t* packed = b;
  if (max_scale > 0) {
    const float iscale = 15.0f / max_scale;
    for (int g = 0; g < 16; ++g) packed[g] = uint8_t(nearest_int(iscale * scales[g]));
    store_half(b + 80, max_scale / 15.0f);
  }
  if (max_min > 0) {
    const float iscale = 15.0f / max_min;
    for (int g = 0; g < 16; ++g) packed[g] |= uint8_t(nearest_int(iscale * mins[g]) << 4);
    store_half(b + 82, max_min / 15.0f);
  }
  const float d = load_half(b + 80), dmin = load_half(b + 82);
  for (int g = 0; g < 16; ++g) {
    const float dl = d * static_cast<float>(packed[g] & 0xF);
    if (dl == 0) continue;
    const float ml = dmin * static_cast<float>(packed[g] >> 4);
    for (int l = 0; l < 16; ++l) L[16 * g + l] = uint8_t(std::clamp(nearest_int((x[16 * g + l] + ml) / dl), 0, 3));
  }
  pack_code2(L, b + 16);
}

// Q3_K (ggml's reference): each group of 16 fitted symmetrically to 3 bits (fit_q3); the signed
// scales quantized to 6 bits (stored plus 32) so that the largest-magnitude one becomes -32, and
// the values re-rounded with the stored scales. The third bit of each code goes to hmask.
void quant_q3_k(const float* x, uint8_t* b) {
  int8_t L[QK_K_ELEMS];
  float scales[16];
  for (int g = 0; g < 16; ++g) scales[g] = fit_q3(x + 16 * g, 16, 4, L + 16 * g);
  const float max_scale = signed_absmax(scales, 16);
  std::memset(b, 0, QK3_K_BYTES);
  uint8_t* packed = b + 96;
  if (max_scale != 0) {
    const float iscale = -32.0f / max_scale;
    for (int g = 0; g < 16; ++g) {
      const int l = std::clamp<int>(int8_t(nearest_int(iscale * scales[g])), -32, 31) + 32;
      packed[g % 8] |= uint8_t((l & 0xF) << (g < 8 ? 0 : 4));
      packed[8 + g % 4] |= uint8_t((l >> 4) << (2 * (g / 4)));
    }
    store_half(b + 108, 1.0f / iscale);
  }
  const float d = load_half(b + 108);
  for (int g = 0; g < 16; ++g) {
    const float dl = d * static_cast<float>(q3_scale(packed, g));
    if (dl == 0) continue;
    for (int l = 0; l < 16; ++l) L[16 * g + l] = int8_t(std::clamp(nearest_int(x[16 * g + l] / dl), -4, 3) + 4);
  }
  uint8_t codes[QK_K_ELEMS];
  for (int e = 0; e < 256; ++e) {
    const bool high = L[e] > 3;
    if (high) b[e % 32] |= uint8_t(1 << (e / 32));
    codes[e] = uint8_t(high ? L[e] - 4 : L[e]);
  }
  pack_code2(codes, b + 32);
}

// Q4_K and Q5_K share everything but the quant width and the search grid (ggml's reference
// quantizers: weights |x| + rms of the sub-block; grid -1 + 0.1 k, k = 0..20, for 4 bits and
// -0.5 + 0.1 k, k = 0..15, for 5 bits). Sub-block scales and mins are then quantized to 6 bits
// against the block's largest ones, and the values re-rounded with the scales as stored.
void quant_k_scaled(const float* x, int nmax, float rmin, int nsteps, uint8_t* b, uint8_t* L) {
  float scales[8], mins[8];
  float max_scale = 0, max_min = 0;
  for (int sub = 0; sub < 8; ++sub) {
    const float* xs = x + 32 * sub;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float av_x = std::sqrt(sum_x2 / 32.0f);
    float w[32];
    for (int l = 0; l < 32; ++l) w[l] = av_x + std::fabs(xs[l]);
    scales[sub] = fit_scale_min(xs, w, 32, nmax, rmin, 0.1f, nsteps, false, L + 32 * sub, mins[sub]);
    max_scale = std::max(max_scale, scales[sub]);
    max_min = std::max(max_min, mins[sub]);
  }
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  uint8_t* packed = b + 4;
  std::memset(packed, 0, 12);
  for (int sub = 0; sub < 8; ++sub) {
    // ggml stores nearest_int into a uint8_t before clipping to 63; keep that wrap-around.
    const int ls = std::min<int>(63, uint8_t(nearest_int(inv_scale * scales[sub])));
    const int lm = std::min<int>(63, uint8_t(nearest_int(inv_min * mins[sub])));
    pack_scale_min(packed, sub, ls, lm);
  }
  store_half(b, max_scale / 63.0f);
  store_half(b + 2, max_min / 63.0f);
  const float d = load_half(b), dmin = load_half(b + 2);
  for (int sub = 0; sub < 8; ++sub) {
    int sc, m;
    unpack_scale_min(packed, sub, sc, m);
    const float dl = d * static_cast<float>(sc);
    if (dl == 0) continue;  // keep the fit's own quants; they decode to -dmin * m either way
    const float ml = dmin * static_cast<float>(m);
    for (int l = 0; l < 32; ++l)
      L[32 * sub + l] = uint8_t(std::clamp(nearest_int((x[32 * sub + l] + ml) / dl), 0, nmax));
  }
}

void quant_q4_k(const float* x, uint8_t* b) {
  uint8_t L[QK_K_ELEMS];
  quant_k_scaled(x, 15, -1.0f, 20, b, L);
  uint8_t* qs = b + 16;
  for (int pair = 0; pair < 4; ++pair)
    for (int l = 0; l < 32; ++l) qs[32 * pair + l] = uint8_t(L[64 * pair + l] | L[64 * pair + 32 + l] << 4);
}

void quant_q5_k(const float* x, uint8_t* b) {
  uint8_t L[QK_K_ELEMS];
  quant_k_scaled(x, 31, -0.5f, 15, b, L);
  uint8_t* qh = b + 16;
  uint8_t* qs = b + 48;
  std::memset(qh, 0, 32 + 128);
  for (int sub = 0; sub < 8; ++sub) {  // the inverse of dequant_q5_k's addressing
    for (int l = 0; l < 32; ++l) {
      const int q = L[32 * sub + l];
      qs[32 * (sub / 2) + l] |= uint8_t((q & 0xF) << (4 * (sub % 2)));
      qh[l] |= uint8_t((q >> 4) << sub);
    }
  }
}

// Q6_K (ggml's reference): a symmetric 6-bit fit per 16 values, then the 16 signed scales
// quantized to int8 so that the largest-magnitude one becomes -128 (later ones saturate at 127),
// and the values re-rounded with the stored scales.
void quant_q6_k(const float* x, uint8_t* b) {
  uint8_t L[QK_K_ELEMS];
  float scales[16];
  for (int sub = 0; sub < 16; ++sub) scales[sub] = fit_symmetric(x + 16 * sub, 16, 32, L + 16 * sub);
  const float max_scale = signed_absmax(scales, 16);
  std::memset(b, 0, QK6_K_BYTES);
  if (std::fabs(max_scale) < 1e-15f) return;  // an all-zero block: d = 0, everything zero
  int8_t* stored_scales = reinterpret_cast<int8_t*>(b + 192);
  const float iscale = -128.0f / max_scale;
  store_half(b + 208, 1.0f / iscale);
  for (int sub = 0; sub < 16; ++sub) stored_scales[sub] = int8_t(std::min(127, nearest_int(iscale * scales[sub])));
  const float d = load_half(b + 208);
  for (int sub = 0; sub < 16; ++sub) {
    const float dl = d * static_cast<float>(stored_scales[sub]);
    if (dl == 0) continue;
    for (int l = 0; l < 16; ++l)
      L[16 * sub + l] = uint8_t(std::clamp(nearest_int(x[16 * sub + l] / dl), -32, 31) + 32);
  }
  uint8_t* ql = b;
  uint8_t* qh = b + 128;
  for (int e = 0; e < 256; ++e) {  // the inverse of dequant_q6_k's addressing
    const int h = e / 128, k = (e % 128) / 32, l = e % 32;
    ql[64 * h + l + 32 * (k % 2)] |= uint8_t((L[e] & 0xF) << (4 * (k / 2)));
    qh[32 * h + l] |= uint8_t((L[e] >> 4) << (2 * k));
  }
}

// ggml's quantize_row_mxfp4_ref (what llama-quantize writes; it takes no importance matrix): the
// exponent puts the largest magnitude in [4, 8) levels (floor(log2(amax)) - 2, biased by 127;
// 0 for an all-zero block), then each element takes the level nearest x / d, the first of equals.
void quant_mxfp4(const float* x, uint8_t* b) {
  float amax = 0;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  // (ggml converts a negative exponent, amax < 2^-125, to uint8_t unchecked; here it is 0.)
  const float exponent = amax > 0 ? std::floor(std::log2(amax)) - 2 + 127 : 0.0f;
  const uint8_t e = static_cast<uint8_t>(std::max(exponent, 0.0f));
  const float d = mxfp4_half_scale(e);
  auto nearest = [&](float v) {
    int best = 0;
    float best_error = std::fabs(static_cast<float>(kMxfp4Levels[0]) * d - v);
    for (int i = 1; i < 16; ++i) {
      const float error = std::fabs(static_cast<float>(kMxfp4Levels[i]) * d - v);
      if (error < best_error) {
        best = i;
        best_error = error;
      }
    }
    return best;
  };
  b[0] = e;
  for (int j = 0; j < 16; ++j) b[1 + j] = uint8_t(nearest(x[j]) | nearest(x[j + 16]) << 4);
}

// The level nearest to x (the upper one on a tie), by bisection as ggml's best_index_int8.
int nearest_level(float x) {
  if (x <= kIq4Levels[0]) return 0;
  if (x >= kIq4Levels[15]) return 15;
  int lo = 0, hi = 15;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    (x < kIq4Levels[mid] ? hi : lo) = mid;
  }
  return x - kIq4Levels[hi - 1] < kIq4Levels[hi] - x ? hi - 1 : hi;
}

// A run's scale as llama-quantize chooses it without an importance matrix (ggml's
// quantize_row_iq4_nl_impl with ntry 7, which quantize_iq4_nl and quantize_iq4_xs pass; the
// _ref entry points pass -1 and are not what files hold): weights x^2; starting from the scale
// that maps the largest magnitude to the level -127, the least-squares scale of each of the
// grids (k - 127) / max, k = -7..7, and the one that explains most weighted energy (sumqx^2 /
// sumq2) wins. An all-zero run gets 0.
float fit_iq4_run(const float* x) {
  const float max = signed_absmax(x, 32);
  if (std::fabs(max) < 1e-15f) return 0.0f;
  auto project = [&](float inverse, float& sumqx, float& sumq2) {
    sumqx = sumq2 = 0;
    for (int j = 0; j < 32; ++j) {
      const float q = static_cast<float>(kIq4Levels[nearest_level(inverse * x[j])]), w = x[j] * x[j];
      sumqx += w * q * x[j];  // ((w * q) * x), as ggml
      sumq2 += w * q * q;
    }
  };
  float sumqx, sumq2;
  project(1.0f / (-max / static_cast<float>(kIq4Levels[0])), sumqx, sumq2);
  float d = sumq2 > 0 ? sumqx / sumq2 : 0.0f, best = d * sumqx;
  for (int k = -7; k <= 7; ++k) {
    project(static_cast<float>(k + kIq4Levels[0]) / max, sumqx, sumq2);
    if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
      d = sumqx / sumq2;
      best = d * sumqx;
    }
  }
  return d;
}

// Writes a run's 32 indices for the scale d (0: the level nearest zero) in IQ4's nibble order.
void put_iq4_run(const float* x, float d, uint8_t* qs) {
  const float inverse = d != 0 ? 1.0f / d : 0.0f;
  for (int j = 0; j < 16; ++j)
    qs[j] = uint8_t(nearest_level(inverse * x[j]) | nearest_level(inverse * x[j + 16]) << 4);
}

void quant_iq4_nl(const float* x, uint8_t* b) {
  const float d = fit_iq4_run(x);
  store_half(b, d);
  put_iq4_run(x, d, b + 2);
}

// IQ4_XS: each run's scale fitted as IQ4_NL's, then the scales quantized to 6 bits against the
// largest-magnitude one (d = -max / 32, kept unrounded for the indices as ggml does), and each
// run's indices chosen for its stored scale.
void quant_iq4_xs(const float* x, uint8_t* b) {
  float scales[8];
  for (int run = 0; run < 8; ++run) scales[run] = fit_iq4_run(x + 32 * run);
  std::memset(b, 0, QK4_XS_BYTES);
  const float d = -signed_absmax(scales, 8) / 32.0f;
  store_half(b, d);
  const float inverse = d != 0 ? 1.0f / d : 0.0f;
  uint16_t high = 0;
  for (int run = 0; run < 8; ++run) {
    const int l = std::clamp(nearest_int(inverse * scales[run]), -32, 31);
    put_iq4_run(x + 32 * run, d * static_cast<float>(l), b + 8 + 16 * run);
    b[4 + run / 2] |= uint8_t(((l + 32) & 0xF) << (4 * (run % 2)));
    high |= uint16_t(((l + 32) >> 4) << (2 * run));
  }
  b[2] = uint8_t(high & 0xFF);
  b[3] = uint8_t(high >> 8);
}

// Test data in the checkpoints' own recipe (llm-compressor's): the scale maps the block's
// largest magnitude to 448, the codes round x / scale to nearest even. A zero block gets scale 0.
void quant_fp8_b32(const float* x, uint8_t* b) {
  float amax = 0;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / kE4M3Max;
  std::memcpy(b, &d, 4);
  for (int j = 0; j < 32; ++j) b[4 + j] = d > 0 ? f32_to_e4m3(x[j] / d) : 0;
}

// Test data as GPTQ's round-to-nearest without calibration: asymmetric, the block's range over
// 15 steps, d and the zero stored as the files store them (d rounded to f16, a 4-bit zero).
void quant_int4_b32(const float* x, uint8_t* b) {
  float lo = x[0], hi = x[0];
  for (int j = 1; j < 32; ++j) lo = std::min(lo, x[j]), hi = std::max(hi, x[j]);
  lo = std::min(lo, 0.0f), hi = std::max(hi, 0.0f);
  float d = f16_to_f32(f32_to_f16((hi - lo) / 15.0f));
  if (d == 0) d = 1;
  const int zero = std::clamp(static_cast<int>(std::nearbyint(-lo / d)), 0, 15);
  const float m = -static_cast<float>(zero) * d;
  std::memcpy(b, &d, 4);
  std::memcpy(b + 4, &m, 4);
  for (int j = 0; j < 16; ++j) {
    const int q0 = std::clamp(static_cast<int>(std::nearbyint(x[j] / d)) + zero, 0, 15);
    const int q1 = std::clamp(static_cast<int>(std::nearbyint(x[j + 16] / d)) + zero, 0, 15);
    b[8 + j] = static_cast<uint8_t>(q0 | (q1 << 4));
  }
}

using QuantBlock = void (*)(const float*, uint8_t*);

QuantBlock quant_fn(DType dtype) {
  switch (dtype) {
    case DType::Q4_0: return quant_q4_0;
    case DType::Q4_1: return quant_q4_1;
    case DType::Q5_0: return quant_q5_0;
    case DType::Q5_1: return quant_q5_1;
    case DType::Q8_0: return quant_q8_0;
    case DType::Q2_K: return quant_q2_k;
    case DType::Q3_K: return quant_q3_k;
    case DType::Q4_K: return quant_q4_k;
    case DType::Q5_K: return quant_q5_k;
    case DType::Q6_K: return quant_q6_k;
    case DType::IQ4_NL: return quant_iq4_nl;
    case DType::IQ4_XS: return quant_iq4_xs;
    case DType::MXFP4: return quant_mxfp4;
    case DType::FP8_B32: return quant_fp8_b32;
    case DType::INT4_B32: return quant_int4_b32;
    default: return nullptr;
  }
}

}  // namespace

void quantize(DType dtype, std::span<const float> in, std::vector<std::byte>& out) {
  if (!loader::is_quantized(dtype)) fail("quantize: dtype {} is not a block-quantized type", dtype_name(dtype));
  const size_t elements = loader::block_elements(dtype), bytes = loader::block_bytes(dtype);
  if (in.size() % elements != 0)
    fail("quantize {}: {} elements is not a whole number of {}-element blocks", dtype_name(dtype), in.size(),
         elements);
  const QuantBlock encode = quant_fn(dtype);
  if (!encode)
    fail("quantize: eaglevk reads {} blocks but does not write them (llama-quantize needs an importance matrix "
         "and a lattice search for them)",
         dtype_name(dtype));
  const size_t n_blocks = in.size() / elements;
  const size_t start = out.size();
  out.resize(start + n_blocks * bytes);
  uint8_t* dst = reinterpret_cast<uint8_t*>(out.data() + start);
  for (size_t i = 0; i < n_blocks; ++i) encode(in.data() + i * elements, dst + i * bytes);
}

}  // namespace eaglevk::testing
