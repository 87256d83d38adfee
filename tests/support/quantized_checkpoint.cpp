#include "support/quantized_checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "loader/fp8.h"
#include "loader/safetensors.h"

namespace eaglevk::testing {
namespace fs = std::filesystem;
using nlohmann::json;

float e4m3_reference_value(unsigned code) {
  const unsigned e = (code >> 3) & 15, m = code & 7;
  const double magnitude = e == 0 ? m / 8.0 * std::pow(2.0, -6) : (1 + m / 8.0) * std::pow(2.0, int(e) - 7);
  return float((code & 0x80) ? -magnitude : magnitude);
}

namespace {

struct Matrix {
  int64_t rows = 0, cols = 0;
  std::vector<float> v;  // row-major
};

// The bytes the two output checkpoints hold, kept alive until they are written.
struct Out {
  std::deque<std::vector<std::byte>> storage;
  std::vector<loader::TensorData> tensors;
  void add(const std::string& name, loader::DType dtype, std::vector<int64_t> shape, std::vector<std::byte> bytes) {
    storage.push_back(std::move(bytes));
    tensors.push_back({name, dtype, std::move(shape), storage.back()});
  }
  void add_f32(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v) {
    std::vector<std::byte> b(v.size() * 4);
    std::memcpy(b.data(), v.data(), b.size());
    add(name, loader::DType::F32, std::move(shape), std::move(b));
  }
  void add_bf16(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v) {
    std::vector<std::byte> b(v.size() * 2);
    for (size_t i = 0; i < v.size(); ++i) {
      const uint16_t bits = loader::f32_to_bf16(v[i]);
      std::memcpy(b.data() + 2 * i, &bits, 2);
    }
    add(name, loader::DType::BF16, std::move(shape), std::move(b));
  }
};

bool int4_recipe(QuantRecipe r) {
  return r == QuantRecipe::GptqSym64 || r == QuantRecipe::AwqGemm128 || r == QuantRecipe::PackedAsym128 ||
         r == QuantRecipe::PackedSymChannel;
}

// AWQ's GEMM packing: output 8 w + j of a word in nibble kAwqNibble[j] (AutoAWQ's order 0 2 4 6 1 3 5 7).
constexpr int kAwqNibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};

void set_nibble(std::vector<uint32_t>& words, int64_t word, int nibble, uint32_t value) {
  words[size_t(word)] |= (value & 15u) << (4 * nibble);
}

std::vector<std::byte> bytes_of(const std::vector<uint32_t>& words) {
  std::vector<std::byte> b(words.size() * 4);
  std::memcpy(b.data(), words.data(), b.size());
  return b;
}

void add_f16(Out& out, const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v) {
  std::vector<std::byte> b(v.size() * 2);
  for (size_t i = 0; i < v.size(); ++i) {
    const uint16_t bits = loader::f32_to_f16(v[i]);
    std::memcpy(b.data() + 2 * i, &bits, 2);
  }
  out.add(name, loader::DType::F16, std::move(shape), std::move(b));
}

// 4-bit round to nearest per group of inputs of each row; returns the decoded values,
// (q - zero) * scale, computed in double from what the files store.
Matrix quantize_int4(const std::string& name, const Matrix& w, QuantRecipe recipe, Out& out) {
  const int64_t R = w.rows, C = w.cols;
  const bool sym = recipe == QuantRecipe::GptqSym64 || recipe == QuantRecipe::PackedSymChannel;
  const int64_t group = recipe == QuantRecipe::GptqSym64 ? 64 : recipe == QuantRecipe::PackedSymChannel ? C : 128;
  const int64_t G = (C + group - 1) / group;
  const bool bf16_scales = recipe == QuantRecipe::PackedAsym128 || recipe == QuantRecipe::PackedSymChannel;
  std::vector<float> scales(size_t(R * G));  // [R][G]
  std::vector<int> zeros(size_t(R * G)), codes(size_t(R * C));
  Matrix decoded{R, C, std::vector<float>(w.v.size())};
  for (int64_t r = 0; r < R; ++r)
    for (int64_t g = 0; g < G; ++g) {
      float lo = 0, hi = 0;
      for (int64_t c = g * group; c < std::min(C, (g + 1) * group); ++c)
        lo = std::min(lo, w.v[size_t(r * C + c)]), hi = std::max(hi, w.v[size_t(r * C + c)]);
      float s = sym ? 2 * std::max(-lo, hi) / 15 : (hi - lo) / 15;
      s = bf16_scales ? loader::bf16_to_f32(loader::f32_to_bf16(s)) : loader::f16_to_f32(loader::f32_to_f16(s));
      if (s == 0) s = 1;
      const int z = sym ? 8 : std::clamp(int(std::nearbyint(-lo / s)), 0, 15);
      scales[size_t(r * G + g)] = s;
      zeros[size_t(r * G + g)] = z;
      for (int64_t c = g * group; c < std::min(C, (g + 1) * group); ++c) {
        const size_t i = size_t(r * C + c);
        const int q = std::clamp(int(std::nearbyint(w.v[i] / s)) + z, 0, 15);
        codes[i] = q;
        decoded.v[i] = float(double(q - z) * double(s));
      }
    }
  const std::string base = name.substr(0, name.size() - std::string(".weight").size());
  std::vector<float> scales_t(size_t(G * R));  // [G][R]: GPTQ's and AWQ's order
  for (int64_t r = 0; r < R; ++r)
    for (int64_t g = 0; g < G; ++g) scales_t[size_t(g * R + r)] = scales[size_t(r * G + g)];
  if (recipe == QuantRecipe::GptqSym64 || recipe == QuantRecipe::AwqGemm128) {
    const bool gptq = recipe == QuantRecipe::GptqSym64;
    std::vector<uint32_t> qweight(size_t(R * C / 8), 0), qzeros(size_t(G * R / 8), 0);
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < C; ++c) {
        const uint32_t q = uint32_t(codes[size_t(r * C + c)]);
        if (gptq)
          set_nibble(qweight, (c / 8) * R + r, int(c % 8), q);
        else
          set_nibble(qweight, c * (R / 8) + r / 8, kAwqNibble[r % 8], q);
      }
    for (int64_t g = 0; g < G; ++g)
      for (int64_t r = 0; r < R; ++r) {
        const int z = zeros[size_t(r * G + g)];
        if (gptq)
          set_nibble(qzeros, g * (R / 8) + r / 8, int(r % 8), uint32_t(z - 1));  // the original format's zero - 1
        else
          set_nibble(qzeros, g * (R / 8) + r / 8, kAwqNibble[r % 8], uint32_t(z));
      }
    out.add(base + ".qweight", loader::DType::I32, gptq ? std::vector<int64_t>{C / 8, R} : std::vector<int64_t>{C, R / 8},
            bytes_of(qweight));
    out.add(base + ".qzeros", loader::DType::I32, {G, R / 8}, bytes_of(qzeros));
    add_f16(out, base + ".scales", {G, R}, scales_t);
    if (gptq) {
      std::vector<int32_t> g_idx(static_cast<size_t>(C));
      for (int64_t c = 0; c < C; ++c) g_idx[size_t(c)] = int32_t(c / group);
      std::vector<std::byte> b(g_idx.size() * 4);
      std::memcpy(b.data(), g_idx.data(), b.size());
      out.add(base + ".g_idx", loader::DType::I32, {C}, std::move(b));
      if (name.find("q_proj") != std::string::npos) add_f16(out, base + ".bias", {R}, std::vector<float>(size_t(R), 0.0f));
    }
  } else {
    std::vector<uint32_t> packed(size_t(R * C / 8), 0), zp(size_t((R + 7) / 8 * G), 0);
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < C; ++c) set_nibble(packed, r * (C / 8) + c / 8, int(c % 8), uint32_t(codes[size_t(r * C + c)]));
    out.add(base + ".weight_packed", loader::DType::I32, {R, C / 8}, bytes_of(packed));
    out.add_bf16(base + ".weight_scale", {R, G}, scales);
    const std::vector<int64_t> shape = {R, C};
    std::vector<std::byte> sb(16);
    std::memcpy(sb.data(), shape.data(), 16);
    out.add(base + ".weight_shape", loader::DType::I64, {2}, std::move(sb));
    if (!sym) {
      for (int64_t r = 0; r < R; ++r)
        for (int64_t g = 0; g < G; ++g) set_nibble(zp, (r / 8) * G + g, int(r % 8), uint32_t(zeros[size_t(r * G + g)]));
      out.add(base + ".weight_zero_point", loader::DType::I32, {(R + 7) / 8, G}, bytes_of(zp));
    }
  }
  return decoded;
}

