// The weight scan at load (loader/tensor_check.h): for every float type, the first NaN or
// infinity it reports is the first one std::isfinite finds in the values decoded by the
// library's converters (the reference); for the ggml block types, the block whose scale is bad
// is the block holding the first non-finite dequantized value; finite data, extremes and
// subnormals included, passes; a checkpoint with a bad element is refused naming the tensor,
// the element and the file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>

#include <fmt/format.h>

#include <eaglevk/error.h>

#include "loader/quant.h"
#include "loader/safetensors.h"
#include "loader/tensor_check.h"
#include "support/loader_test_util.h"
#include "support/quantize.h"

namespace fs = std::filesystem;
using namespace eaglevk::loader;
using eaglevk::testing::expect_error;
using eaglevk::testing::quantize;

namespace {

TensorView view_of(const std::string& name, DType dtype, std::vector<int64_t> shape, const std::vector<std::byte>& bytes) {
  TensorView v;
  v.name = name;
  v.dtype = dtype;
  v.shape = std::move(shape);
  v.data = bytes.data();
  v.bytes = bytes.size();
  v.file = "memory";
  return v;
}

std::vector<std::byte> encode(DType dtype, const std::vector<float>& values) {
  std::vector<std::byte> out(values.size() * dtype_size(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::F32) {
      std::memcpy(out.data() + 4 * i, &values[i], 4);
    } else {
      const uint16_t bits = dtype == DType::BF16 ? f32_to_bf16(values[i]) : f32_to_f16(values[i]);
      std::memcpy(out.data() + 2 * i, &bits, 2);
    }
  }
  return out;
}

// The first index whose decoded value is not finite, by the library's own decoder.
std::optional<uint64_t> reference_first(const TensorView& v) {
  const std::vector<float> decoded = to_f32(v);
  for (size_t i = 0; i < decoded.size(); ++i)
    if (!std::isfinite(decoded[i])) return i;
  return std::nullopt;
}

}  // namespace

TEST(TensorCheck, FloatTypesReportTheFirstNonFiniteElement) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    for (int trial = 0; trial < 40; ++trial) {
      const size_t n = 1 + rng() % 700;
      std::vector<float> values(n);
      for (float& x : values) x = normal(rng);
      // Finite extremes of each type stay finite.
      values[rng() % n] = dtype == DType::F16 ? 65504.0f : dtype == DType::BF16 ? 3.3e38f : std::numeric_limits<float>::max();
      values[rng() % n] = dtype == DType::F16 ? -6.0e-8f : std::numeric_limits<float>::denorm_min();
      const int bad = trial % 4;  // none, NaN, +inf, -inf (and a second one after the first)
      if (bad) {
        const size_t at = rng() % n;
        values[at] = bad == 1 ? nan : bad == 2 ? inf : -inf;
        values[std::min(n - 1, at + 1 + rng() % 5)] = nan;
      }
      const std::vector<std::byte> bytes = encode(dtype, values);
      const TensorView v = view_of("w", dtype, {int64_t(n)}, bytes);
      const auto got = first_non_finite(v);
      const auto want = reference_first(v);
      ASSERT_EQ(got.has_value(), want.has_value()) << dtype_name(dtype) << " trial " << trial;
      if (!got) continue;
      EXPECT_EQ(got->index, *want) << dtype_name(dtype);
      const float x = to_f32(v)[*want];
      EXPECT_EQ(got->value, std::isnan(x) ? "nan" : x > 0 ? "inf" : "-inf") << dtype_name(dtype);
      EXPECT_EQ(got->what, "element");
    }
  }
}

TEST(TensorCheck, Fp8CodesAreCheckedByTheirEncodings) {
  // E4M3 has no infinity: 0x7f and 0xff are NaN, 0x7e (448) is its largest finite value.
  std::vector<std::byte> codes(64, std::byte{0x7e});
  codes[3] = std::byte{0xfe};
  EXPECT_FALSE(first_non_finite(view_of("w", DType::F8_E4M3, {64}, codes)).has_value());
  codes[40] = std::byte{0xff};
  auto bad = first_non_finite(view_of("w", DType::F8_E4M3, {64}, codes));
  ASSERT_TRUE(bad.has_value());
  EXPECT_EQ(bad->index, 40u);
  EXPECT_EQ(bad->value, "nan");
  // E5M2: exponent 11111 with a zero mantissa is an infinity, else a NaN; 0x7b is finite.
  std::vector<std::byte> e5(8, std::byte{0x7b});
  EXPECT_FALSE(first_non_finite(view_of("w", DType::F8_E5M2, {8}, e5)).has_value());
  e5[6] = std::byte{0xfc};
  bad = first_non_finite(view_of("w", DType::F8_E5M2, {8}, e5));
  ASSERT_TRUE(bad.has_value());
  EXPECT_EQ(bad->index, 6u);
  EXPECT_EQ(bad->value, "-inf");
}

