#include "support/fp8_checkpoint.h"

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

// The scale block of a recipe for an [R, C] matrix.
std::pair<int64_t, int64_t> scale_block(Fp8Recipe recipe, int64_t R, int64_t C) {
  switch (recipe) {
    case Fp8Recipe::FbgemmRows:
    case Fp8Recipe::ChannelBf16Static: return {1, C};
    case Fp8Recipe::TensorScale: return {R, C};
    case Fp8Recipe::Blocks128: return {128, 128};
    case Fp8Recipe::Bf16: break;
  }
  return {0, 0};
}

// Quantizes `w` into `fp8` under `name` and returns its decoded values (the reference's).
Matrix quantize(const std::string& name, const Matrix& w, Fp8Recipe recipe, Out& fp8) {
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
    if (recipe == Fp8Recipe::ChannelBf16Static) s = loader::bf16_to_f32(loader::f32_to_bf16(s));  // as stored
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
    case Fp8Recipe::FbgemmRows: fp8.add_f32(name + "_scale", {w.rows, 1}, scales); break;
    case Fp8Recipe::ChannelBf16Static:
      fp8.add_bf16(name + "_scale", {w.rows, 1}, scales);
      // A static W8A8 file's activation scale: eaglevk reads past it.
      fp8.add_f32(name.substr(0, name.size() - 6) + "input_scale", {1}, {0.0173f});
      break;
    case Fp8Recipe::TensorScale: fp8.add_f32(name + "_scale", {1}, scales); break;
    case Fp8Recipe::Blocks128: fp8.add_f32(name + "_scale_inv", {sr, sc}, scales); break;
    case Fp8Recipe::Bf16: break;
  }
  return decoded;
}

json quantization_config(Fp8Recipe recipe) {
  switch (recipe) {
    case Fp8Recipe::FbgemmRows:
      return {{"quant_method", "fbgemm_fp8"}, {"activation_scale_ub", 1200.0}, {"modules_to_not_convert", {"lm_head"}}};
    case Fp8Recipe::ChannelBf16Static:
    case Fp8Recipe::TensorScale: {
      const bool channel = recipe == Fp8Recipe::ChannelBf16Static;
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
    case Fp8Recipe::Blocks128:
      return {{"quant_method", "fp8"}, {"activation_scheme", "dynamic"}, {"fmt", "e4m3"},
              {"weight_block_size", {128, 128}}};
    case Fp8Recipe::Bf16: break;
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
Matrix emit(const std::string& name, const Matrix& w, Fp8Recipe recipe, Out& fp8) {
  if (recipe != Fp8Recipe::Bf16) return quantize(name, w, recipe, fp8);
  fp8.add_bf16(name, {w.rows, w.cols}, w.v);
  return w;
}

}  // namespace

void write_fp8_copy(const fs::path& from, const fs::path& fp8_dir, const fs::path& reference_dir, Fp8Recipe recipe,
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
  if (recipe != Fp8Recipe::Bf16) config["quantization_config"] = quantization_config(recipe);
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
    if (projection && recipe != Fp8Recipe::Bf16) {
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
