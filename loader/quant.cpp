#include "loader/quant.h"

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <iterator>

#include <eaglevk/error.h>

#include "loader/fp8.h"
#include "loader/int4.h"
#include "shaders/iq_grids.h"
#include "shaders/shared_constants.h"

// Everything here works on single blocks through byte pointers; the arithmetic is written in
// float, in the same order as ggml's reference code, because the point of this file is to
// produce (and read) exactly the bytes and floats llama.cpp does. Changing an expression's
// association (say `(w * l) * l` into `w * (l * l)`) can change a rounding and break the
// byte-for-byte tests, so such expressions carry a note. For the same reason this file must not
// be compiled with floating-point contraction into FMA (e.g. -march=native with GCC's default
// -ffp-contract=fast): `dl * q - ml` would then round once instead of twice.

namespace eaglevk::loader {

static_assert(std::endian::native == std::endian::little, "block formats are read as little-endian");

namespace {

struct BlockFormat {
  DType dtype;
  uint32_t elements;
  uint32_t bytes;
};
constexpr BlockFormat kBlockFormats[] = {
    {DType::Q4_0, QK4_0_ELEMS, QK4_0_BYTES}, {DType::Q4_1, QK4_1_ELEMS, QK4_1_BYTES},
    {DType::Q5_0, QK5_0_ELEMS, QK5_0_BYTES}, {DType::Q5_1, QK5_1_ELEMS, QK5_1_BYTES},
    {DType::Q8_0, QK8_0_ELEMS, QK8_0_BYTES}, {DType::Q2_K, QK_K_ELEMS, QK2_K_BYTES},
    {DType::Q3_K, QK_K_ELEMS, QK3_K_BYTES},  {DType::Q4_K, QK_K_ELEMS, QK4_K_BYTES},
    {DType::Q5_K, QK_K_ELEMS, QK5_K_BYTES},  {DType::Q6_K, QK_K_ELEMS, QK6_K_BYTES},
    {DType::IQ4_NL, QK4_NL_ELEMS, QK4_NL_BYTES}, {DType::IQ4_XS, QK_K_ELEMS, QK4_XS_BYTES},
    {DType::IQ1_S, QK_K_ELEMS, QK1_S_BYTES},     {DType::IQ1_M, QK_K_ELEMS, QK1_M_BYTES},
    {DType::IQ2_XXS, QK_K_ELEMS, QK2_XXS_BYTES}, {DType::IQ2_XS, QK_K_ELEMS, QK2_XS_BYTES},
    {DType::IQ2_S, QK_K_ELEMS, QK2_S_BYTES},     {DType::IQ3_XXS, QK_K_ELEMS, QK3_XXS_BYTES},
    {DType::IQ3_S, QK_K_ELEMS, QK3_S_BYTES},     {DType::MXFP4, QKMXFP4_ELEMS, QKMXFP4_BYTES},
    {DType::FP8_B32, QKFP8_ELEMS, QKFP8_BYTES},   {DType::INT4_B32, QKINT4_ELEMS, QKINT4_BYTES},
};

const BlockFormat* find_format(DType dtype) {
  for (const auto& format : kBlockFormats)
    if (format.dtype == dtype) return &format;
  return nullptr;
}

float load_half(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return f16_to_f32(bits);
}

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

// ---- The 32-element formats ----------------------------------------------------------------
// Q4_x/Q5_x keep element j (j < 16) in the low nibble of qs[j] and element j + 16 in its high
// nibble; Q5_x keep bit 4 of element e in bit e of the little-endian u32 qh.

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

void dequant_q4_0(const uint8_t* b, float* y) {
  const float d = load_half(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((qs[j] & 0xF) - 8) * d;
    y[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
  }
}

void dequant_q4_1(const uint8_t* b, float* y) {
  const float d = load_half(b), m = load_half(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(qs[j] & 0xF) * d + m;
    y[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
  }
}

// The 5-bit values of a Q5 block (0..31).
void unpack_q5(const uint8_t* qh_bytes, const uint8_t* qs, int* q) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  for (int j = 0; j < 16; ++j) {
    q[j] = (qs[j] & 0xF) | int((qh >> j) & 1) << 4;
    q[j + 16] = (qs[j] >> 4) | int((qh >> (j + 16)) & 1) << 4;
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

void dequant_q5_0(const uint8_t* b, float* y) {
  const float d = load_half(b);
  int q[32];
  unpack_q5(b + 2, b + 6, q);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(q[j] - 16) * d;
}

void dequant_q5_1(const uint8_t* b, float* y) {
  const float d = load_half(b), m = load_half(b + 2);
  int q[32];
  unpack_q5(b + 4, b + 8, q);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(q[j]) * d + m;
}

void dequant_q8_0(const uint8_t* b, float* y) {
  const float d = load_half(b);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
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

// ---- K-quants: 256-element super-blocks -----------------------------------------------------

// Q2_K and Q3_K keep 2-bit codes four to a byte: element e of a super-block is in half
// h = e / 128, byte l = e % 32 of that half's 32 code bytes, bits 2j, 2j + 1 for j = (e % 128) / 32.
// Each 16 consecutive elements share a scale (group e / 16).
int code2(const uint8_t* qs, int e) { return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3; }

// Q2_K: scales[16] (group g's 4-bit scale in the low nibble of byte g, its 4-bit min in the high
// one), qs[64], d, dmin. x = (d * sc) * q - dmin * m.
void dequant_q2_k(const uint8_t* b, float* y) {
  const uint8_t* scales = b;
  const uint8_t* qs = b + 16;
  const float d = load_half(b + 80), dmin = load_half(b + 82);
  for (int e = 0; e < 256; ++e) {
    const int sc = scales[e / 16];
    const float dl = d * static_cast<float>(sc & 0xF), ml = dmin * static_cast<float>(sc >> 4);
    y[e] = dl * static_cast<float>(code2(qs, e)) - ml;
  }
}

// Q3_K's sixteen 6-bit scales (stored plus 32) in 12 bytes: the low nibble of group g in byte g
// (g < 8) or in the high nibble of byte g - 8, its top two bits in bits 2 (g / 4), +1 of byte
// 8 + g % 4.
int q3_scale(const uint8_t* s, int g) {
  const int low = g < 8 ? s[g] & 0xF : s[g - 8] >> 4;
  return (low | ((s[8 + g % 4] >> (2 * (g / 4))) & 3) << 4) - 32;
}

// Q3_K: hmask[32], qs[64], scales[12], d. Element e's third bit is bit e / 32 of hmask[e % 32];
// a clear bit subtracts 4: q in [-4, 3]. x = (d * sc) * q.
void dequant_q3_k(const uint8_t* b, float* y) {
  const uint8_t* hmask = b;
  const uint8_t* qs = b + 32;
  const uint8_t* scales = b + 96;
  const float d = load_half(b + 108);
  for (int e = 0; e < 256; ++e) {
    const int q = code2(qs, e) - ((hmask[e % 32] >> (e / 32)) & 1 ? 0 : 4);
    y[e] = d * static_cast<float>(q3_scale(scales, e / 16)) * static_cast<float>(q);
  }
}

// Q4_K/Q5_K: 8 six-bit sub-block scales and 8 six-bit mins in 12 bytes. Sub-blocks 0-3 keep
// their scale in the low 6 bits of byte j and their min in byte j + 4. Sub-blocks 4-7 keep the
// low nibbles of scale and min in byte j + 4 (scale low, min high) and their top two bits in the
// spare top bits of byte j - 4 (scale) and byte j (min).
void unpack_scale_min(const uint8_t* s, int j, int& scale, int& min) {
  if (j < 4) {
    scale = s[j] & 63;
    min = s[j + 4] & 63;
  } else {
    scale = (s[j + 4] & 0xF) | (s[j - 4] >> 6) << 4;
    min = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
  }
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

// x = (d * sc) * q - dmin * m, each product rounded to float as ggml's dequantize_row_q4_K does.
// Element e lives in sub-block e / 32; pairs of sub-blocks share 32 bytes of qs, the even one in
// the low nibbles.
void dequant_q4_k(const uint8_t* b, float* y) {
  const float d = load_half(b), dmin = load_half(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qs = b + 16;
  for (int sub = 0; sub < 8; ++sub) {
    int sc, m;
    unpack_scale_min(scales, sub, sc, m);
    const float dl = d * static_cast<float>(sc), ml = dmin * static_cast<float>(m);
    const uint8_t* q = qs + 32 * (sub / 2);
    const int shift = 4 * (sub % 2);
    for (int l = 0; l < 32; ++l) y[32 * sub + l] = dl * static_cast<float>((q[l] >> shift) & 0xF) - ml;
  }
}

// As Q4_K plus a fifth bit: bit `sub` of qh[l] belongs to element 32 * sub + l.
void dequant_q5_k(const uint8_t* b, float* y) {
  const float d = load_half(b), dmin = load_half(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + 48;
  for (int sub = 0; sub < 8; ++sub) {
    int sc, m;
    unpack_scale_min(scales, sub, sc, m);
    const float dl = d * static_cast<float>(sc), ml = dmin * static_cast<float>(m);
    const uint8_t* q = qs + 32 * (sub / 2);
    const int shift = 4 * (sub % 2);
    for (int l = 0; l < 32; ++l) {
      const int value = ((q[l] >> shift) & 0xF) | ((qh[l] >> sub) & 1) << 4;
      y[32 * sub + l] = dl * static_cast<float>(value) - ml;
    }
  }
}

// Q6_K: two halves of 128. In half h, element 32 * k + l (k = 0..3, l = 0..31) takes its low
// nibble from ql[64h + l + 32 * (k % 2)] (low nibble for k < 2, high for k >= 2) and its top two
// bits from bits 2k, 2k+1 of qh[32h + l]; element e uses the int8 scale e / 16.
// x = (d * sc) * (q - 32).
void dequant_q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* scales = reinterpret_cast<const int8_t*>(b + 192);
  const float d = load_half(b + 208);
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, k = (e % 128) / 32, l = e % 32;
    const int low = (ql[64 * h + l + 32 * (k % 2)] >> (4 * (k / 2))) & 0xF;
    const int high = (qh[32 * h + l] >> (2 * k)) & 3;
    y[e] = d * static_cast<float>(scales[e / 16]) * static_cast<float>((low | high << 4) - 32);
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

// ---- MXFP4: 4-bit floats (E2M1) with a shared power-of-two scale (E8M0) -------------------------
// e; qs[16]: element j < 16 in the low nibble of qs[j], j + 16 in its high nibble, as Q4_0. A
// code's low three bits pick a magnitude 0, 0.5, 1, 1.5, 2, 3, 4, 6 and bit 3 its sign; ggml keeps
// the magnitudes doubled as int8 levels (0 .. 12) and halves the scale instead: x = level *
// 2^(e - 128), the scale built from its bits (e < 2 gives a subnormal float).
constexpr int8_t kMxfp4Levels[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

float mxfp4_half_scale(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : uint32_t(e - 1) << 23;
  float d;
  std::memcpy(&d, &bits, 4);
  return d;
}

void dequant_mxfp4(const uint8_t* b, float* y) {
  const float d = mxfp4_half_scale(b[0]);
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(kMxfp4Levels[b[1 + j] & 0xF]) * d;
    y[j + 16] = static_cast<float>(kMxfp4Levels[b[1 + j] >> 4]) * d;
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

// ---- IQ4_NL and IQ4_XS: 4-bit indices into a fixed non-linear table -------------------------
// Each nibble selects one of 16 int8 levels, spaced more closely near zero. A 32-element run
// keeps element j (j < 16) in the low nibble of byte j and element j + 16 in its high nibble,
// as Q4_0 does. IQ4_NL: d; qs[16]: x = d * level. IQ4_XS: d; scales_h (u16); scales_l[4];
// qs[128]: eight runs of 32, run r with the 6-bit scale (low nibble r % 2 of scales_l[r / 2],
// top bits 2r, 2r + 1 of scales_h) minus 32: x = (d * (ls - 32)) * level.
constexpr int8_t kIq4Levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

void dequant_iq4_run(float d, const uint8_t* qs, float* y) {
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(kIq4Levels[qs[j] & 0xF]);
    y[j + 16] = d * static_cast<float>(kIq4Levels[qs[j] >> 4]);
  }
}

void dequant_iq4_nl(const uint8_t* b, float* y) { dequant_iq4_run(load_half(b), b + 2, y); }

int iq4_xs_scale(const uint8_t* b, int run) {
  const int high = ((b[2] | b[3] << 8) >> (2 * run)) & 3;
  return (((b[4 + run / 2] >> (4 * (run % 2))) & 0xF) | high << 4) - 32;
}

void dequant_iq4_xs(const uint8_t* b, float* y) {
  const float d = load_half(b);
  for (int run = 0; run < 8; ++run)
    dequant_iq4_run(d * static_cast<float>(iq4_xs_scale(b, run)), b + 8 + 16 * run, y + 32 * run);
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

// ---- IQ1, IQ2, IQ3: lattice grids ----------------------------------------------------------
// A 256-element super-block of eight 32-element groups, each with its own scale; a group's
// elements come in runs of 8 (IQ1, IQ2: one grid entry of 8 magnitudes) or 4 (IQ3: one entry of
// 4) selected by an index, and (IQ2, IQ3) a sign per element. Where a run's signs are stored as 7
// bits, the eighth makes their count even (ggml's ksigns_iq2xs). The grids: shaders/iq_grids.h.
// Values are computed as ggml's dequantize_row_iq*: (scale * magnitude) * sign, or for IQ1
// scale * (grid value + delta).
static_assert(std::size(kIq2xxsGrid) == 128 && std::size(kIq2xsGrid) == 256 && std::size(kIq2sGrid) == 512 &&
              std::size(kIq1sGrid) == 1024 && std::size(kIq3xxsGrid) == 256 && std::size(kIq3sGrid) == 512);

// The 2-bit code of element j of entry i of a packed grid (two 16-bit entries to a word).
int grid_code(const uint32_t* words, int i, int j) { return int(words[i / 2] >> (16 * (i % 2) + 2 * j)) & 3; }

uint8_t even_signs(uint32_t seven_bits) {
  const uint32_t s = seven_bits & 127;
  return uint8_t(s | (std::popcount(s) & 1) << 7);
}

uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

uint16_t load_u16(const uint8_t* p) { return uint16_t(p[0] | p[1] << 8); }

// Eight elements of an IQ2 grid entry with their signs (bit j set: element j negative).
void put_iq2_run(const uint32_t* grid, int index, uint8_t signs, float scale, float* y) {
  constexpr float kMagnitude[3] = {8.0f, 25.0f, 43.0f};
  for (int j = 0; j < 8; ++j) y[j] = scale * kMagnitude[grid_code(grid, index, j)] * ((signs >> j) & 1 ? -1.0f : 1.0f);
}

// Four elements of an IQ3 grid entry; `signs` bit j is element j's sign.
void put_iq3_quad(uint32_t entry, uint32_t signs, float scale, float* y) {
  for (int j = 0; j < 4; ++j)
    y[j] = scale * static_cast<float>((entry >> (8 * j)) & 0xFF) * ((signs >> j) & 1 ? -1.0f : 1.0f);
}

// Eight elements of an IQ1_S grid entry (values -1, 0, 1) shifted by delta (+-1/8).
void put_iq1_run(int index, float delta, float scale, float* y) {
  for (int j = 0; j < 8; ++j) y[j] = scale * (static_cast<float>(grid_code(kIq1sGrid, index, j) - 1) + delta);
}

// IQ2_XXS: d; per group 8 bytes: four entry indices, then a u32 of four 7-bit sign sets and the
// 4-bit scale s on top: scale d * (0.5 + s) * 0.25.
void dequant_iq2_xxs(const uint8_t* b, float* y) {
  const float d = load_half(b);
  for (int g = 0; g < 8; ++g, y += 32) {
    const uint8_t* q = b + 2 + 8 * g;
    const uint32_t aux = load_u32(q + 4);
    const float scale = d * (0.5f + static_cast<float>(aux >> 28)) * 0.25f;
    for (int l = 0; l < 4; ++l) put_iq2_run(kIq2xxsGrid, q[l], even_signs(aux >> (7 * l)), scale, y + 8 * l);
  }
}

// IQ2_XS: d; per group four u16 (9-bit entry index, 7 sign bits above it); scales[8] after them,
// runs 0-1 of group g with the low nibble of scales[g], runs 2-3 with the high one.
void dequant_iq2_xs(const uint8_t* b, float* y) {
  const float d = load_half(b);
  for (int g = 0; g < 8; ++g, y += 32) {
    const uint8_t sc = b[66 + g];
    const float scale[2] = {d * (0.5f + static_cast<float>(sc & 0xF)) * 0.25f,
                            d * (0.5f + static_cast<float>(sc >> 4)) * 0.25f};
    for (int l = 0; l < 4; ++l) {
      const uint16_t q = load_u16(b + 2 + 8 * g + 2 * l);
      put_iq2_run(kIq2xsGrid, q & 511, even_signs(q >> 9), scale[l / 2], y + 8 * l);
    }
  }
}

// IQ2_S: d; qs[32] (low 8 bits of each run's 10-bit index), signs[32] (8 sign bits a run),
// qh[8] (bits 2l, 2l + 1 of qh[g]: the index's top bits for run l of group g), scales[8] as IQ2_XS.
void dequant_iq2_s(const uint8_t* b, float* y) {
  const float d = load_half(b);
  for (int g = 0; g < 8; ++g, y += 32) {
    const uint8_t sc = b[74 + g], qh = b[66 + g];
    const float scale[2] = {d * (0.5f + static_cast<float>(sc & 0xF)) * 0.25f,
                            d * (0.5f + static_cast<float>(sc >> 4)) * 0.25f};
    for (int l = 0; l < 4; ++l) {
      const int index = b[2 + 4 * g + l] | ((qh >> (2 * l)) & 3) << 8;
      put_iq2_run(kIq2sGrid, index, b[34 + 4 * g + l], scale[l / 2], y + 8 * l);
    }
  }
}

// IQ3_XXS: d; qs[64] (two entry indices a run of 8, 8 a group); then a u32 a group of four
// 7-bit sign sets and the 4-bit scale s: scale d * (0.5 + s) * 0.5.
void dequant_iq3_xxs(const uint8_t* b, float* y) {
  const float d = load_half(b);
  for (int g = 0; g < 8; ++g, y += 32) {
    const uint8_t* q = b + 2 + 8 * g;
    const uint32_t aux = load_u32(b + 66 + 4 * g);
    const float scale = d * (0.5f + static_cast<float>(aux >> 28)) * 0.5f;
    for (int l = 0; l < 4; ++l) {
      const uint8_t signs = even_signs(aux >> (7 * l));
      put_iq3_quad(kIq3xxsGrid[q[2 * l]], signs, scale, y + 8 * l);
      put_iq3_quad(kIq3xxsGrid[q[2 * l + 1]], signs >> 4, scale, y + 8 * l + 4);
    }
  }
}

// IQ3_S: d; qs[64] (low 8 bits of two 9-bit indices a run); qh[8] (bit k of qh[g]: top bit of
// group g's index k); signs[32] (8 a run); scales[4] (group g's 4-bit s in nibble g % 2 of
// scales[g / 2]): scale d * (1 + 2 s).
void dequant_iq3_s(const uint8_t* b, float* y) {
  const float d = load_half(b);
  for (int g = 0; g < 8; ++g, y += 32) {
    const uint8_t qh = b[66 + g];
    const float scale = d * static_cast<float>(1 + 2 * ((b[106 + g / 2] >> (4 * (g % 2))) & 0xF));
    for (int l = 0; l < 4; ++l) {
      const uint8_t signs = b[74 + 4 * g + l];
      const int i0 = b[2 + 8 * g + 2 * l] | ((qh >> (2 * l)) & 1) << 8;
      const int i1 = b[2 + 8 * g + 2 * l + 1] | ((qh >> (2 * l + 1)) & 1) << 8;
      put_iq3_quad(kIq3sGrid[i0], signs, scale, y + 8 * l);
      put_iq3_quad(kIq3sGrid[i1], signs >> 4, scale, y + 8 * l + 4);
    }
  }
}

// IQ1_S: d; qs[32] (low 8 bits of 11-bit indices, one a run); qh[8] u16, one a group: bits 3l
// .. 3l + 2 the top bits of run l's index, bits 12-14 the scale s (d * (2 s + 1)), bit 15 the
// delta's sign (set: -1/8).
void dequant_iq1_s(const uint8_t* b, float* y) {
  const float d = load_half(b);
  for (int g = 0; g < 8; ++g, y += 32) {
    const uint16_t qh = load_u16(b + 34 + 2 * g);
    const float scale = d * static_cast<float>(2 * ((qh >> 12) & 7) + 1);
    const float delta = (qh & 0x8000) ? -0.125f : 0.125f;
    for (int l = 0; l < 4; ++l) put_iq1_run(b[2 + 4 * g + l] | ((qh >> (3 * l)) & 7) << 8, delta, scale, y + 8 * l);
  }
}

// IQ1_M: qs[32] as IQ1_S; qh[16], two a group: each byte holds two runs' 3 top index bits
// (bits 0-2, 4-6) and delta signs (bits 3, 7); scales as four u16: group g's runs 0-1 and 2-3
// take 3-bit scales at bits 6 (g % 2) and 6 (g % 2) + 3 of u16 g / 2 (d * (2 s + 1)); d is the
// f16 whose four nibbles are the top nibbles of the four u16.
void dequant_iq1_m(const uint8_t* b, float* y) {
  uint16_t sc[4];
  for (int i = 0; i < 4; ++i) sc[i] = load_u16(b + 48 + 2 * i);
  const uint16_t d_bits =
      uint16_t((sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) | ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000));
  const float d = f16_to_f32(d_bits);
  for (int g = 0; g < 8; ++g, y += 32) {
    const uint16_t s = sc[g / 2];
    const float scale[2] = {d * static_cast<float>(2 * ((s >> (6 * (g % 2))) & 7) + 1),
                            d * static_cast<float>(2 * ((s >> (6 * (g % 2) + 3)) & 7) + 1)};
    for (int l = 0; l < 4; ++l) {
      const uint8_t qh = b[32 + 2 * g + l / 2] >> (4 * (l % 2));
      const float delta = (qh & 8) ? -0.125f : 0.125f;
      put_iq1_run(b[4 * g + l] | (qh & 7) << 8, delta, scale[l / 2], y + 8 * l);
    }
  }
}

// eaglevk's FP8 blocks (loader/fp8.h makes them from FP8 checkpoints): f32 scale, then 32 E4M3
// codes; x = e4m3(code) * scale.
void dequant_fp8_b32(const uint8_t* b, float* y) {
  float d;
  std::memcpy(&d, b, 4);
  for (int j = 0; j < 32; ++j) y[j] = e4m3_to_f32(b[4 + j]) * d;
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

// eaglevk's 4-bit integer blocks (loader/int4.h makes them from W4A16 checkpoints): f32 d, f32 m,
// nibbles as Q4_1; x = q * d + m.
void dequant_int4_b32(const uint8_t* b, float* y) {
  float d, m;
  std::memcpy(&d, b, 4);
  std::memcpy(&m, b + 4, 4);
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(b[8 + j] & 0xF) * d + m;
    y[j + 16] = static_cast<float>(b[8 + j] >> 4) * d + m;
  }
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

using DequantBlock = void (*)(const uint8_t*, float*);
using QuantBlock = void (*)(const float*, uint8_t*);

DequantBlock dequant_fn(DType dtype) {
  switch (dtype) {
    case DType::Q4_0: return dequant_q4_0;
    case DType::Q4_1: return dequant_q4_1;
    case DType::Q5_0: return dequant_q5_0;
    case DType::Q5_1: return dequant_q5_1;
    case DType::Q8_0: return dequant_q8_0;
    case DType::Q2_K: return dequant_q2_k;
    case DType::Q3_K: return dequant_q3_k;
    case DType::Q4_K: return dequant_q4_k;
    case DType::Q5_K: return dequant_q5_k;
    case DType::Q6_K: return dequant_q6_k;
    case DType::IQ4_NL: return dequant_iq4_nl;
    case DType::IQ4_XS: return dequant_iq4_xs;
    case DType::IQ1_S: return dequant_iq1_s;
    case DType::IQ1_M: return dequant_iq1_m;
    case DType::IQ2_XXS: return dequant_iq2_xxs;
    case DType::IQ2_XS: return dequant_iq2_xs;
    case DType::IQ2_S: return dequant_iq2_s;
    case DType::IQ3_XXS: return dequant_iq3_xxs;
    case DType::IQ3_S: return dequant_iq3_s;
    case DType::MXFP4: return dequant_mxfp4;
    case DType::FP8_B32: return dequant_fp8_b32;
    case DType::INT4_B32: return dequant_int4_b32;
    default: return nullptr;
  }
}

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

bool is_quantized(DType dtype) { return find_format(dtype) != nullptr; }

uint32_t block_elements(DType dtype) {
  const BlockFormat* format = find_format(dtype);
  return format ? format->elements : 1;
}

uint32_t block_bytes(DType dtype) {
  const BlockFormat* format = find_format(dtype);
  return format ? format->bytes : static_cast<uint32_t>(dtype_size(dtype));
}

std::optional<uint64_t> quantized_bytes(DType dtype, uint64_t row_length, uint64_t rows) {
  const uint64_t elements = block_elements(dtype);
  if (row_length % elements != 0) return std::nullopt;
  uint64_t row_bytes, total;
  if (__builtin_mul_overflow(row_length / elements, uint64_t(block_bytes(dtype)), &row_bytes) ||
      __builtin_mul_overflow(row_bytes, rows, &total))
    return std::nullopt;
  return total;
}

uint64_t upload_bytes(const TensorView& t) {
  if (t.scale) return fp8_block_bytes(t);
  if (t.int4) return int4_block_bytes(t);
  return t.bytes;
}

void dequantize(DType dtype, const std::byte* blocks, std::span<float> out) {
  const uint8_t* in = reinterpret_cast<const uint8_t*>(blocks);
  switch (dtype) {
    case DType::F32: std::memcpy(out.data(), in, out.size() * 4); return;
    case DType::F16:
    case DType::BF16:
      for (size_t i = 0; i < out.size(); ++i) {
        uint16_t bits;
        std::memcpy(&bits, in + 2 * i, 2);
        out[i] = dtype == DType::F16 ? f16_to_f32(bits) : bf16_to_f32(bits);
      }
      return;
    default: break;
  }
  const BlockFormat* format = find_format(dtype);
  if (!format) fail("dequantize: dtype {} is neither a float nor a block-quantized type", dtype_name(dtype));
  if (out.size() % format->elements != 0)
    fail("dequantize {}: {} elements is not a whole number of {}-element blocks", dtype_name(dtype), out.size(),
         format->elements);
  const DequantBlock decode = dequant_fn(dtype);
  const size_t n_blocks = out.size() / format->elements;
  for (size_t i = 0; i < n_blocks; ++i) decode(in + i * format->bytes, out.data() + i * format->elements);
}

void quantize(DType dtype, std::span<const float> in, std::vector<std::byte>& out) {
  const BlockFormat* format = find_format(dtype);
  if (!format) fail("quantize: dtype {} is not a block-quantized type", dtype_name(dtype));
  if (in.size() % format->elements != 0)
    fail("quantize {}: {} elements is not a whole number of {}-element blocks", dtype_name(dtype), in.size(),
         format->elements);
  const QuantBlock encode = quant_fn(dtype);
  if (!encode)
    fail("quantize: eaglevk reads {} blocks but does not write them (llama-quantize needs an importance matrix "
         "and a lattice search for them)",
         dtype_name(dtype));
  const size_t n_blocks = in.size() / format->elements;
  const size_t start = out.size();
  out.resize(start + n_blocks * format->bytes);
  uint8_t* dst = reinterpret_cast<uint8_t*>(out.data() + start);
  for (size_t i = 0; i < n_blocks; ++i) encode(in.data() + i * format->elements, dst + i * format->bytes);
}

}  // namespace eaglevk::loader
