// 4-bit integer checkpoints on the host (loader/int4.h): each layout's parts built here from
// codes, zeros and scales as its header describes them, gathered into one weight and decoded
// element by element as (q - zero) * scale; and the broken files. (The layouts themselves are
// checked against llama.cpp's converter: docs/testing.md.)
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include <gtest/gtest.h>

#include "loader/int4.h"
#include "loader/quant.h"
#include "support/loader_test_util.h"

using namespace eaglevk::loader;
using eaglevk::testing::expect_error;
using eaglevk::testing::FakeCheckpoint;
using Layout = Int4Parts::Layout;

namespace {


constexpr int kAwqNibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};

// A weight of R outputs and C inputs in groups of g: codes, zeros and f16 scales, and the parts
// of each layout made from them.
struct Int4Case {
  int64_t R = 16, C = 96, g = 32;
  std::vector<int> q, z;        // [R][C], [R][G]
  std::vector<uint16_t> s;      // [R][G], f16
  int64_t G() const { return (C + g - 1) / g; }
  float value(int64_t r, int64_t c) const {
    return float(double(q[size_t(r * C + c)] - z[size_t(r * G() + c / g)]) * double(f16_to_f32(s[size_t(r * G() + c / g)])));
  }
  // GPTQ's original format stores zero - 1 in 4 bits, so zero 0 cannot be stored there (its -1
  // reads back as 16, as llama.cpp's converter and the GPTQ kernels read it): min_zero 1 then.
  explicit Int4Case(uint32_t seed, bool symmetric = false, int64_t group = 32, int min_zero = 0) : g(group) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> scale(0.001f, 0.05f);
    q.resize(size_t(R * C)), z.resize(size_t(R * G())), s.resize(size_t(R * G()));
    for (int& v : q) v = int(rng() % 16);
    for (int& v : z) v = symmetric ? 8 : std::max(min_zero, int(rng() % 16));
    for (uint16_t& v : s) v = f32_to_f16(scale(rng));
  }
  // Words of 8 nibbles: nibble(word, position) = value.
  static void put(std::vector<uint32_t>& words, int64_t word, int position, int value) {
    words[size_t(word)] |= uint32_t(value & 15) << (4 * position);
  }
  void write(FakeCheckpoint& f, Layout layout, const std::string& base, bool zeros = true, int zero_offset = 0) const {
    std::vector<uint16_t> st(s.size());  // [G][R]
    for (int64_t r = 0; r < R; ++r)
      for (int64_t k = 0; k < G(); ++k) st[size_t(k * R + r)] = s[size_t(r * G() + k)];
    if (layout == Layout::CompressedTensors) {
      std::vector<uint32_t> packed(size_t(R * C / 8)), zp(size_t((R + 7) / 8 * G()));
      for (int64_t r = 0; r < R; ++r)
        for (int64_t c = 0; c < C; ++c) put(packed, r * (C / 8) + c / 8, int(c % 8), q[size_t(r * C + c)]);
      for (int64_t r = 0; r < R; ++r)
        for (int64_t k = 0; k < G(); ++k) put(zp, (r / 8) * G() + k, int(r % 8), z[size_t(r * G() + k)]);
      f.add(base + ".weight_packed", DType::I32, {R, C / 8}, packed);
      f.add(base + ".weight_scale", DType::F16, {R, G()}, s);
      f.add(base + ".weight_shape", DType::I64, {2}, std::vector<int64_t>{R, C});
      if (zeros) f.add(base + ".weight_zero_point", DType::I32, {(R + 7) / 8, G()}, zp);
      return;
    }
    const bool gptq = layout == Layout::Gptq;
    std::vector<uint32_t> qweight(size_t(R * C / 8)), qzeros(size_t(G() * R / 8));
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < C; ++c) {
        if (gptq)
          put(qweight, (c / 8) * R + r, int(c % 8), q[size_t(r * C + c)]);
        else
          put(qweight, c * (R / 8) + r / 8, kAwqNibble[r % 8], q[size_t(r * C + c)]);
      }
    for (int64_t r = 0; r < R; ++r)
      for (int64_t k = 0; k < G(); ++k) {
        const int zero = z[size_t(r * G() + k)] - zero_offset;
        if (gptq)
          put(qzeros, k * (R / 8) + r / 8, int(r % 8), zero);
        else
          put(qzeros, k * (R / 8) + r / 8, kAwqNibble[r % 8], zero);
      }
    f.add(base + ".qweight", DType::I32, gptq ? std::vector<int64_t>{C / 8, R} : std::vector<int64_t>{C, R / 8}, qweight);
    f.add(base + ".qzeros", DType::I32, {G(), R / 8}, qzeros);
    f.add(base + ".scales", DType::F16, {G(), R}, st);
  }
};

