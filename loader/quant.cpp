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
#include "loader/quant_blocks.h"
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

using blocks::kIq4Levels;
using blocks::kMxfp4Levels;
using blocks::load_half;
using blocks::q3_scale;
using blocks::unpack_scale_min;
using blocks::mxfp4_half_scale;

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

// ---- The 32-element formats ----------------------------------------------------------------
// Q4_x/Q5_x keep element j (j < 16) in the low nibble of qs[j] and element j + 16 in its high
// nibble; Q5_x keep bit 4 of element e in bit e of the little-endian u32 qh.

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

void dequant_mxfp4(const uint8_t* b, float* y) {
  const float d = mxfp4_half_scale(b[0]);
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(kMxfp4Levels[b[1 + j] & 0xF]) * d;
    y[j + 16] = static_cast<float>(kMxfp4Levels[b[1 + j] >> 4]) * d;
  }
}

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

using DequantBlock = void (*)(const uint8_t*, float*);

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

}  // namespace eaglevk::loader