// The scale block of a recipe for an [R, C] matrix.
std::pair<int64_t, int64_t> scale_block(QuantRecipe recipe, int64_t R, int64_t C) {
  switch (recipe) {
    case QuantRecipe::FbgemmRows:
    case QuantRecipe::ChannelBf16Static: return {1, C};
    case QuantRecipe::TensorScale: return {R, C};
    case QuantRecipe::Blocks128: return {128, 128};
    default: break;
  }
  return {0, 0};
}

// Quantizes `w` into `fp8` under `name` and returns its decoded values (the reference's).
Matrix quantize(const std::string& name, const Matrix& w, QuantRecipe recipe, Out& fp8) {
  if (int4_recipe(recipe)) return quantize_int4(name, w, recipe, fp8);
  const auto [br, bc] = scale_block(recipe, w.rows, w.cols);
  const int64_t sr = (w.rows + br - 1) / br, sc = (w.cols + bc - 1) / bc;
  std::vector<float> scales(size_t(sr * sc), 0.0f);
  for (int64_t r = 0; r < w.rows; ++r)
    for (int64_t c = 0; c < w.cols; ++c) {
      float& s = scales[size_t((r / br) * sc + c / bc)];
      s = std::max(s, std::fabs(w.v[size_t(r * w.cols + c)]));
    }
  for (float& s : scales) {
    s = s > 0 ? s / loader::kE4M3Max : 1.0f;
    if (recipe == QuantRecipe::ChannelBf16Static) s = loader::bf16_to_f32(loader::f32_to_bf16(s));  // as stored
  }
  std::vector<std::byte> codes(size_t(w.rows * w.cols));
  Matrix decoded{w.rows, w.cols, std::vector<float>(w.v.size())};
  for (int64_t r = 0; r < w.rows; ++r)
    for (int64_t c = 0; c < w.cols; ++c) {
      const size_t i = size_t(r * w.cols + c);
      const float s = scales[size_t((r / br) * sc + c / bc)];
      const uint8_t code = loader::f32_to_e4m3(w.v[i] / s);
      codes[i] = std::byte(code);
      decoded.v[i] = e4m3_reference_value(code) * s;
    }
  fp8.add(name, loader::DType::F8_E4M3, {w.rows, w.cols}, std::move(codes));
  switch (recipe) {
    case QuantRecipe::FbgemmRows: fp8.add_f32(name + "_scale", {w.rows, 1}, scales); break;
    case QuantRecipe::ChannelBf16Static:
      fp8.add_bf16(name + "_scale", {w.rows, 1}, scales);
      // A static W8A8 file's activation scale: eaglevk reads past it.
      fp8.add_f32(name.substr(0, name.size() - 6) + "input_scale", {1}, {0.0173f});
      break;
    case QuantRecipe::TensorScale: fp8.add_f32(name + "_scale", {1}, scales); break;
    case QuantRecipe::Blocks128: fp8.add_f32(name + "_scale_inv", {sr, sc}, scales); break;
    default: break;
  }
  return decoded;
}