QuantScheme scheme(const char* method, int64_t group, int zero_offset = 0) {
  QuantScheme s{method};
  s.int4 = true;
  s.group_size = group;
  s.zero_offset = zero_offset;
  return s;
}

void expect_decodes(const Checkpoint& ckpt, const std::string& name, const Int4Case& c) {
  const TensorView& w = ckpt.get(name);
  ASSERT_EQ(w.dtype, DType::INT4_PACKED);
  ASSERT_EQ(w.shape, (std::vector<int64_t>{c.R, c.C}));
  EXPECT_EQ(upload_bytes(w), uint64_t(c.R * c.C / 32 * 24));
  std::vector<std::byte> blocks;
  int4_rows_to_blocks(w, 0, c.R, blocks);
  ASSERT_EQ(blocks.size(), upload_bytes(w));
  std::vector<float> got(size_t(c.R * c.C));
  dequantize(DType::INT4_B32, blocks.data(), got);
  for (int64_t r = 0; r < c.R; ++r)
    for (int64_t col = 0; col < c.C; ++col) ASSERT_EQ(got[size_t(r * c.C + col)], c.value(r, col)) << r << ", " << col;
  std::vector<std::byte> part;
  int4_rows_to_blocks(w, 5, 3, part);
  EXPECT_TRUE(std::equal(part.begin(), part.end(), blocks.begin() + 5 * (c.C / 32 * 24)));
}

TEST(Int4Weights, EveryLayoutDecodesAsItsDefinition) {
  struct LayoutCase {
    const char* label;
    Layout layout;
    QuantScheme s;
    bool zeros;
    int zero_offset;
  };
  const LayoutCase cases[] = {
      {"gptq, zero - 1", Layout::Gptq, scheme("gptq", 32, 1), true, 1},
      {"gptq_v2", Layout::Gptq, scheme("gptq", 32, 0), true, 0},
      {"awq", Layout::Awq, scheme("awq", 32), true, 0},
      {"compressed-tensors, zero points", Layout::CompressedTensors, scheme("compressed-tensors", 32), true, 0},
      {"compressed-tensors, symmetric", Layout::CompressedTensors, scheme("compressed-tensors", 32), false, 0},
  };
  uint32_t seed = 1;
  for (const LayoutCase& lc : cases) {
    SCOPED_TRACE(lc.label);
    const Int4Case c(seed++, !lc.zeros, 32, lc.zero_offset);
    FakeCheckpoint f;
    c.write(f, lc.layout, "model.layers.0.mlp.up_proj", lc.zeros, lc.zero_offset);
    f.add("model.norm.weight", DType::F32, {4}, std::vector<float>(4, 1.0f));
    std::vector<std::string> notes;
    attach_int4_weights(f.ckpt, lc.s, "config.json", notes);
    EXPECT_EQ(f.ckpt.names(), (std::vector<std::string>{"model.layers.0.mlp.up_proj.weight", "model.norm.weight"}));
    expect_decodes(f.ckpt, "model.layers.0.mlp.up_proj.weight", c);
    ASSERT_EQ(notes.size(), 1u);
  }
  // One group a row (group_size -1, strategy channel) and groups of 64 over 96 inputs (a partial last group).
  for (int64_t g : {int64_t(96), int64_t(64)}) {
    const Int4Case c(40 + uint32_t(g), false, g, 1);
    FakeCheckpoint f;
    c.write(f, Layout::Gptq, "w", true, 1);
    std::vector<std::string> notes;
    attach_int4_weights(f.ckpt, scheme("gptq", g == 96 ? 0 : g, 1), "config.json", notes);
    expect_decodes(f.ckpt, "w.weight", c);
  }
}

