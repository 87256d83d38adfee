// FP8 checkpoints on the host (loader/fp8.h): E4M3 against its definition, the encoder against a
// brute-force nearest-value search, quantization_config parsing, and the pairing of weights with
// scales in every layout against a per-element reference written here.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "loader/fp8.h"
#include "loader/quant.h"
#include "loader/quantization_config.h"
#include "support/loader_test_util.h"
#include "support/quantize.h"

using namespace eaglevk::loader;
using eaglevk::testing::expect_error;
using eaglevk::testing::FakeCheckpoint;
using eaglevk::testing::quantize;
using nlohmann::json;

namespace {

// The OCP definition, computed in double: (-1)^s 2^(e-7) (1 + m/8), subnormal 2^-6 (m/8).
double e4m3_definition(unsigned code) {
  const unsigned e = (code >> 3) & 15, m = code & 7;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  const double v = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, int(e) - 7);
  return (code & 0x80) ? -v : v;
}

TEST(E4M3, EveryCodeAsDefined) {
  for (unsigned code = 0; code < 256; ++code) {
    const double want = e4m3_definition(code);
    const float got = e4m3_to_f32(uint8_t(code));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << code;
    } else {
      EXPECT_EQ(double(got), want) << code;
      EXPECT_EQ(std::signbit(got), (code & 0x80) != 0) << code;
    }
  }
  EXPECT_EQ(e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(e4m3_to_f32(0x7E), 448.0f);
  EXPECT_EQ(e4m3_to_f32(0xFE), -448.0f);
  EXPECT_EQ(e4m3_to_f32(0x08), 0.015625f);    // the smallest normal, 2^-6
  EXPECT_EQ(e4m3_to_f32(0x01), 0.001953125f); // the smallest subnormal, 2^-9
  EXPECT_EQ(e4m3_to_f32(0x07), 7 * 0.001953125f);
}

// The nearest finite E4M3 value to v by scanning all codes, ties to the even code (mantissa
// bit 0 clear); beyond 448 the largest one.
uint8_t nearest_by_scan(float v) {
  uint8_t best = 0;
  double best_error = INFINITY;
  for (unsigned code = 0; code < 128; ++code) {
    if (code == 0x7F) continue;
    const double error = std::fabs(std::fabs(double(v)) - e4m3_definition(code));
    if (error < best_error || (error == best_error && (code & 1) == 0)) {
      best = uint8_t(code);
      best_error = error;
    }
  }
  return uint8_t(best | (std::signbit(v) ? 0x80 : 0));
}

TEST(E4M3, EncoderRoundsToNearestEven) {
  for (unsigned code = 0; code < 256; ++code) {
    if ((code & 0x7F) != 0x7F) {
      EXPECT_EQ(f32_to_e4m3(e4m3_to_f32(uint8_t(code))), code) << code;
    }
  }
  // Midpoints between neighbours (ties), and one float either side of each.
  for (unsigned code = 0; code + 1 < 0x7F; ++code) {
    const float lo = e4m3_to_f32(uint8_t(code)), hi = e4m3_to_f32(uint8_t(code + 1));
    const float mid = float((double(lo) + double(hi)) / 2);
    ASSERT_EQ(double(mid), (double(lo) + double(hi)) / 2);  // exact in f32
    EXPECT_EQ(f32_to_e4m3(mid), (code & 1) ? code + 1 : code) << "tie above code " << code;
    EXPECT_EQ(f32_to_e4m3(std::nextafter(mid, 0.0f)), code);
    EXPECT_EQ(f32_to_e4m3(std::nextafter(mid, 1000.0f)), code + 1);
    EXPECT_EQ(f32_to_e4m3(-mid), 0x80 | ((code & 1) ? code + 1 : code));
  }
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> wide(-520.0f, 520.0f), exponent(-14.0f, 9.5f);
  for (int i = 0; i < 20000; ++i) {
    const float a = wide(rng), b = std::copysign(std::exp2(exponent(rng)), wide(rng));
    EXPECT_EQ(f32_to_e4m3(a), nearest_by_scan(a)) << a;
    EXPECT_EQ(f32_to_e4m3(b), nearest_by_scan(b)) << b;
  }
  EXPECT_EQ(f32_to_e4m3(1e30f), 0x7E);  // saturates
  EXPECT_EQ(f32_to_e4m3(-INFINITY), 0xFE);
  EXPECT_EQ(f32_to_e4m3(NAN), 0x7F);
  EXPECT_EQ(f32_to_e4m3(1e-30f), 0x00);
}

