#include "loader/quant.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <eaglevk/error.h>

#include "loader/gguf.h"
#include "loader/safetensors.h"
#include "support/loader_test_util.h"
#include "support/mxfp4_gguf.h"
#include "support/quantize.h"

namespace fs = std::filesystem;
using namespace eaglevk::loader;
using eaglevk::testing::expect_error;
using eaglevk::testing::quantize;

namespace {

const fs::path kAssets = EAGLEVK_ASSETS;

constexpr DType kBlockTypes[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::FP8_B32, DType::INT4_B32,
                                 DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K,
                                 DType::IQ4_NL, DType::IQ4_XS, DType::MXFP4};
// ggml's lattice formats: decoded, not written (quantize refuses them).
constexpr DType kLatticeTypes[] = {DType::IQ1_S, DType::IQ1_M, DType::IQ2_XXS, DType::IQ2_XS,
                                   DType::IQ2_S, DType::IQ3_XXS, DType::IQ3_S};

// Block bytes written field by field, little-endian.
struct Block {
  std::vector<std::byte> bytes;
  void u8(int v) { bytes.push_back(std::byte(uint8_t(v))); }
  void u16(uint16_t v) { u8(v & 0xff), u8(v >> 8); }
  void u32(uint32_t v) { u16(uint16_t(v & 0xffff)), u16(uint16_t(v >> 16)); }
};

// Half-precision bit patterns of a few exactly representable values, spelled out by hand.
constexpr uint16_t kHalf0_0625 = 0x2C00, kHalf0_125 = 0x3000, kHalf0_25 = 0x3400, kHalf0_5 = 0x3800;
constexpr uint16_t kHalfMinus0_75 = 0xBA00, kHalfMinus1_5 = 0xBE00;

std::vector<float> decode(DType dtype, const Block& block) {
  EXPECT_EQ(block.bytes.size(), block_bytes(dtype)) << dtype_name(dtype);
  std::vector<float> out(block_elements(dtype));
  dequantize(dtype, block.bytes.data(), out);
  return out;
}

void expect_floats_eq(const std::vector<float>& got, const std::vector<float>& want, DType dtype) {
  ASSERT_EQ(got.size(), want.size());
  int shown = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i] && shown++ < 5) ADD_FAILURE() << dtype_name(dtype) << " element " << i << ": " << got[i] << " != " << want[i];
  }
}

// Nibbles of the 32-element formats: element j < 16 in the low half of qs[j], j + 16 in the high.
int nibble(const uint8_t* qs, int e) { return e < 16 ? qs[e] & 15 : qs[e - 16] >> 4; }

// The 6-bit scales and mins of Q4_K/Q5_K, packed from the layout: bytes 0-3 hold scales 0-3 and
// bytes 4-7 mins 0-3 (6 bits each); bytes 8-11 hold the low nibbles of scale i+4 (low half) and
// min i+4 (high half); the top two bits of scale i+4 and min i+4 go into bits 6-7 of bytes i and
// i+4.
void put_k_scales(Block& b, const int* sc, const int* m) {
  for (int i = 0; i < 4; ++i) b.u8(sc[i] | (sc[i + 4] >> 4) << 6);
  for (int i = 0; i < 4; ++i) b.u8(m[i] | (m[i + 4] >> 4) << 6);
  for (int i = 0; i < 4; ++i) b.u8((sc[i + 4] & 15) | (m[i + 4] & 15) << 4);
}

const int kScales[8] = {1, 63, 17, 40, 5, 33, 62, 48};
const int kMins[8] = {0, 7, 63, 21, 50, 1, 35, 16};

// Normalized RMS error sqrt(sum (y - x)^2 / sum x^2), the worst over rows of `row_length`.
double worst_row_error(std::span<const float> x, std::span<const float> y, size_t row_length) {
  double worst = 0;
  for (size_t r = 0; r < x.size() / row_length; ++r) {
    double err = 0, ref = 0;
    for (size_t i = r * row_length; i < (r + 1) * row_length; ++i) {
      err += double(y[i] - x[i]) * double(y[i] - x[i]);
      ref += double(x[i]) * double(x[i]);
    }
    worst = std::max(worst, ref > 0 ? std::sqrt(err / ref) : std::sqrt(err));
  }
  return worst;
}

}  // namespace

TEST(Quant, Geometry) {
  EXPECT_EQ(block_elements(DType::Q4_0), 32u);
  EXPECT_EQ(block_bytes(DType::Q4_0), 18u);
  EXPECT_EQ(block_bytes(DType::Q4_1), 20u);
  EXPECT_EQ(block_bytes(DType::Q5_0), 22u);
  EXPECT_EQ(block_bytes(DType::Q5_1), 24u);
  EXPECT_EQ(block_bytes(DType::Q8_0), 34u);
  EXPECT_EQ(block_elements(DType::Q4_K), 256u);
  EXPECT_EQ(block_bytes(DType::Q4_K), 144u);
  EXPECT_EQ(block_bytes(DType::Q5_K), 176u);
  EXPECT_EQ(block_bytes(DType::Q6_K), 210u);
  EXPECT_EQ(block_elements(DType::Q2_K), 256u);
  EXPECT_EQ(block_bytes(DType::Q2_K), 84u);
  EXPECT_EQ(block_bytes(DType::Q3_K), 110u);
  EXPECT_EQ(block_elements(DType::IQ4_NL), 32u);
  EXPECT_EQ(block_bytes(DType::IQ4_NL), 18u);
  EXPECT_EQ(block_elements(DType::IQ4_XS), 256u);
  EXPECT_EQ(block_bytes(DType::IQ4_XS), 136u);
  EXPECT_EQ(block_elements(DType::MXFP4), 32u);
  EXPECT_EQ(block_bytes(DType::MXFP4), 17u);
  const std::pair<DType, uint32_t> kLatticeBytes[] = {{DType::IQ1_S, 50},   {DType::IQ1_M, 56},  {DType::IQ2_XXS, 66},
                                                      {DType::IQ2_XS, 74},  {DType::IQ2_S, 82},  {DType::IQ3_XXS, 98},
                                                      {DType::IQ3_S, 110}};
  for (auto [t, bytes] : kLatticeBytes) {
    EXPECT_TRUE(is_quantized(t)) << dtype_name(t);
    EXPECT_EQ(block_elements(t), 256u) << dtype_name(t);
    EXPECT_EQ(block_bytes(t), bytes) << dtype_name(t);
  }
  EXPECT_EQ(block_elements(DType::BF16), 1u);
  EXPECT_EQ(block_bytes(DType::BF16), 2u);
  EXPECT_EQ(block_bytes(DType::F32), 4u);
  for (DType t : kBlockTypes) EXPECT_TRUE(is_quantized(t)) << dtype_name(t);
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::I64}) EXPECT_FALSE(is_quantized(t));

  EXPECT_EQ(quantized_bytes(DType::Q4_K, 768, 13), 3u * 144 * 13);
  EXPECT_EQ(quantized_bytes(DType::Q8_0, 64, 3), 2u * 34 * 3);
  EXPECT_EQ(quantized_bytes(DType::F16, 7, 3), 42u);
  EXPECT_FALSE(quantized_bytes(DType::Q4_K, 300, 1).has_value());
  EXPECT_FALSE(quantized_bytes(DType::Q4_0, 48, 1).has_value());
  EXPECT_FALSE(quantized_bytes(DType::Q8_0, 32, uint64_t(1) << 60).has_value());  // overflow
}