json quantization_config(QuantRecipe recipe) {
  switch (recipe) {
    case QuantRecipe::FbgemmRows:
      return {{"quant_method", "fbgemm_fp8"}, {"activation_scale_ub", 1200.0}, {"modules_to_not_convert", {"lm_head"}}};
    case QuantRecipe::ChannelBf16Static:
    case QuantRecipe::TensorScale: {
      const bool channel = recipe == QuantRecipe::ChannelBf16Static;
      json weights = {{"num_bits", 8}, {"type", "float"}, {"symmetric", true}, {"dynamic", false},
                      {"strategy", channel ? "channel" : "tensor"}, {"group_size", nullptr}, {"observer", "minmax"}};
      json inputs = {{"num_bits", 8}, {"type", "float"}, {"symmetric", true}, {"dynamic", !channel},
                     {"strategy", channel ? "tensor" : "token"}};
      return {{"quant_method", "compressed-tensors"},
              {"format", "float-quantized"},
              {"quantization_status", "compressed"},
              {"config_groups", {{"group_0", {{"targets", {"Linear"}}, {"weights", weights}, {"input_activations", inputs}}}}},
              {"ignore", {"lm_head", "re:.*router$"}},
              {"kv_cache_scheme", nullptr}};
    }
    case QuantRecipe::Blocks128:
      return {{"quant_method", "fp8"}, {"activation_scheme", "dynamic"}, {"fmt", "e4m3"},
              {"weight_block_size", {128, 128}}};
    case QuantRecipe::GptqSym64:
      return {{"quant_method", "gptq"}, {"bits", 4}, {"group_size", 64}, {"desc_act", false}, {"sym", true},
              {"checkpoint_format", "gptq"}, {"damp_percent", 0.01}};
    case QuantRecipe::AwqGemm128:
      return {{"quant_method", "awq"}, {"bits", 4}, {"group_size", 128}, {"version", "gemm"}, {"zero_point", true}};
    case QuantRecipe::PackedAsym128:
    case QuantRecipe::PackedSymChannel: {
      const bool sym = recipe == QuantRecipe::PackedSymChannel;
      json weights = {{"num_bits", 4}, {"type", "int"}, {"symmetric", sym}, {"dynamic", false},
                      {"strategy", sym ? "channel" : "group"}, {"group_size", sym ? json(nullptr) : json(128)}};
      return {{"quant_method", "compressed-tensors"},
              {"format", "pack-quantized"},
              {"quantization_status", "compressed"},
              {"config_groups", {{"group_0", {{"targets", {"Linear"}}, {"weights", weights}}}}},
              {"ignore", {"lm_head"}}};
    }
    case QuantRecipe::Bf16: break;
  }
  return nullptr;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

Matrix rows_of(const loader::TensorView& t) {
  return {t.shape[0], t.shape[1], loader::to_f32(t)};
}

// Expert e's [out, in] matrix from a fused k-major [E, in, out_total] tensor, columns [c0, c0 + out).
Matrix expert_matrix(const std::vector<float>& fused, int64_t e, int64_t in, int64_t out_total, int64_t c0,
                     int64_t out) {
  Matrix m{out, in, std::vector<float>(size_t(out * in))};
  for (int64_t o = 0; o < out; ++o)
    for (int64_t k = 0; k < in; ++k) m.v[size_t(o * in + k)] = fused[size_t((e * in + k) * out_total + c0 + o)];
  return m;
}

void put_expert_matrix(std::vector<float>& fused, const Matrix& m, int64_t e, int64_t out_total, int64_t c0) {
  for (int64_t o = 0; o < m.rows; ++o)
    for (int64_t k = 0; k < m.cols; ++k) fused[size_t((e * m.cols + k) * out_total + c0 + o)] = m.v[size_t(o * m.cols + k)];
}

// Quantizes (or, for Bf16, keeps) one matrix into `fp8`; returns the values the reference holds.
Matrix emit(const std::string& name, const Matrix& w, QuantRecipe recipe, Out& fp8) {
  if (recipe != QuantRecipe::Bf16) return quantize(name, w, recipe, fp8);
  fp8.add_bf16(name, {w.rows, w.cols}, w.v);
  return w;
}

}  // namespace