// ---- quantization_config ----------------------------------------------------------------------

json with_quant(json q) { return {{"architectures", {"LlamaForCausalLM"}}, {"quantization_config", std::move(q)}}; }

json compressed(json weights, std::string format = "float-quantized") {
  return {{"quant_method", "compressed-tensors"},
          {"format", format},
          {"config_groups", {{"group_0", {{"targets", {"Linear"}}, {"weights", std::move(weights)}}}}},
          {"ignore", {"lm_head"}}};
}

json fp8_weights(const char* strategy) { return {{"num_bits", 8}, {"type", "float"}, {"strategy", strategy}}; }

TEST(QuantizationConfig, NamesTheQuantSchemes) {
  EXPECT_FALSE(parse_quantization_config(json{{"hidden_size", 8}}, "c").has_value());
  EXPECT_EQ(parse_quantization_config(with_quant({{"quant_method", "fbgemm_fp8"}}), "c")->method, "fbgemm_fp8");
  auto fp8 = parse_quantization_config(with_quant({{"quant_method", "fp8"}, {"weight_block_size", {128, 64}}}), "c");
  EXPECT_EQ(fp8->method, "fp8");
  EXPECT_EQ(fp8->block_rows, 128);
  EXPECT_EQ(fp8->block_cols, 64);
  EXPECT_EQ(parse_quantization_config(with_quant({{"quant_method", "fp8"}}), "c")->block_rows, 0);
  EXPECT_EQ(parse_quantization_config(with_quant(compressed(fp8_weights("channel"))), "c")->method,
            "compressed-tensors");
  json block = fp8_weights("block");
  block["block_structure"] = {128, 128};
  EXPECT_EQ(parse_quantization_config(with_quant(compressed(block)), "c")->block_cols, 128);
  json group = fp8_weights("group");
  group["group_size"] = 128;
  EXPECT_EQ(parse_quantization_config(with_quant(compressed(group)), "c")->group_size, 128);
  EXPECT_EQ(parse_quantization_config(with_quant({{"quant_method", "modelopt"}, {"quant_algo", "FP8"}}), "c")->method,
            "modelopt");
  // 4-bit integers: GPTQ (its original format stores zero - 1), AWQ GEMM, compressed-tensors W4A16.
  auto gptq = parse_quantization_config(with_quant({{"quant_method", "gptq"}, {"bits", 4}, {"group_size", 128}, {"desc_act", false}}), "c");
  EXPECT_TRUE(gptq->int4);
  EXPECT_EQ(gptq->group_size, 128);
  EXPECT_EQ(gptq->zero_offset, 1);
  EXPECT_EQ(parse_quantization_config(with_quant({{"quant_method", "gptq"}, {"bits", 4}, {"checkpoint_format", "gptq_v2"}}), "c")
                ->zero_offset,
            0);
  EXPECT_EQ(parse_quantization_config(with_quant({{"quant_method", "gptq"}, {"bits", 4}, {"group_size", -1}}), "c")->group_size, 0);
  auto awq = parse_quantization_config(with_quant({{"quant_method", "awq"}, {"w_bit", 4}, {"q_group_size", 64}, {"version", "GEMM"}}), "c");
  EXPECT_TRUE(awq->int4);
  EXPECT_EQ(awq->group_size, 64);
  auto packed = parse_quantization_config(
      with_quant(compressed({{"num_bits", 4}, {"type", "int"}, {"strategy", "group"}, {"group_size", 32}}, "pack-quantized")), "c");
  EXPECT_TRUE(packed->int4);
  EXPECT_EQ(packed->group_size, 32);
  const json hf_quant = {{"producer", {{"name", "modelopt"}}}, {"quantization", {{"quant_algo", "FP8"}}}};
  EXPECT_EQ(parse_quantization_config(json{{"hidden_size", 8}}, "c", &hf_quant)->method, "modelopt");
}