TEST(Quant, Errors) {
  std::vector<float> out(33);
  std::vector<std::byte> blocks(100);
  expect_error([&] { dequantize(DType::Q4_0, blocks.data(), out); }, "whole number");
  expect_error([&] { dequantize(DType::I64, blocks.data(), out); }, "I64");
  std::vector<float> in(300, 1.0f);
  std::vector<std::byte> q;
  expect_error([&] { quantize(DType::Q4_K, in, q); }, "whole number");
  expect_error([&] { quantize(DType::Q8_0, std::span(in).first(48), q); }, "whole number");
  expect_error([&] { quantize(DType::F32, std::span(in).first(32), q); }, "not a block-quantized");
  expect_error([&] { quantize(DType::BF16, std::span(in).first(32), q); }, "BF16");
  for (DType t : kLatticeTypes) expect_error([&] { quantize(t, std::span(in).first(256), q); }, "does not write");
  EXPECT_TRUE(q.empty());
}

// ---- 1. Hand-built blocks ---------------------------------------------------------------------

TEST(Quant, HandBuiltQ4_0) {
  Block b;
  b.u16(kHalf0_5);
  uint8_t qs[16];
  for (int j = 0; j < 16; ++j) b.u8(qs[j] = uint8_t(j | (15 - j) << 4));
  std::vector<float> want(32);
  for (int e = 0; e < 32; ++e) want[e] = 0.5f * float(nibble(qs, e) - 8);
  expect_floats_eq(decode(DType::Q4_0, b), want, DType::Q4_0);
  EXPECT_EQ(decode(DType::Q4_0, b)[16], 3.5f);  // high nibble of qs[0] = 15: (15 - 8) * 0.5
}

TEST(Quant, HandBuiltQ4_1) {
  Block b;
  b.u16(kHalf0_25), b.u16(kHalfMinus1_5);
  uint8_t qs[16];
  for (int j = 0; j < 16; ++j) b.u8(qs[j] = uint8_t(j | ((3 * j) % 16) << 4));
  std::vector<float> want(32);
  for (int e = 0; e < 32; ++e) want[e] = 0.25f * float(nibble(qs, e)) - 1.5f;
  expect_floats_eq(decode(DType::Q4_1, b), want, DType::Q4_1);
  EXPECT_EQ(decode(DType::Q4_1, b)[15], 2.25f);  // 15 * 0.25 - 1.5
}

TEST(Quant, HandBuiltQ5) {
  const uint32_t qh = 0xA5C30F96u;
  uint8_t qs[16];
  for (int j = 0; j < 16; ++j) qs[j] = uint8_t(j | ((5 * j + 3) % 16) << 4);
  auto q5 = [&](int e) { return nibble(qs, e) | int((qh >> e) & 1) << 4; };

  Block b0;
  b0.u16(kHalf0_5), b0.u32(qh);
  for (uint8_t v : qs) b0.u8(v);
  std::vector<float> want0(32);
  for (int e = 0; e < 32; ++e) want0[e] = 0.5f * float(q5(e) - 16);
  expect_floats_eq(decode(DType::Q5_0, b0), want0, DType::Q5_0);
  EXPECT_EQ(decode(DType::Q5_0, b0)[31], 7.0f);  // qs[15] >> 4 = 78 % 16 = 14, qh bit 31 set: (30 - 16) * 0.5

  Block b1;
  b1.u16(kHalf0_125), b1.u16(kHalfMinus0_75), b1.u32(qh);
  for (uint8_t v : qs) b1.u8(v);
  std::vector<float> want1(32);
  for (int e = 0; e < 32; ++e) want1[e] = 0.125f * float(q5(e)) - 0.75f;
  expect_floats_eq(decode(DType::Q5_1, b1), want1, DType::Q5_1);
}

TEST(Quant, HandBuiltQ8_0) {
  Block b;
  b.u16(kHalf0_0625);
  std::vector<float> want(32);
  for (int j = 0; j < 32; ++j) {
    const int q = 8 * j - 128;
    b.u8(q & 0xff);
    want[j] = 0.0625f * float(q);
  }
  expect_floats_eq(decode(DType::Q8_0, b), want, DType::Q8_0);
  EXPECT_EQ(decode(DType::Q8_0, b)[0], -8.0f);
}

TEST(Quant, HandBuiltQ4_K) {
  int q[256];
  for (int e = 0; e < 256; ++e) q[e] = (7 * e + 3) % 16;
  Block b;
  b.u16(kHalf0_5), b.u16(kHalf0_25);
  put_k_scales(b, kScales, kMins);
  // 4 groups of 32 bytes; group p holds sub-block 2p in its low nibbles and 2p + 1 in its high.
  for (int p = 0; p < 4; ++p)
    for (int l = 0; l < 32; ++l) b.u8(q[64 * p + l] | q[64 * p + 32 + l] << 4);
  std::vector<float> want(256);
  for (int e = 0; e < 256; ++e) want[e] = 0.5f * float(kScales[e / 32]) * float(q[e]) - 0.25f * float(kMins[e / 32]);
  expect_floats_eq(decode(DType::Q4_K, b), want, DType::Q4_K);
  EXPECT_EQ(decode(DType::Q4_K, b)[40], 344.75f);  // sub-block 1: 0.5 * 63 * 11 - 0.25 * 7
  EXPECT_EQ(decode(DType::Q4_K, b)[200], 332.25f);  // sub-block 6 (scale 62, min 35 use the high bits), q = 11
}

TEST(Quant, HandBuiltQ5_K) {
  int q[256];
  for (int e = 0; e < 256; ++e) q[e] = (13 * e + 5) % 32;
  Block b;
  b.u16(kHalf0_25), b.u16(kHalf0_5);
  put_k_scales(b, kScales, kMins);
  for (int l = 0; l < 32; ++l) {  // qh[l]: bit s = the fifth bit of element 32 s + l
    int bits = 0;
    for (int s = 0; s < 8; ++s) bits |= (q[32 * s + l] >> 4) << s;
    b.u8(bits);
  }
  for (int p = 0; p < 4; ++p)
    for (int l = 0; l < 32; ++l) b.u8((q[64 * p + l] & 15) | (q[64 * p + 32 + l] & 15) << 4);
  std::vector<float> want(256);
  for (int e = 0; e < 256; ++e) want[e] = 0.25f * float(kScales[e / 32]) * float(q[e]) - 0.5f * float(kMins[e / 32]);
  expect_floats_eq(decode(DType::Q5_K, b), want, DType::Q5_K);
  EXPECT_EQ(decode(DType::Q5_K, b)[255], 280.0f);  // q = (13 * 255 + 5) % 32 = 24: 0.25 * 48 * 24 - 0.5 * 16
}