void write_quantized_copy(const fs::path& from, const fs::path& fp8_dir, const fs::path& reference_dir, QuantRecipe recipe,
                    bool split_experts) {
  for (const fs::path& d : {fp8_dir, reference_dir}) {
    fs::create_directories(d);
    for (const auto& entry : fs::directory_iterator(from)) {
      const std::string name = entry.path().filename().string();
      if (name.find(".safetensors") == std::string::npos && name != "config.json")
        fs::copy_file(entry.path(), d / name, fs::copy_options::overwrite_existing);
    }
  }
  json config = json::parse(std::ifstream(from / "config.json"));
  std::ofstream(reference_dir / "config.json") << config.dump(2);
  if (recipe != QuantRecipe::Bf16) config["quantization_config"] = quantization_config(recipe);
  std::ofstream(fp8_dir / "config.json") << config.dump(2);

  const loader::Checkpoint src = loader::Checkpoint::open(from);
  Out fp8, ref;
  for (const auto& [name, t] : src.tensors) {
    const bool fused_gate_up = ends_with(name, "feed_forward.experts.gate_up_proj");
    const bool fused_down = ends_with(name, "feed_forward.experts.down_proj");
    if (fused_gate_up || fused_down) {
      const int64_t E = t.shape[0], in = t.shape[1], out_total = t.shape[2];
      std::vector<float> fused = loader::to_f32(t), decoded(fused.size());
      if (!split_experts) {  // the fused layout stays (bf16 only: FP8 experts come split)
        fp8.add(name, t.dtype, t.shape, std::vector<std::byte>(t.data, t.data + t.bytes));
        ref.add(name, t.dtype, t.shape, std::vector<std::byte>(t.data, t.data + t.bytes));
        continue;
      }
      const std::string prefix = name.substr(0, name.size() - std::string(fused_down ? "down_proj" : "gate_up_proj").size());
      for (int64_t e = 0; e < E; ++e) {
        if (fused_down) {
          put_expert_matrix(decoded, emit(fmt::format("{}{}.down_proj.weight", prefix, e),
                                          expert_matrix(fused, e, in, out_total, 0, out_total), recipe, fp8),
                            e, out_total, 0);
        } else {
          const int64_t I = out_total / 2;
          put_expert_matrix(decoded, emit(fmt::format("{}{}.gate_proj.weight", prefix, e),
                                          expert_matrix(fused, e, in, out_total, 0, I), recipe, fp8),
                            e, out_total, 0);
          put_expert_matrix(decoded, emit(fmt::format("{}{}.up_proj.weight", prefix, e),
                                          expert_matrix(fused, e, in, out_total, I, I), recipe, fp8),
                            e, out_total, I);
        }
      }
      ref.add_f32(name, t.shape, decoded);
      continue;
    }
    const bool projection = t.shape.size() == 2 && name.find(".layers.") != std::string::npos &&
                            ends_with(name, "_proj.weight") && name.find("vision") == std::string::npos;
    if (projection && recipe != QuantRecipe::Bf16) {
      ref.add_f32(name, t.shape, quantize(name, rows_of(t), recipe, fp8).v);
      continue;
    }
    fp8.add(name, t.dtype, t.shape, std::vector<std::byte>(t.data, t.data + t.bytes));
    ref.add(name, t.dtype, t.shape, std::vector<std::byte>(t.data, t.data + t.bytes));
  }
  loader::write_safetensors(fp8_dir / "model.safetensors", fp8.tensors);
  loader::write_safetensors(reference_dir / "model.safetensors", ref.tensors);
}

}  // namespace eaglevk::testing