TEST(QuantizationConfig, RefusesWhatItDoesNotRead) {
  auto refuse = [](const json& q, const std::string& word) {
    expect_error([&] { parse_quantization_config(with_quant(q), "cfg"); }, word);
  };
  refuse({{"quant_method", "gptq"}, {"bits", 8}}, "gptq with 8-bit weights is not supported");
  refuse({{"quant_method", "gptq"}, {"bits", 4}, {"checkpoint_format", "marlin"}}, "checkpoint_format 'marlin'");
  refuse({{"quant_method", "gptq"}, {"bits", 4}, {"group_size", 0}}, "is not a group size");
  refuse({{"quant_method", "awq"}}, "awq with 0-bit weights");
  refuse({{"quant_method", "awq"}, {"bits", 4}, {"version", "gemv"}}, "AWQ version 'gemv'");
  refuse({{"quant_method", "awq"}, {"bits", 4}, {"zero_point", false}}, "AWQ without zero points");
  refuse({{"quant_method", "bitsandbytes"}}, "'bitsandbytes'");
  refuse({{"quant_method", "mxfp4"}}, "'mxfp4'");
  refuse({{"bits", 4}}, "quant_method ''");
  refuse(compressed({{"num_bits", 4}, {"type", "int"}, {"strategy", "tensor"}}, "pack-quantized"),
         "4-bit integer weight strategy 'tensor'");
  refuse(compressed({{"num_bits", 4}, {"type", "int"}, {"strategy", "group"}}, "pack-quantized"), "without group_size");
  refuse(compressed({{"num_bits", 8}, {"type", "int"}, {"strategy", "channel"}}, "int-quantized"), "8-bit int");
  refuse(compressed({{"num_bits", 4}, {"type", "float"}, {"strategy", "tensor_group"}}, "nvfp4-pack-quantized"),
         "4-bit float");
  refuse(compressed(fp8_weights("block")), "without block_structure");
  refuse(compressed(fp8_weights("token")), "strategy 'token'");
  json sparse = compressed(fp8_weights("channel"));
  sparse["sparsity_config"] = {{"format", "sparse-24-bitmask"}};
  refuse(sparse, "sparse");
  json two = compressed(fp8_weights("channel"));
  json blocks = fp8_weights("block");
  blocks["block_structure"] = {128, 128};
  two["config_groups"]["group_1"] = {{"targets", {"Linear"}}, {"weights", blocks}};
  refuse(two, "different FP8 block sizes");
  json mixed = compressed(fp8_weights("channel"));
  mixed["config_groups"]["group_1"] = {{"targets", {"Linear"}},
                                       {"weights", {{"num_bits", 4}, {"type", "int"}, {"strategy", "channel"}}}};
  refuse(mixed, "different weight schemes");
  refuse({{"quant_method", "modelopt"}, {"quant_algo", "NVFP4"}}, "'NVFP4'");
  refuse({{"quant_method", "fp8"}, {"fmt", "e5m2"}}, "'e5m2'");
  refuse({{"quant_method", "fp8"}, {"weight_block_size", {128}}}, "expected [rows, cols]");
  refuse({{"quant_method", "fp8"}, {"weight_block_size", {0, 128}}}, "not a positive block size");
  refuse(json::array({1}), "not an object");
}

// ---- weights and scales -----------------------------------------------------------------------