// A ggml block's scale fields, poked one at a time: the scan names the block holding the first
// value the library's dequantizer makes non-finite.
TEST(TensorCheck, QuantizedBlocksAreCheckedByTheirScales) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  struct Field {
    DType dtype;
    uint32_t offset;
    std::string what;
  };
  const Field fields[] = {
      {DType::Q4_0, 0, "block scale d"},  {DType::Q4_1, 2, "block minimum m"},
      {DType::Q5_0, 0, "block scale d"},  {DType::Q8_0, 0, "block scale d"},
      {DType::Q2_K, 80, "block scale d"}, {DType::Q2_K, 82, "block minimum scale dmin"},
      {DType::Q3_K, 108, "block scale d"}, {DType::Q4_K, 0, "block scale d"},
      {DType::Q4_K, 2, "block minimum scale dmin"}, {DType::Q5_K, 2, "block minimum scale dmin"},
      {DType::Q6_K, 208, "block scale d"}, {DType::IQ4_NL, 0, "block scale d"},
      {DType::IQ4_XS, 0, "block scale d"},
  };
  for (const Field& f : fields) {
    const uint32_t per_block = block_elements(f.dtype), blocks = 5;
    std::vector<float> values(size_t(per_block) * blocks);
    for (float& x : values) x = normal(rng);
    std::vector<std::byte> bytes;
    quantize(f.dtype, values, bytes);
    ASSERT_EQ(bytes.size(), size_t(block_bytes(f.dtype)) * blocks);
    const std::vector<int64_t> shape = {int64_t(values.size())};
    EXPECT_FALSE(first_non_finite(view_of("w", f.dtype, shape, bytes)).has_value()) << dtype_name(f.dtype);
    const uint16_t nan_half = 0x7e00;
    std::memcpy(bytes.data() + 3 * block_bytes(f.dtype) + f.offset, &nan_half, 2);
    const TensorView v = view_of("w", f.dtype, shape, bytes);
    const auto bad = first_non_finite(v);
    ASSERT_TRUE(bad.has_value()) << dtype_name(f.dtype) << " " << f.what;
    EXPECT_EQ(bad->index, 3u * per_block) << dtype_name(f.dtype);
    EXPECT_EQ(bad->what, f.what) << dtype_name(f.dtype);
    EXPECT_EQ(bad->value, "nan");
    std::vector<float> decoded(values.size());
    dequantize(f.dtype, bytes.data(), decoded);
    size_t first = 0;
    while (first < decoded.size() && std::isfinite(decoded[first])) ++first;
    EXPECT_EQ(first / per_block, 3u) << dtype_name(f.dtype) << " " << f.what;
  }
  // IQ1_M's d is the top nibbles of its four u16 scales (bytes 48..55): 0x7c00 is +inf.
  std::vector<std::byte> iq1m(2 * block_bytes(DType::IQ1_M), std::byte{0});
  const uint16_t sc2 = 0xc000, sc3 = 0x7000;
  std::memcpy(iq1m.data() + block_bytes(DType::IQ1_M) + 52, &sc2, 2);
  std::memcpy(iq1m.data() + block_bytes(DType::IQ1_M) + 54, &sc3, 2);
  auto bad = first_non_finite(view_of("w", DType::IQ1_M, {512}, iq1m));
  ASSERT_TRUE(bad.has_value());
  EXPECT_EQ(bad->index, 256u);
  EXPECT_EQ(bad->value, "inf");
  // MXFP4: the E8M0 exponent 0xff is NaN, 0xfe the largest finite scale.
  std::vector<std::byte> mx(3 * block_bytes(DType::MXFP4), std::byte{0});
  mx[0] = std::byte{0xfe};
  EXPECT_FALSE(first_non_finite(view_of("w", DType::MXFP4, {96}, mx)).has_value());
  mx[2 * block_bytes(DType::MXFP4)] = std::byte{0xff};
  bad = first_non_finite(view_of("w", DType::MXFP4, {96}, mx));
  ASSERT_TRUE(bad.has_value());
  EXPECT_EQ(bad->index, 64u);
  EXPECT_EQ(bad->what, "block exponent e");
}

TEST(TensorCheck, CheckpointIsRefusedNamingTensorElementAndFile) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("eaglevk_tensor_check_{}", ::getpid());
  fs::create_directories(dir);
  const std::vector<float> good = {1, 2, 3, 4};
  std::vector<float> bad = {0.5f, -1, 2, 3, 4, 5};
  bad[4] = std::numeric_limits<float>::quiet_NaN();
  const std::vector<std::byte> bad_bf16 = encode(DType::BF16, bad);
  const std::vector<int64_t> ids = {1, 2};
  const std::vector<TensorData> tensors = {
      {"a.weight", DType::F32, {2, 2}, std::as_bytes(std::span(good))},
      {"model.norm.weight", DType::BF16, {2, 3}, bad_bf16},
      {"ids", DType::I64, {2}, std::as_bytes(std::span(ids))},
  };
  write_safetensors(dir / "m.safetensors", tensors);
  const Checkpoint ckpt = Checkpoint::open(dir / "m.safetensors");
  expect_error([&] { check_tensors_finite(ckpt, "the model"); },
               "the model: element 4 of 'model.norm.weight' (BF16 [2, 3]) is nan (in " + (dir / "m.safetensors").string());
  const std::vector<TensorData> fine = {tensors[0], tensors[2]};
  write_safetensors(dir / "fine.safetensors", fine);
  check_tensors_finite(Checkpoint::open(dir / "fine.safetensors"), "fine");
  fs::remove_all(dir);
}

TEST(TensorCheck, DefaultScansCheckpointsUpTo256MiB) {
  EXPECT_EQ(kAutoTensorCheckBytes, uint64_t(256) << 20);
  EXPECT_TRUE(should_check_tensors(std::nullopt, 17 << 20));
  EXPECT_TRUE(should_check_tensors(std::nullopt, kAutoTensorCheckBytes));
  EXPECT_FALSE(should_check_tensors(std::nullopt, kAutoTensorCheckBytes + 1));
  EXPECT_TRUE(should_check_tensors(true, uint64_t(16) << 30));
  EXPECT_FALSE(should_check_tensors(false, 1));
}