TEST(Quant, HandBuiltQ6_K) {
  int q[256];
  for (int e = 0; e < 256; ++e) q[e] = (29 * e + 7) % 64;
  const int scales[16] = {1, -3, 127, -128, 5, 9, -17, 33, 64, -64, 2, 0, 100, -1, 7, 11};
  Block b;
  // ql[128] and qh[64] for two halves of 128; in each half, l < 32 packs elements l, l+32, l+64,
  // l+96: low nibbles of l and l+64 in ql[l], of l+32 and l+96 in ql[l+32], top bits in qh[l].
  uint8_t ql[128], qh[64];
  for (int h = 0; h < 2; ++h) {
    const int* x = q + 128 * h;
    for (int l = 0; l < 32; ++l) {
      ql[64 * h + l] = uint8_t((x[l] & 15) | (x[l + 64] & 15) << 4);
      ql[64 * h + l + 32] = uint8_t((x[l + 32] & 15) | (x[l + 96] & 15) << 4);
      qh[32 * h + l] = uint8_t(x[l] >> 4 | (x[l + 32] >> 4) << 2 | (x[l + 64] >> 4) << 4 | (x[l + 96] >> 4) << 6);
    }
  }
  for (uint8_t v : ql) b.u8(v);
  for (uint8_t v : qh) b.u8(v);
  for (int s : scales) b.u8(s & 0xff);
  b.u16(kHalf0_0625);
  std::vector<float> want(256);
  for (int e = 0; e < 256; ++e) want[e] = 0.0625f * float(scales[e / 16]) * float(q[e] - 32);
  expect_floats_eq(decode(DType::Q6_K, b), want, DType::Q6_K);
  EXPECT_EQ(decode(DType::Q6_K, b)[48], -184.0f);  // scale 3 = -128, q = 1399 % 64 = 55: 0.0625 * -128 * 23
}

// 2-bit codes of Q2_K and Q3_K: in each half of 128 elements, byte l (l < 32) holds elements l,
// l + 32, l + 64 and l + 96 in bits 0-1, 2-3, 4-5 and 6-7.
void put_2bit_codes(Block& b, const int* code) {
  for (int h = 0; h < 2; ++h)
    for (int l = 0; l < 32; ++l) {
      const int* c = code + 128 * h + l;
      b.u8(c[0] | c[32] << 2 | c[64] << 4 | c[96] << 6);
    }
}

TEST(Quant, HandBuiltQ2_K) {
  int q[256], sc[16], m[16];
  for (int e = 0; e < 256; ++e) q[e] = (7 * e + 3) % 4;
  Block b;
  for (int g = 0; g < 16; ++g) {  // scales[16]: the group's scale in the low nibble, its min in the high
    sc[g] = (5 * g + 1) % 16;
    m[g] = (3 * g + 2) % 16;
    b.u8(sc[g] | m[g] << 4);
  }
  put_2bit_codes(b, q);
  b.u16(kHalf0_5), b.u16(kHalf0_25);  // d, dmin
  std::vector<float> want(256);
  for (int e = 0; e < 256; ++e) want[e] = 0.5f * float(sc[e / 16]) * float(q[e]) - 0.25f * float(m[e / 16]);
  expect_floats_eq(decode(DType::Q2_K, b), want, DType::Q2_K);
  EXPECT_EQ(decode(DType::Q2_K, b)[37], 9.0f);  // group 2: scale 11, min 8, q = 262 % 4 = 2: 0.5 * 11 * 2 - 0.25 * 8
}

TEST(Quant, HandBuiltQ3_K) {
  int q[256];  // signed, -4 .. 3
  for (int e = 0; e < 256; ++e) q[e] = (5 * e + 1) % 8 - 4;
  const int scales[16] = {-32, 31, 0, 5, -7, 12, 1, -1, 17, -20, 30, -31, 8, 3, -16, 25};
  Block b;
  for (int l = 0; l < 32; ++l) {  // hmask[l]: bit j set where element 32 j + l is not negative
    int bits = 0;
    for (int j = 0; j < 8; ++j) bits |= (q[32 * j + l] >= 0 ? 1 : 0) << j;
    b.u8(bits);
  }
  int low[256];  // the code's low two bits: q + 4 when negative, q otherwise
  for (int e = 0; e < 256; ++e) low[e] = (q[e] + 4) & 3;
  put_2bit_codes(b, low);
  uint8_t packed[12] = {};  // scale + 32: low nibbles in bytes 0-7 (groups 8-15 in the high half), top bits in 8-11
  for (int g = 0; g < 16; ++g) {
    const int u = scales[g] + 32;
    packed[g % 8] |= uint8_t((u & 15) << (g < 8 ? 0 : 4));
    packed[8 + g % 4] |= uint8_t((u >> 4) << (2 * (g / 4)));
  }
  for (uint8_t v : packed) b.u8(v);
  b.u16(kHalf0_125);
  std::vector<float> want(256);
  for (int e = 0; e < 256; ++e) want[e] = 0.125f * float(scales[e / 16]) * float(q[e]);
  expect_floats_eq(decode(DType::Q3_K, b), want, DType::Q3_K);
  EXPECT_EQ(decode(DType::Q3_K, b)[0], 12.0f);    // scale -32, q = 1 - 4 = -3
  EXPECT_EQ(decode(DType::Q3_K, b)[200], -3.0f);  // group 12: scale 8, q = 1001 % 8 - 4 = -3
}

// IQ4's 16 levels, from ggml's kvalues_iq4nl table (ggml-common.h).
constexpr int kIq4[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

TEST(Quant, HandBuiltIQ4_NL) {
  int q[32];
  for (int e = 0; e < 32; ++e) q[e] = (11 * e + 4) % 16;
  Block b;
  b.u16(kHalfMinus0_75);
  for (int j = 0; j < 16; ++j) b.u8(q[j] | q[j + 16] << 4);  // as Q4_0: element j low, j + 16 high
  std::vector<float> want(32);
  for (int e = 0; e < 32; ++e) want[e] = -0.75f * float(kIq4[q[e]]);
  expect_floats_eq(decode(DType::IQ4_NL, b), want, DType::IQ4_NL);
  EXPECT_EQ(decode(DType::IQ4_NL, b)[1], -84.75f);  // index 15: -0.75 * 113
}

// MXFP4: the E2M1 values 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives (code bit 3), times
// 2^(e - 127): ggml stores them doubled (int8 0 .. 12) against a halved scale, 2^(e - 128).
constexpr float kE2M1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, 0, -0.5f, -1, -1.5f, -2, -3, -4, -6};

TEST(Quant, HandBuiltMXFP4) {
  int q[32];
  for (int e = 0; e < 32; ++e) q[e] = (7 * e + 3) % 16;
  for (auto [e, scale] : {std::pair{127, 1.0f}, {130, 8.0f}, {120, 1.0f / 128}, {1, 0x1p-126f}, {0, 0x1p-127f}}) {
    Block b;
    b.u8(e);
    for (int j = 0; j < 16; ++j) b.u8(q[j] | q[j + 16] << 4);  // as Q4_0: element j low, j + 16 high
    std::vector<float> want(32);
    for (int i = 0; i < 32; ++i) want[i] = kE2M1[q[i]] * scale;
    SCOPED_TRACE(fmt::format("e = {}", e));
    expect_floats_eq(decode(DType::MXFP4, b), want, DType::MXFP4);
  }
  Block b;
  b.u8(127);
  for (int j = 0; j < 16; ++j) b.u8(0x88);  // code 8: "-0" in E2M1, +0 as ggml decodes it
  for (float v : decode(DType::MXFP4, b)) EXPECT_FALSE(std::signbit(v));
}