// Random finite codes for an [R, C] weight.
std::vector<uint8_t> random_codes(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> c(size_t(n), 0);
  for (auto& x : c) {
    x = uint8_t(rng());
    if ((x & 0x7F) == 0x7F) x ^= 1;
  }
  return c;
}

std::vector<float> random_scales(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.001f, 0.01f);
  std::vector<float> s(n);
  for (auto& x : s) x = u(rng);
  return s;
}

struct LayoutCase {
  const char* label;
  std::optional<QuantScheme> scheme;
  int64_t R, C;
  std::vector<int64_t> scale_shape;
  DType scale_dtype;
  int64_t br, bc;  // the block the test expects the layout to take
  const char* suffix = "_scale";
};

// Every weight element e4m3(code) * scale[r / br][c / bc], by rows_to_blocks then dequantize,
// against the definition applied here element by element.
TEST(Fp8Weights, EveryLayoutDecodesAsItsDefinition) {
  const QuantScheme fbgemm{"fbgemm_fp8"}, ct{"compressed-tensors"}, fp8{"fp8"};
  QuantScheme group{"compressed-tensors"}, block{"compressed-tensors"};
  group.group_size = 64;
  block.block_rows = 16, block.block_cols = 64;
  const LayoutCase cases[] = {
      {"per tensor [1]", ct, 24, 96, {1}, DType::F32, 24, 96},
      {"per tensor []", QuantScheme{"modelopt"}, 24, 96, {}, DType::F32, 24, 96},
      {"per row [R, 1] bf16", ct, 24, 96, {24, 1}, DType::BF16, 1, 96},
      {"per row [R] f16", fbgemm, 24, 96, {24}, DType::F16, 1, 96},
      {"per row [R, 1] f32", fbgemm, 24, 96, {24, 1}, DType::F32, 1, 96},
      {"groups of 64", group, 24, 192, {24, 3}, DType::F32, 1, 64},
      {"blocks 16 x 64, partial", block, 40, 96, {3, 2}, DType::F32, 16, 64},
      {"fp8 default 128 x 128, partial", fp8, 200, 160, {2, 2}, DType::F32, 128, 128, "_scale_inv"},
  };
  uint32_t seed = 1;
  for (const LayoutCase& c : cases) {
    SCOPED_TRACE(c.label);
    FakeCheckpoint f;
    const std::vector<uint8_t> codes = random_codes(c.R * c.C, seed++);
    f.add("w.weight", DType::F8_E4M3, {c.R, c.C}, codes);
    size_t n = 1;
    for (int64_t d : c.scale_shape) n *= size_t(d);
    std::vector<float> scales = random_scales(n, seed++);
    if (c.scale_dtype == DType::F32) {
      f.add(std::string("w.weight") + c.suffix, DType::F32, c.scale_shape, scales);
    } else {
      std::vector<uint16_t> half(n);
      for (size_t i = 0; i < n; ++i) {
        half[i] = c.scale_dtype == DType::BF16 ? f32_to_bf16(scales[i]) : f32_to_f16(scales[i]);
        scales[i] = c.scale_dtype == DType::BF16 ? bf16_to_f32(half[i]) : f16_to_f32(half[i]);
      }
      f.add(std::string("w.weight") + c.suffix, c.scale_dtype, c.scale_shape, half);
    }
    std::vector<std::string> notes;
    attach_fp8_scales(f.ckpt, c.scheme, "config.json", notes);
    ASSERT_EQ(f.ckpt.size(), 1u);  // the scale left the tensor list
    const TensorView& w = f.ckpt.get("w.weight");
    ASSERT_TRUE(w.scale.has_value());
    EXPECT_EQ(w.scale->block_rows, c.br);
    EXPECT_EQ(w.scale->block_cols, c.bc);
    EXPECT_EQ(fp8_block_bytes(w), uint64_t(c.R * c.C / 32 * 36));

    std::vector<std::byte> blocks{std::byte{0x5a}};  // appends: keep a byte in front
    fp8_rows_to_blocks(w, 0, c.R, blocks);
    ASSERT_EQ(blocks.size(), 1 + fp8_block_bytes(w));
    std::vector<float> got(size_t(c.R * c.C));
    dequantize(DType::FP8_B32, blocks.data() + 1, got);
    const int64_t scale_cols = (c.C + c.bc - 1) / c.bc;
    for (int64_t r = 0; r < c.R; ++r)
      for (int64_t col = 0; col < c.C; ++col) {
        const size_t i = size_t(r * c.C + col);
        const float want = float(e4m3_definition(codes[i])) * scales[size_t((r / c.br) * scale_cols + col / c.bc)];
        ASSERT_EQ(got[i], want) << "row " << r << " col " << col;
      }
    // A run of rows gives the same blocks as the whole.
    std::vector<std::byte> part;
    fp8_rows_to_blocks(w, c.R / 2, 3, part);
    const size_t row_bytes = size_t(c.C / 32 * 36);
    EXPECT_TRUE(std::equal(part.begin(), part.end(), blocks.begin() + 1 + (c.R / 2) * row_bytes));
  }
}