TEST(Int4Weights, PlainGroupIndicesAndZeroBiasesAreReadPast) {
  const Int4Case c(7, false, 32, 1);
  FakeCheckpoint f;
  c.write(f, Layout::Gptq, "q_proj", true, 1);
  std::vector<int32_t> g_idx(size_t(c.C));
  for (int64_t i = 0; i < c.C; ++i) g_idx[size_t(i)] = int32_t(i / c.g);
  f.add("q_proj.g_idx", DType::I32, {c.C}, g_idx);
  f.add("q_proj.bias", DType::F16, {c.R}, std::vector<uint16_t>(size_t(c.R), 0x8000));  // -0.0
  std::vector<std::string> notes;
  attach_int4_weights(f.ckpt, scheme("gptq", 32, 1), "config.json", notes);
  EXPECT_EQ(f.ckpt.names(), (std::vector<std::string>{"q_proj.weight"}));
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("1 all-zero biases dropped"), std::string::npos) << notes[0];
  expect_decodes(f.ckpt, "q_proj.weight", c);
}

TEST(Int4Weights, BrokenFilesAreErrors) {
  const Int4Case c(9);
  auto attach = [](FakeCheckpoint& f, const QuantScheme& s) {
    std::vector<std::string> notes;
    attach_int4_weights(f.ckpt, s, "config.json", notes);
  };
  const QuantScheme gptq = scheme("gptq", 32, 1), ct = scheme("compressed-tensors", 32);
  {
    FakeCheckpoint f;
    c.write(f, Layout::Gptq, "w", true, 1);
    f.ckpt.tensors.erase("w.scales");
    expect_error([&] { attach(f, gptq); }, "has no 'w.scales'");
  }
  {
    FakeCheckpoint f;
    c.write(f, Layout::CompressedTensors, "w");
    f.ckpt.tensors.erase("w.weight_shape");
    expect_error([&] { attach(f, ct); }, "has no 'w.weight_shape'");
  }
  {
    FakeCheckpoint f;
    c.write(f, Layout::Gptq, "w", true, 1);
    expect_error([&] { attach(f, scheme("gptq", 64, 1)); }, "expected [2, 16]");  // scales of groups of 32
  }
  {
    FakeCheckpoint f;
    c.write(f, Layout::Gptq, "w", true, 1);
    expect_error([&] { attach(f, scheme("gptq", 16, 1)); }, "blocks of 32");
  }
  {
    FakeCheckpoint f;
    c.write(f, Layout::Gptq, "w", true, 1);
    std::vector<int32_t> g_idx(size_t(c.C));
    for (int64_t i = 0; i < c.C; ++i) g_idx[size_t(i)] = int32_t((c.C - 1 - i) / c.g);  // act-order
    f.add("w.g_idx", DType::I32, {c.C}, g_idx);
    expect_error([&] { attach(f, gptq); }, "act-order");
  }
  {
    FakeCheckpoint f;
    c.write(f, Layout::Awq, "w");
    f.add("w.bias", DType::F16, {c.R}, std::vector<uint16_t>(size_t(c.R), 0x3c00));
    expect_error([&] { attach(f, scheme("awq", 32)); }, "non-zero bias");
  }
  {
    FakeCheckpoint f;
    c.write(f, Layout::Gptq, "w", true, 1);
    f.add("w.weight", DType::F16, {c.R, c.C}, std::vector<uint16_t>(size_t(c.R * c.C)));
    expect_error([&] { attach(f, gptq); }, "both 'w.weight' and its packed");
  }
  {
    FakeCheckpoint f;
    f.add("w.weight", DType::F16, {2, 2}, std::vector<uint16_t>(4));
    expect_error([&] { attach(f, gptq); }, "no tensor ends in .qweight");
  }
  {
    FakeCheckpoint f;
    c.write(f, Layout::CompressedTensors, "w");
    f.ckpt.tensors.erase("w.weight_shape");
    f.add("w.weight_shape", DType::I64, {2}, std::vector<int64_t>{c.R, c.C + 8});
    expect_error([&] { attach(f, ct); }, "expected [16, 13]");
  }
  {
    Int4Case bad = c;
    bad.s[3] = 0x7c00;  // +inf
    FakeCheckpoint f;
    bad.write(f, Layout::Awq, "w");
    attach(f, scheme("awq", 32));
    std::vector<std::byte> out;
    expect_error([&] { int4_rows_to_blocks(f.ckpt.get("w.weight"), 0, bad.R, out); }, "scale of row 1, group 0 is inf");
  }
}

}  // namespace