TEST(Quant, HandBuiltIQ4_XS) {
  int q[256];
  for (int e = 0; e < 256; ++e) q[e] = (7 * e + 2) % 16;
  const int scales[8] = {-32, 31, 0, 1, -1, 17, -20, 9};  // stored plus 32 in 6 bits
  Block b;
  b.u16(kHalf0_125);
  int high = 0;
  for (int r = 0; r < 8; ++r) high |= ((scales[r] + 32) >> 4) << (2 * r);
  b.u16(uint16_t(high));
  for (int p = 0; p < 4; ++p) b.u8(((scales[2 * p] + 32) & 15) | ((scales[2 * p + 1] + 32) & 15) << 4);
  for (int r = 0; r < 8; ++r)
    for (int j = 0; j < 16; ++j) b.u8(q[32 * r + j] | q[32 * r + j + 16] << 4);
  std::vector<float> want(256);
  for (int e = 0; e < 256; ++e) want[e] = 0.125f * float(scales[e / 32]) * float(kIq4[q[e]]);
  expect_floats_eq(decode(DType::IQ4_XS, b), want, DType::IQ4_XS);
  EXPECT_EQ(decode(DType::IQ4_XS, b)[40], 96.875f);  // run 1 (scale 31), index 282 % 16 = 10: 0.125 * 31 * 25
}

// The lattice formats, field by field. The grid entries used are spelled out as ggml's tables
// hold them (ggml-common.h): iq2xxs_grid[0] = 8 x 8; [1] = 43, 8, 8, 8, 8, 8, 8, 8; [7] = 8, 8,
// 43, 8, 8, 8, 8, 8; [255] = 8, 25, 8, 8, 25, 43, 43, 43. iq3s_grid[0] = 1, 1, 1, 1; [5] = 1, 3,
// 1, 1; [259] = 3, 9, 9, 5; [511] = 1, 1, 15, 15. iq1s_grid[0] = 8 x -1; [1] = 1, then 7 x -1;
// [1029] = 8 x 0; [2047] = 8 x 1.
const std::vector<int> kIq2xxs0(8, 8), kIq2xxs1 = {43, 8, 8, 8, 8, 8, 8, 8}, kIq2xxs7 = {8, 8, 43, 8, 8, 8, 8, 8},
                       kIq2xxs255 = {8, 25, 8, 8, 25, 43, 43, 43};

TEST(Quant, HandBuiltIQ2_XXS) {
  // Group 0: entries 0, 1, 255, 7; 7-bit sign sets 0000001 (odd: the eighth sign set too), 0,
  // 1111111 (odd: all eight negative), 0000011 (even); scale nibble 3: 0.5 * 3.5 * 0.25.
  // Groups 1-7: entry 0, no signs, scale nibble 15 (0.5 * 15.5 * 0.25 = 1.9375).
  Block b;
  b.u16(kHalf0_5);
  b.u8(0), b.u8(1), b.u8(255), b.u8(7);
  b.u32(1u | 0u << 7 | 127u << 14 | 3u << 21 | 3u << 28);
  for (int g = 1; g < 8; ++g) b.u32(0), b.u32(15u << 28);
  std::vector<float> want(256, 8 * 1.9375f);
  const std::vector<int>* entries[4] = {&kIq2xxs0, &kIq2xxs1, &kIq2xxs255, &kIq2xxs7};
  const uint8_t signs[4] = {0x81, 0x00, 0xFF, 0x03};
  for (int l = 0; l < 4; ++l)
    for (int j = 0; j < 8; ++j)
      want[8 * l + j] = 0.4375f * float((*entries[l])[j]) * ((signs[l] >> j) & 1 ? -1.0f : 1.0f);
  expect_floats_eq(decode(DType::IQ2_XXS, b), want, DType::IQ2_XXS);
  EXPECT_EQ(decode(DType::IQ2_XXS, b)[7], -3.5f);  // entry 0, eighth sign from parity
}

TEST(Quant, HandBuiltIQ3_S) {
  // Group 1 (scale nibble 6 in the high half of scales[0]: d * 13) holds indices 5 | 259 in run
  // 0 (qh bit 1 gives 259's ninth bit) and 0 | 511 in run 3 (qh bit 7), signs 0x0F and 0xA0.
  // Everything else is index 0 without signs; group 0 has scale nibble 2 (d * 5).
  Block b;
  b.u16(kHalf0_25);
  for (int i = 0; i < 64; ++i) b.u8(0);
  b.bytes[2 + 8 + 0] = std::byte{5};
  b.bytes[2 + 8 + 1] = std::byte{3};    // 259 = 256 + 3
  b.bytes[2 + 8 + 7] = std::byte{255};  // 511 = 256 + 255
  for (int g = 0; g < 8; ++g) b.u8(g == 1 ? 0x82 : 0);
  for (int i = 0; i < 32; ++i) b.u8(i == 4 ? 0x0F : i == 7 ? 0xA0 : 0);
  b.u8(2 | 6 << 4), b.u8(0), b.u8(0), b.u8(0);
  std::vector<float> want(256, 0.25f);  // groups 2-7: scale nibble 0, d * 1, entry 0
  for (int e = 0; e < 32; ++e) want[e] = 0.25f * 5;
  for (int e = 32; e < 64; ++e) want[e] = 0.25f * 13;
  const int run0[8] = {1, 3, 1, 1, 3, 9, 9, 5}, run3[8] = {1, 1, 1, 1, 1, 1, 15, 15};
  for (int j = 0; j < 8; ++j) {
    want[32 + j] = 0.25f * 13 * float(run0[j]) * (j < 4 ? -1.0f : 1.0f);
    want[32 + 24 + j] = 0.25f * 13 * float(run3[j]) * (j == 5 || j == 7 ? -1.0f : 1.0f);
  }
  expect_floats_eq(decode(DType::IQ3_S, b), want, DType::IQ3_S);
  EXPECT_EQ(decode(DType::IQ3_S, b)[32 + 31], -48.75f);  // 0.25 * 13 * 15, negative
}

TEST(Quant, HandBuiltIQ1_M) {
  // d = -1.5 (0xBE00) spread over the top nibbles of the four scale u16; group 0's runs 0-1 take
  // 3-bit scale 2 (d * 5) and runs 2-3 scale 7 (d * 15); group 1's (bits 6-11 of u16 0) 0 and 1.
  // Group 0: run 0 index 1 (delta +1/8), run 1 index 1029 (qh nibble 4 | sign 8: -1/8), run 2
  // index 2047, run 3 index 0. Other groups: index 0, scale 0 (d * 1), delta +1/8.
  Block b;
  for (int i = 0; i < 32; ++i) b.u8(0);
  b.bytes[0] = std::byte{1}, b.bytes[1] = std::byte{5}, b.bytes[2] = std::byte{255};
  b.u8(0 | (4 | 8) << 4), b.u8(7);
  for (int i = 2; i < 16; ++i) b.u8(0);
  const uint16_t d = kHalfMinus1_5;
  const uint16_t sc[4] = {uint16_t(2 | 7 << 3 | 0 << 6 | 1 << 9), 0, 0, 0};
  for (int i = 0; i < 4; ++i) b.u16(uint16_t(sc[i] | ((d >> (4 * i)) & 0xF) << 12));
  std::vector<float> want(256, -1.5f * (-1.0f + 0.125f));
  const int runs[4][8] = {{1, -1, -1, -1, -1, -1, -1, -1}, {0, 0, 0, 0, 0, 0, 0, 0}, {1, 1, 1, 1, 1, 1, 1, 1},
                          {-1, -1, -1, -1, -1, -1, -1, -1}};
  const float scale[4] = {-1.5f * 5, -1.5f * 5, -1.5f * 15, -1.5f * 15}, delta[4] = {0.125f, -0.125f, 0.125f, 0.125f};
  for (int l = 0; l < 4; ++l)
    for (int j = 0; j < 8; ++j) want[8 * l + j] = scale[l] * (float(runs[l][j]) + delta[l]);
  for (int e = 32; e < 48; ++e) want[e] = -1.5f * (-1.0f + 0.125f);          // group 1, runs 0-1: scale 0
  for (int e = 48; e < 64; ++e) want[e] = -1.5f * 3 * (-1.0f + 0.125f);      // runs 2-3: scale 1
  expect_floats_eq(decode(DType::IQ1_M, b), want, DType::IQ1_M);
  EXPECT_EQ(decode(DType::IQ1_M, b)[8], 0.9375f);  // -7.5 * (0 - 1/8)
}