TEST(Fp8Weights, ActivationScalesAreReadPastWithANote) {
  FakeCheckpoint f;
  f.add("l.q_proj.weight", DType::F8_E4M3, {4, 32}, random_codes(128, 3));
  f.add("l.q_proj.weight_scale", DType::F32, {1}, std::vector<float>{0.5f});
  f.add("l.q_proj.input_scale", DType::F32, {1}, std::vector<float>{0.1f});
  f.add("l.self_attn.k_scale", DType::F32, {}, std::vector<float>{0.1f});
  f.add("l.self_attn.v_scale", DType::F32, {}, std::vector<float>{0.1f});
  f.add("norm.weight", DType::BF16, {4}, std::vector<uint16_t>(4, 0x3f80));
  std::vector<std::string> notes;
  attach_fp8_scales(f.ckpt, QuantScheme{"compressed-tensors"}, "config.json", notes);
  EXPECT_EQ(f.ckpt.names(), (std::vector<std::string>{"l.q_proj.weight", "norm.weight"}));
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("3 activation/KV-cache scales not used"), std::string::npos) << notes[0];
}

TEST(Fp8Weights, BrokenFilesAreErrors) {
  const QuantScheme ct{"compressed-tensors"};
  auto attach = [](FakeCheckpoint& f, std::optional<QuantScheme> s) {
    std::vector<std::string> notes;
    attach_fp8_scales(f.ckpt, s, "config.json", notes);
  };
  auto weight = [](FakeCheckpoint& f, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    f.add("w.weight", DType::F8_E4M3, shape, random_codes(n, 5));
  };
  {
    FakeCheckpoint f;
    weight(f, {4, 32});
    expect_error([&] { attach(f, ct); }, "has no scale");
  }
  {
    FakeCheckpoint f;
    weight(f, {4, 32});
    f.add("w.weight_scale", DType::F32, {1}, std::vector<float>{1});
    f.add("w.weight_scale_inv", DType::F32, {1}, std::vector<float>{1});
    expect_error([&] { attach(f, ct); }, "both");
  }
  {
    FakeCheckpoint f;
    weight(f, {4, 32});
    f.add("w.weight_scale", DType::F32, {2, 1}, std::vector<float>{1, 1});
    expect_error([&] { attach(f, ct); }, "fits none of the layouts");
  }
  {
    FakeCheckpoint f;
    weight(f, {4, 32});
    f.add("w.weight_scale", DType::I32, {1}, std::vector<int32_t>{1});
    expect_error([&] { attach(f, ct); }, "must be F32, BF16 or F16");
  }
  {
    FakeCheckpoint f;
    weight(f, {2, 4, 32});
    f.add("w.weight_scale", DType::F32, {1}, std::vector<float>{1});
    expect_error([&] { attach(f, ct); }, "2-D FP8 weights");
  }
  {
    FakeCheckpoint f;
    weight(f, {4, 32});
    f.add("w.weight_scale", DType::F32, {1}, std::vector<float>{1});
    expect_error([&] { attach(f, std::nullopt); }, "no quantization_config");
  }
  {
    FakeCheckpoint f;
    f.add("w.weight", DType::BF16, {1, 2}, std::vector<uint16_t>{0, 0});
    expect_error([&] { attach(f, ct); }, "no tensor is FP8");
  }
  {
    FakeCheckpoint f;
    weight(f, {4, 32});
    f.add("w.weight_scale", DType::F32, {1}, std::vector<float>{1});
    f.add("other.weight_scale", DType::F32, {1}, std::vector<float>{1});
    expect_error([&] { attach(f, ct); }, "scales no FP8 weight");
  }
  {
    FakeCheckpoint f;
    weight(f, {4, 48});
    f.add("w.weight_scale", DType::F32, {4, 1}, std::vector<float>(4, 1));
    expect_error([&] { attach(f, ct); }, "blocks of 32");
  }
  {
    QuantScheme group{"compressed-tensors"};
    group.group_size = 16;
    FakeCheckpoint f;
    weight(f, {4, 64});
    f.add("w.weight_scale", DType::F32, {4, 4}, std::vector<float>(16, 1));
    expect_error([&] { attach(f, group); }, "multiples of 32");
  }
  {
    FakeCheckpoint f;
    std::vector<uint8_t> codes = random_codes(4 * 32, 9);
    codes[2 * 32 + 7] = 0xFF;  // NaN
    f.add("w.weight", DType::F8_E4M3, {4, 32}, codes);
    f.add("w.weight_scale", DType::F32, {1}, std::vector<float>{1});
    attach(f, ct);
    std::vector<std::byte> out;
    expect_error([&] { fp8_rows_to_blocks(f.ckpt.get("w.weight"), 0, 4, out); }, "NaN code in row 2, column 7");
    EXPECT_NO_THROW(fp8_rows_to_blocks(f.ckpt.get("w.weight"), 0, 2, out));
  }
  {
    FakeCheckpoint f;
    weight(f, {4, 32});
    f.add("w.weight_scale", DType::F32, {4, 1}, std::vector<float>{1, 1, INFINITY, 1});
    attach(f, ct);
    std::vector<std::byte> out;
    expect_error([&] { fp8_rows_to_blocks(f.ckpt.get("w.weight"), 0, 4, out); }, "scale of row 2 is inf");
  }
}