// Every grid entry, through ggml's own decoder: 1,024 pseudo-random blocks of each lattice format
// (every byte from the generator below, then d = 1.0 written where the format keeps it) decode to
// the floats whose FNV-1a hash ggml's dequantize_row_* gives on the same bytes (llama.cpp de3ff81,
// computed outside the repository: assets/gguf/low-bit.md). At 32,768 runs a format, every entry
// of the largest grid (IQ1_S's 2,048) is hit with near certainty.
namespace {
uint64_t fnv1a(std::span<const float> values) {
  uint64_t h = 1469598103934665603ull;
  for (float v : values) {
    uint32_t u;
    std::memcpy(&u, &v, 4);
    for (int i = 0; i < 4; ++i) h = (h ^ ((u >> (8 * i)) & 0xFF)) * 1099511628211ull;
  }
  return h;
}
}  // namespace

TEST(Quant, LatticeGridsDecodeAsGgml) {
  const std::pair<DType, uint64_t> kGgml[] = {
      {DType::IQ1_S, 0xcaf7d33db6444cbfull},   {DType::IQ1_M, 0x5a387d53f8678178ull},
      {DType::IQ2_XXS, 0x7defa395851f91abull}, {DType::IQ2_XS, 0x9d8f5ed0aed1baa5ull},
      {DType::IQ2_S, 0xea443c3f9415b5a5ull},   {DType::IQ3_XXS, 0xa8e9ffbf196645b3ull},
      {DType::IQ3_S, 0xe3926b83c4058826ull}};
  constexpr size_t kBlocks = 1024;
  for (auto [t, want] : kGgml) {
    const size_t bytes = block_bytes(t);
    std::vector<std::byte> blocks(kBlocks * bytes);
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (auto& v : blocks) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      v = std::byte(x >> 56);
    }
    for (size_t i = 0; i < kBlocks; ++i) {
      uint8_t* b = reinterpret_cast<uint8_t*>(blocks.data() + i * bytes);
      const uint16_t one = 0x3C00;
      if (t == DType::IQ1_M) {
        for (int j = 0; j < 4; ++j) b[49 + 2 * j] = uint8_t((b[49 + 2 * j] & 0x0F) | ((one >> (4 * j)) & 0xF) << 4);
      } else {
        b[0] = one & 0xFF, b[1] = one >> 8;
      }
    }
    std::vector<float> out(kBlocks * 256);
    dequantize(t, blocks.data(), out);
    EXPECT_EQ(fnv1a(out), want) << dtype_name(t);
  }
}

// Zero input gives zero blocks that decode to zero, for every type (d = 0 paths).
TEST(Quant, ZerosStayZero) {
  std::vector<float> zeros(512, 0.0f), back(512, 1.0f);
  for (DType t : kBlockTypes) {
    std::vector<std::byte> q;
    quantize(t, zeros, q);
    dequantize(t, q.data(), back);
    for (float v : back) ASSERT_EQ(v, 0.0f) << dtype_name(t);
  }
}

// ---- 2. Round trips on random data ------------------------------------------------------------

// Upper bounds of the worst row's normalized RMS error on Gaussian rows (with a few outliers),
// each 1.2x to 1.3x what this quantizer measures on this data (printed by the test). The
// corrupted decoder below must land well above them.
struct RoundTripCase {
  DType dtype;
  double bound;
};
constexpr RoundTripCase kRoundTrip[] = {
    {DType::Q4_0, 0.15},  {DType::Q4_1, 0.11}, {DType::Q5_0, 0.07},  {DType::Q5_1, 0.052},
    {DType::Q8_0, 0.009}, {DType::Q2_K, 0.40},  {DType::Q3_K, 0.23}, {DType::Q4_K, 0.10},
    {DType::Q5_K, 0.052}, {DType::Q6_K, 0.029}, {DType::IQ4_NL, 0.125}, {DType::IQ4_XS, 0.13},
    {DType::MXFP4, 0.18},
};

// The byte range of a block that holds quant nibbles (or int8 values), for the corrupted decoder.
std::pair<size_t, size_t> quant_bytes(DType t) {
  switch (t) {
    case DType::Q4_0: return {2, 18};
    case DType::Q4_1: return {4, 20};
    case DType::Q5_0: return {6, 22};
    case DType::Q5_1: return {8, 24};
    case DType::Q8_0: return {2, 34};
    case DType::Q2_K: return {16, 80};
    case DType::Q3_K: return {32, 96};
    case DType::Q4_K: return {16, 144};
    case DType::Q5_K: return {48, 176};
    case DType::Q6_K: return {0, 128};
    case DType::IQ4_NL: return {2, 18};
    case DType::IQ4_XS: return {8, 136};
    case DType::MXFP4: return {1, 17};
    default: return {0, 0};
  }
}

TEST(Quant, RoundTripRandom) {
  constexpr size_t kRows = 13, kRowLength = 768;  // an odd number of rows, 3 super-blocks per row
  std::mt19937 rng(1234);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(kRows * kRowLength);
  for (size_t r = 0; r < kRows; ++r) {
    const float scale = std::pow(10.0f, float(int(r % 5) - 2));  // 0.01 .. 100
    const float shift = r % 3 == 1 ? 0.5f * scale : 0.0f;         // some rows off-centre
    for (size_t i = 0; i < kRowLength; ++i) x[r * kRowLength + i] = scale * normal(rng) + shift;
    x[r * kRowLength + (r * 37) % kRowLength] *= 6.0f;  // an outlier per row
  }
  for (const auto& c : kRoundTrip) {
    SCOPED_TRACE(std::string(dtype_name(c.dtype)));
    std::vector<std::byte> q{std::byte{0x5a}};  // quantize appends: keep a byte in front
    quantize(c.dtype, x, q);
    ASSERT_EQ(q.size(), 1 + *quantized_bytes(c.dtype, kRowLength, kRows));
    EXPECT_EQ(q[0], std::byte{0x5a});
    std::vector<float> y(x.size());
    dequantize(c.dtype, q.data() + 1, y);
    const double error = worst_row_error(x, y, kRowLength);
    fmt::print("  {:5} worst-row normalized RMS error {:.5f} (bound {})\n", dtype_name(c.dtype), error, c.bound);
    EXPECT_LT(error, c.bound);
    EXPECT_GT(error, c.bound / 4) << "bound is far too loose to catch anything";

    // Negative control: swapping the two nibbles of every quant byte (the classic lo/hi mix-up)
    // must blow through the bound.
    std::vector<std::byte> bad(q.begin() + 1, q.end());
    const auto [begin, end] = quant_bytes(c.dtype);
    for (size_t blk = 0; blk < bad.size() / block_bytes(c.dtype); ++blk)
      for (size_t k = begin; k < end; ++k) {
        std::byte& v = bad[blk * block_bytes(c.dtype) + k];
        v = (v >> 4) | (v << 4);
      }
    dequantize(c.dtype, bad.data(), y);
    const double bad_error = worst_row_error(x, y, kRowLength);
    fmt::print("        swapped nibbles: {:.3f}\n", bad_error);
    EXPECT_GT(bad_error, 3 * c.bound);
  }
}

// ---- 3. Byte for byte against llama-quantize ---------------------------------------------------

namespace {

// A reference source: HF tensors by GGUF name, with the rows of q/k put in llama.cpp's order
// when its converter permuted them (GGUF `llama` and `eagle3`, not `llama4`): within each head,
// row 2i + j comes from row j * head_dim / 2 + i.
struct Source {
  Checkpoint ckpt;
  std::function<std::string(const std::string&)> hf_name;  // "" for tensors we do not compare
  bool permuted_qk = false;
  int64_t heads = 0, kv_heads = 0;

  std::vector<float> values(const std::string& gguf_name) const {
    const TensorView& t = ckpt.get(hf_name(gguf_name));
    std::vector<float> x = to_f32(t);
    const bool q = gguf_name.ends_with("attn_q.weight"), k = gguf_name.ends_with("attn_k.weight");
    if (!permuted_qk || (!q && !k)) return x;
    const int64_t rows = t.shape.at(0), cols = t.shape.at(1), n_head = q ? heads : kv_heads, hd = rows / n_head;
    std::vector<float> y(x.size());
    for (int64_t h = 0; h < n_head; ++h)
      for (int64_t i = 0; i < hd / 2; ++i)
        for (int64_t j = 0; j < 2; ++j)
          std::copy_n(&x[(h * hd + j * (hd / 2) + i) * cols], cols, &y[(h * hd + 2 * i + j) * cols]);
    return y;
  }
  // As a SourceValues (below): nullopt for the tensors it does not map.
  std::optional<std::vector<float>> operator()(const std::string& gguf_name) const {
    if (hf_name(gguf_name).empty()) return std::nullopt;
    return values(gguf_name);
  }
};

// blk.N.<suffix> -> <prefix>N.<hf suffix> for the dense Llama tensors; "" for the rest.
std::string map_llama(const std::string& name, const std::string& layer_prefix, const std::string& ffn) {
  static const std::pair<const char*, const char*> kSuffixes[] = {
      {"attn_q.weight", "self_attn.q_proj.weight"},  {"attn_k.weight", "self_attn.k_proj.weight"},
      {"attn_v.weight", "self_attn.v_proj.weight"},  {"attn_output.weight", "self_attn.o_proj.weight"},
      {"ffn_gate.weight", "gate_proj.weight"},        {"ffn_up.weight", "up_proj.weight"},
      {"ffn_down.weight", "down_proj.weight"},        {"ffn_gate_shexp.weight", "shared_expert.gate_proj.weight"},
      {"ffn_up_shexp.weight", "shared_expert.up_proj.weight"},
      {"ffn_down_shexp.weight", "shared_expert.down_proj.weight"},
  };
  if (!name.starts_with("blk.")) return "";
  const size_t dot = name.find('.', 4);
  const std::string layer = name.substr(4, dot - 4), suffix = name.substr(dot + 1);
  for (const auto& [gguf, hf] : kSuffixes)
    if (suffix == gguf) return layer_prefix + layer + "." + (suffix.starts_with("ffn") ? ffn : "") + hf;
  return "";
}

int64_t meta_int(const GgufFile& f, const std::string& key) {
  auto v = f.header.get_int(key);
  if (!v) ADD_FAILURE() << "missing key " << key;
  return v.value_or(0);
}

struct FileReport {
  size_t tensors = 0, blocks = 0, equal_blocks = 0;
  std::map<DType, double> worst_error;  // of decoding llama.cpp's blocks, per type
};

// The values a GGUF tensor was quantized from, by its name; nullopt for tensors not compared.
using SourceValues = std::function<std::optional<std::vector<float>>(const std::string&)>;

// The worst row's normalized RMS error that decoding a type's blocks may leave against their
// source (about 1.3x what llama-quantize's blocks of these models leave).
double decode_bound(DType t) {
  switch (t) {
    case DType::Q8_0: return 0.01;
    case DType::Q6_K: return 0.03;
    case DType::Q3_K: return 0.24;
    case DType::Q2_K: return 0.5;
    default: return 0.12;
  }
}

// Quantizes the source of every block-quantized tensor of `file` that `source` maps and compares
// bytes; also checks that our decoding of llama.cpp's blocks is close to the source.
FileReport compare_file(const fs::path& path, const SourceValues& source) {
  GgufFile file = GgufFile::open(path);
  FileReport report;
  for (const GgufTensorInfo& info : file.header.tensors) {
    if (!is_quantized(info.dtype)) continue;
    const std::optional<std::vector<float>> values = source(info.name);
    if (!values) continue;
    SCOPED_TRACE(fmt::format("{} {} ({})", path.filename().string(), info.name, dtype_name(info.dtype)));
    const std::vector<float>& x = *values;
    std::vector<std::byte> ours;
    quantize(info.dtype, x, ours);
    EXPECT_EQ(ours.size(), info.bytes);
    if (ours.size() != info.bytes) continue;
    const std::byte* theirs = file.data(info);
    const size_t bb = block_bytes(info.dtype), n_blocks = ours.size() / bb;
    size_t equal = 0, first_bad = n_blocks;
    for (size_t i = 0; i < n_blocks; ++i) {
      if (std::memcmp(ours.data() + i * bb, theirs + i * bb, bb) == 0)
        ++equal;
      else if (first_bad == n_blocks)
        first_bad = i;
    }
    EXPECT_EQ(equal, n_blocks) << "first differing block " << first_bad;
    ++report.tensors;
    report.blocks += n_blocks;
    report.equal_blocks += equal;

    // Our decoder on their blocks: the error against the source is the type's usual one.
    std::vector<float> y(x.size());
    dequantize(info.dtype, theirs, y);
    const double error = worst_row_error(x, y, info.ne.at(0));
    report.worst_error[info.dtype] = std::max(report.worst_error[info.dtype], error);
    EXPECT_LT(error, decode_bound(info.dtype));
  }
  fmt::print("  {}: {} tensors, {}/{} blocks byte-equal; worst decoded row error", path.filename().string(),
             report.tensors, report.equal_blocks, report.blocks);
  for (auto [t, e] : report.worst_error) fmt::print(" {} {:.3f}", dtype_name(t), e);
  fmt::print("\n");
  return report;
}

Source llama3_target(const GgufFile& meta) {
  Source s{Checkpoint::open(kAssets / "tiny-llama3" / "model.safetensors"), nullptr, true,
           meta_int(meta, "llama.attention.head_count"), meta_int(meta, "llama.attention.head_count_kv")};
  s.hf_name = [](const std::string& n) -> std::string {
    if (n == "token_embd.weight") return "model.embed_tokens.weight";
    if (n == "output.weight") return "lm_head.weight";
    return map_llama(n, "model.layers.", "mlp.");
  };
  return s;
}

}  // namespace