// The block quantizer (test data shaped like the checkpoints): each element within half a step
// of E4M3 at its block's scale, and a decoder that ignores the scale fails that bound.
TEST(Fp8Weights, BlockQuantizerRoundTrip) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(13 * 96);
  for (size_t i = 0; i < x.size(); ++i) x[i] = normal(rng) * std::pow(10.0f, float(int(i / 96 % 5) - 2));
  std::vector<std::byte> q;
  quantize(DType::FP8_B32, x, q);
  ASSERT_EQ(q.size(), x.size() / 32 * 36);
  std::vector<float> y(x.size());
  dequantize(DType::FP8_B32, q.data(), y);
  for (size_t b = 0; b < x.size() / 32; ++b) {
    float d;
    std::memcpy(&d, q.data() + b * 36, 4);
    for (size_t j = 0; j < 32; ++j) {
      const size_t i = b * 32 + j;
      // Half a step: 2^-4 of the value for normals, 2^-10 of the scale for subnormals.
      EXPECT_LE(std::fabs(x[i] - y[i]), std::fabs(x[i]) / 16 + d / 1024) << i;
    }
  }
  int beyond = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const float unscaled = e4m3_to_f32(uint8_t(q[i / 32 * 36 + 4 + i % 32]));
    beyond += std::fabs(x[i] - unscaled) > std::fabs(x[i]) / 16 + 1e-3f;
  }
  EXPECT_GT(beyond, int(x.size()) / 2);
}

}  // namespace