// The EAGLE-3 draft's Q8_0 file against our Q8_0 of its F32 file: GGUF to GGUF, every tensor.
TEST(QuantFiles, Q8_0MatchesLlamaQuantizeOnF32Gguf) {
  const fs::path dir = kAssets / "gguf" / "tiny-llama3";
  GgufFile f32 = GgufFile::open(dir / "tiny-llama3-eagle3-f32.gguf");
  GgufFile q8 = GgufFile::open(dir / "tiny-llama3-eagle3-q8_0.gguf");
  size_t compared = 0;
  for (const GgufTensorInfo& info : f32.header.tensors) {
    if (info.dtype != DType::F32 || info.ne.size() != 2) continue;
    SCOPED_TRACE(info.name);
    const GgufTensorInfo* target = q8.header.find_tensor(info.name);
    ASSERT_NE(target, nullptr);
    ASSERT_EQ(target->dtype, DType::Q8_0);
    std::vector<float> x(info.bytes / 4);
    std::memcpy(x.data(), f32.data(info), info.bytes);
    std::vector<std::byte> ours;
    quantize(DType::Q8_0, x, ours);
    ASSERT_EQ(ours.size(), target->bytes);
    EXPECT_EQ(std::memcmp(ours.data(), q8.data(*target), ours.size()), 0);
    ++compared;
  }
  EXPECT_EQ(compared, 9u);  // q, k, v, o, gate, up, down, fc, output
}

// Every quantized tensor of the tiny-llama3 target files (Q8_0, Q6_K, Q4_K_M = Q4_K + Q6_K, Q4_0
// with a Q6_K output) against our quantization of the bf16 checkpoint (which the F32 GGUF holds
// exactly); q/k rows permuted as llama.cpp's converter does.
TEST(QuantFiles, Llama3TargetMatchesLlamaQuantize) {
  const fs::path dir = kAssets / "gguf" / "tiny-llama3";
  GgufFile meta = GgufFile::open(dir / "tiny-llama3-q4_0.gguf");
  const Source src = llama3_target(meta);
  for (const char* file : {"tiny-llama3-q8_0.gguf", "tiny-llama3-q6_k.gguf", "tiny-llama3-q4_k_m.gguf",
                           "tiny-llama3-q4_0.gguf"}) {
    FileReport r = compare_file(dir / file, std::cref(src));
    EXPECT_EQ(r.tensors, 8u * 7 + 2) << file;  // 7 matrices per layer, token_embd, output
  }
}

// llama-quantize's Q2_K, Q3_K_M, IQ4_NL and IQ4_XS of the tiny-llama3 F16 file (made from that
// file, not from an F32 one: assets/gguf/low-bit.md), against our quantization of the same F16
// values. The mixes cover Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL and IQ4_XS.
TEST(QuantFiles, LowBitMixesMatchLlamaQuantizeOnF16Gguf) {
  const fs::path dir = kAssets / "gguf" / "tiny-llama3";
  GgufFile f16 = GgufFile::open(dir / "tiny-llama3-f16.gguf");
  const SourceValues from_f16 = [&](const std::string& name) -> std::optional<std::vector<float>> {
    const GgufTensorInfo* t = f16.header.find_tensor(name);
    if (!t || t->dtype != DType::F16) return std::nullopt;
    std::vector<float> x(t->bytes / 2);
    dequantize(DType::F16, f16.data(*t), x);
    return x;
  };
  const std::pair<const char*, std::vector<DType>> kFiles[] = {
      {"tiny-llama3-q2_k.gguf", {DType::Q2_K, DType::Q3_K, DType::Q6_K}},
      {"tiny-llama3-q3_k_m.gguf", {DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K}},
      {"tiny-llama3-iq4_nl.gguf", {DType::IQ4_NL, DType::Q5_K, DType::Q6_K}},
      {"tiny-llama3-iq4_xs.gguf", {DType::IQ4_XS, DType::Q5_K, DType::Q6_K}},
  };
  for (const auto& [file, types] : kFiles) {
    FileReport r = compare_file(dir / file, from_f16);
    EXPECT_EQ(r.tensors, 8u * 7 + 2) << file;
    for (DType t : types) EXPECT_TRUE(r.worst_error.contains(t)) << file << " has no " << dtype_name(t);
  }
}

// llama-quantize's MXFP4_MOE file of tiny-llama4 (its experts in MXFP4, the rest in Q8_0; from the
// vendored F16 file, assets/gguf/low-bit.md): eaglevk's quantizer under llama-quantize's type rule
// writes every tensor byte for byte (ref/tiny-llama4-mxfp4_moe.blocks.json: each tensor's type,
// size and FNV-1a of its bytes in llama-quantize's file), and its decoder turns every quantized
// tensor into ggml's floats bit for bit (ref/<stem>.dequant.json).
TEST(QuantFiles, Mxfp4MoeMatchesLlamaQuantize) {
  const fs::path dir = kAssets / "gguf" / "tiny-llama4";
  const GgufFile f16 = GgufFile::open(dir / "tiny-llama4-f16.gguf");
  const std::vector<eaglevk::testing::RebuiltTensor> rebuilt = eaglevk::testing::rebuild_tiny_llama4_mxfp4_moe(f16);
  const nlohmann::json blocks = nlohmann::json::parse(std::ifstream(dir / "ref" / "tiny-llama4-mxfp4_moe.blocks.json"));
  const nlohmann::json floats = nlohmann::json::parse(std::ifstream(dir / "ref" / "tiny-llama4-mxfp4_moe.dequant.json"));
  ASSERT_EQ(blocks.at("tensors").size(), rebuilt.size());
  std::map<std::string, const eaglevk::testing::RebuiltTensor*> by_name;
  for (const auto& t : rebuilt) by_name[t.name] = &t;
  std::map<DType, size_t> count;
  for (const auto& want : blocks.at("tensors")) {
    const std::string name = want.at("name");
    SCOPED_TRACE(name);
    ASSERT_TRUE(by_name.contains(name));
    const eaglevk::testing::RebuiltTensor& t = *by_name[name];
    EXPECT_EQ(dtype_name(t.dtype), want.at("type").get<std::string>());
    EXPECT_EQ(t.bytes.size(), want.at("bytes").get<size_t>());
    EXPECT_EQ(fmt::format("{:016x}", eaglevk::testing::fnv1a_bytes(t.bytes)), want.at("fnv1a64").get<std::string>());
    ++count[t.dtype];
  }
  EXPECT_EQ(count[DType::MXFP4], 12u);  // gate, up, down of the 4 MoE layers
  EXPECT_EQ(count[DType::Q8_0], 58u);
  for (const auto& want : floats.at("tensors")) {
    const std::string name = want.at("name");
    SCOPED_TRACE(name);
    const eaglevk::testing::RebuiltTensor& t = *by_name.at(name);
    std::vector<float> y(want.at("elements").get<size_t>());
    dequantize(t.dtype, t.bytes.data(), y);
    EXPECT_EQ(fmt::format("{:016x}", fnv1a(y)), want.at("fnv1a64").get<std::string>());
    for (size_t i = 0; i < 8; ++i) EXPECT_EQ(y[i], want.at("first").at(i).get<float>()) << "element " << i;
  }
}

// llama-quantize's IQ1_S, IQ1_M, IQ2_S and IQ3_XXS mixes of tiny-llama3 (made with an importance
// matrix, which these types need: assets/gguf/low-bit.md): every block-quantized tensor decodes to
// the floats of llama.cpp's own decoder (ref/<stem>.dequant.json: FNV-1a of the float bits, their
// sum and first values, from ggml's dequantize_row_*). The mixes hold all seven lattice formats
// beside Q2_K, Q3_K, Q4_K, Q5_K, Q6_K.
TEST(QuantFiles, LatticeMixesDecodeAsLlamaCpp) {
  std::map<DType, size_t> tensors_of;
  // Pair A's mixes, then pair B's IQ2_XXS and IQ1_S mixes (the experts [E, out, in] in one tensor).
  for (const char* stem : {"tiny-llama3-iq1_s", "tiny-llama3-iq1_m", "tiny-llama3-iq2_s", "tiny-llama3-iq3_xxs",
                           "tiny-llama4-iq2_xxs", "tiny-llama4-iq1_s"}) {
    const bool llama4 = std::string_view(stem).starts_with("tiny-llama4");
    const fs::path dir = kAssets / "gguf" / (llama4 ? "tiny-llama4" : "tiny-llama3");
    GgufFile file = GgufFile::open(dir / (std::string(stem) + ".gguf"));
    std::ifstream in(dir / "ref" / (std::string(stem) + ".dequant.json"));
    ASSERT_TRUE(in) << stem;
    const nlohmann::json ref = nlohmann::json::parse(in);
    size_t compared = 0;
    for (const auto& t : ref.at("tensors")) {
      const std::string name = t.at("name");
      SCOPED_TRACE(fmt::format("{} {} ({})", stem, name, t.at("type").get<std::string>()));
      const GgufTensorInfo* info = file.header.find_tensor(name);
      ASSERT_NE(info, nullptr);
      ASSERT_TRUE(is_quantized(info->dtype));
      std::vector<float> y(t.at("elements").get<size_t>());
      dequantize(info->dtype, file.data(*info), y);
      EXPECT_EQ(fmt::format("{:016x}", fnv1a(y)), t.at("fnv1a64").get<std::string>());
      double sum = 0;
      for (float v : y) sum += v;
      EXPECT_DOUBLE_EQ(sum, t.at("sum").get<double>());
      for (size_t i = 0; i < 8; ++i) EXPECT_EQ(y[i], t.at("first").at(i).get<float>()) << "element " << i;
      ++tensors_of[info->dtype];
      ++compared;
    }
    // Pair A: 7 matrices a layer; pair B: 7 in the 4 dense layers, 4 + 3 shared + 3 experts' in
    // the 4 MoE layers (the router stays F32); and token_embd, output.
    EXPECT_EQ(compared, (llama4 ? 4u * 7 + 4u * 10 : 8u * 7) + 2) << stem;
  }
  for (DType t : kLatticeTypes) EXPECT_GT(tensors_of[t], 0u) << "no file holds " << dtype_name(t);
  for (auto [t, n] : tensors_of) fmt::print("  {}: {} tensors\n", dtype_name(t), n);
}

// Pair B: the dense and shared-expert tensors of the Llama-4 Q4_K_M file (the routed experts are
// fused and transposed by the converter; not compared) and its EAGLE-3 draft's Q8_0 file against
// the bf16 checkpoints. llama.cpp permutes q/k for the draft (arch `eagle3`) but not for `llama4`.
TEST(QuantFiles, Llama4PairMatchesLlamaQuantize) {
  const fs::path dir = kAssets / "gguf" / "tiny-llama4";
  Source target{Checkpoint::open(kAssets / "tiny-llama4" / "model.safetensors"), nullptr, false, 0, 0};
  target.hf_name = [](const std::string& n) -> std::string {
    if (n == "token_embd.weight") return "language_model.model.embed_tokens.weight";
    if (n == "output.weight") return "language_model.lm_head.weight";
    return map_llama(n, "language_model.model.layers.", "feed_forward.");
  };
  FileReport r = compare_file(dir / "tiny-llama4-q4_k_m.gguf", std::cref(target));
  EXPECT_EQ(r.tensors, 58u);  // per layer q, k, v, o and 3 dense or 3 shared-expert FFN; embd, output

  GgufFile draft_meta = GgufFile::open(dir / "tiny-llama4-eagle3-q8_0.gguf");
  Source draft{Checkpoint::open(kAssets / "tiny-llama4-eagle3" / "model.safetensors"), nullptr, true,
               meta_int(draft_meta, "eagle3.attention.head_count"), meta_int(draft_meta, "eagle3.attention.head_count_kv")};
  draft.hf_name = [](const std::string& n) -> std::string {
    if (n == "token_embd.weight") return "embed_tokens.weight";
    if (n == "output.weight") return "lm_head.weight";
    if (n == "fc.weight") return "fc.weight";
    return map_llama(n, "layers.", "mlp.");
  };
  r = compare_file(dir / "tiny-llama4-eagle3-q8_0.gguf", std::cref(draft));
  EXPECT_EQ(r.tensors, 10u);
}

// ---- 4. F16 files -------------------------------------------------------------------------------

// dequantize(F16) of the converter's F16 tensors is the bf16 source rounded to f16 (to nearest
// even; only values below the f16 normal range change, by at most half an f16 subnormal step).
TEST(QuantFiles, F16FileIsBf16SourceRounded) {
  const fs::path path = kAssets / "gguf" / "tiny-llama3" / "tiny-llama3-f16.gguf";
  GgufFile file = GgufFile::open(path);
  const Source src = llama3_target(file);
  size_t tensors = 0, changed = 0, too_far = 0, total = 0;
  for (const GgufTensorInfo& info : file.header.tensors) {
    if (info.dtype != DType::F16 || src.hf_name(info.name).empty()) continue;
    SCOPED_TRACE(info.name);
    const std::vector<float> x = src.values(info.name);
    ASSERT_EQ(info.bytes, 2 * x.size());
    std::vector<float> y(x.size());
    dequantize(DType::F16, file.data(info), y);
    int shown = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const float rounded = f16_to_f32(f32_to_f16(x[i]));
      if (y[i] != rounded && shown++ < 5) ADD_FAILURE() << "element " << i << ": " << y[i] << " != " << rounded;
      too_far += std::fabs(y[i] - x[i]) > std::ldexp(1.0f, -25);
      changed += y[i] != x[i];
    }
    total += x.size();
    ++tensors;
  }
  EXPECT_EQ(tensors, 8u * 7 + 2);
  EXPECT_EQ(too_far, 0u) << "elements further than half an f16 subnormal step from the bf16 source";
  fmt::print("  {} F16 tensors, {} of {} elements differ from bf16 (f16 subnormals)\n", tensors, changed, total);
  EXPECT_GT(changed, 0u);
  EXPECT_LT(changed, total / 1000);
}
