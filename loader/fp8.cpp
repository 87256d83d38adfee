#include "loader/fp8.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <eaglevk/error.h>

#include "loader/hf_config.h"
#include "loader/json_excerpt.h"

namespace eaglevk::loader {
namespace jf = json_field;
using nlohmann::json;

float e4m3_to_f32(uint8_t code) {
  const int e = (code >> 3) & 15, m = code & 7;
  if (e == 15 && m == 7) return std::nanf("");
  // Exponent 0 is subnormal: m * 2^-9; otherwise (8 + m) * 2^(e - 10). Both exact in f32.
  const float magnitude = e == 0 ? std::ldexp(float(m), -9) : std::ldexp(float(8 + m), e - 10);
  return (code & 0x80) ? -magnitude : magnitude;
}

uint8_t f32_to_e4m3(float value) {
  const uint8_t sign = std::signbit(value) ? 0x80 : 0;
  if (std::isnan(value)) return 0x7F;
  const float a = std::min(std::fabs(value), kE4M3Max);
  // The spacing of representable values at a's binade: 2^-9 below 2^-6 (subnormals), else
  // 2^(floor(log2 a) - 3). a / spacing rounded to nearest even is then the code's integer
  // significand, exact because the division is by a power of two.
  int exp2 = 0;
  std::frexp(a, &exp2);  // a = f * 2^exp2, f in [0.5, 1)
  const int step = std::max(exp2 - 1, -6) - 3;
  const float q = std::nearbyint(std::ldexp(a, -step));  // default rounding: nearest even
  if (q == 0) return sign;
  // q in [8, 16] for normals (16: rounded up into the next binade), [1, 8] for subnormals.
  int e = step + 10, m = int(q);
  if (m >= 16) { m /= 2; ++e; }
  if (m < 8) return uint8_t(sign | m);  // subnormal (e would be 0); m == 8 is the smallest normal below
  return uint8_t(sign | (e << 3) | (m - 8));
}

namespace {

// The ones whose tensors eaglevk knows: everything else gets a message naming the method.
std::string unsupported(const std::string& source, const std::string& what) {
  return fmt::format(
      "{}: {} is not supported: eaglevk reads FP8 checkpoints (fbgemm_fp8, fp8, compressed-tensors with 8-bit "
      "float weights, modelopt FP8), 4-bit GPTQ, AWQ (GEMM) and compressed-tensors W4A16 ones, unquantized ones "
      "and GGUF files (llama.cpp's convert_hf_to_gguf.py converts this checkpoint)",
      source, what);
}

int64_t block_dim(const json& v, const std::string& source, const char* field) {
  if (!v.is_number_integer() || v.get<int64_t>() <= 0 || v.get<int64_t>() > (int64_t(1) << 30))
    fail("{}: {} holds {}, not a positive block size", source, field, json_excerpt(v));
  return v.get<int64_t>();
}

void read_block_pair(const json& v, const std::string& source, const char* field, QuantScheme& s) {
  if (!v.is_array() || v.size() != 2) fail("{}: {} is {}, expected [rows, cols]", source, field, json_excerpt(v));
  s.block_rows = block_dim(v[0], source, field);
  s.block_cols = block_dim(v[1], source, field);
}

// W4A16 groups of compressed-tensors (pack-quantized): 4-bit integers, per group or channel.
bool int4_weights(const json& w, const std::string& where, QuantScheme& g) {
  if (jf::optional_string(w, "type", where).value_or("int") != "int" || jf::optional_int(w, "num_bits", where) != 4)
    return false;
  const std::string strategy = jf::optional_string(w, "strategy", where).value_or("group");
  if (strategy == "group") {
    if (!w.contains("group_size")) fail("{}: strategy group without group_size", where);
    g.group_size = block_dim(w["group_size"], where, "group_size");
  } else if (strategy != "channel") {
    fail("{}", unsupported(where, fmt::format("4-bit integer weight strategy '{}'", strategy)));
  }
  g.int4 = true;
  return true;
}

QuantScheme compressed_tensors(const json& q, const std::string& source) {
  QuantScheme s{"compressed-tensors"};
  if (jf::has(q, "sparsity_config")) fail("{}", unsupported(source, "a sparse compressed-tensors checkpoint"));
  if (!q.contains("config_groups") || !q["config_groups"].is_object() || q["config_groups"].empty())
    fail("{}: compressed-tensors quantization_config without config_groups", source);
  bool first = true;
  for (const auto& [name, group] : q["config_groups"].items()) {
    const std::string where = source + " quantization_config.config_groups." + name;
    if (!group.is_object() || !group.contains("weights") || !group["weights"].is_object())
      fail("{}: no weights scheme", where);
    const json& w = group["weights"];
    QuantScheme g{"compressed-tensors"};
    if (int4_weights(w, where, g)) {
      if (!first && (!s.int4 || g.group_size != s.group_size))
        fail("{}: config groups of different weight schemes are not supported", where);
      s = g;
      first = false;
      continue;
    }
    if (s.int4) fail("{}: config groups of different weight schemes are not supported", where);
    const std::string type = jf::optional_string(w, "type", where).value_or("int");
    const int bits = jf::optional_int(w, "num_bits", where).value_or(0);
    if (type != "float" || bits != 8)
      fail("{}", unsupported(where, fmt::format("compressed-tensors {}-bit {} weights", bits, type)));
    const std::string strategy = jf::optional_string(w, "strategy", where).value_or("tensor");
    if (strategy == "block") {
      if (!w.contains("block_structure")) fail("{}: strategy block without block_structure", where);
      read_block_pair(w["block_structure"], where, "block_structure", g);
    } else if (strategy == "group") {
      if (!w.contains("group_size")) fail("{}: strategy group without group_size", where);
      g.group_size = block_dim(w["group_size"], where, "group_size");
    } else if (strategy != "tensor" && strategy != "channel") {
      fail("{}", unsupported(where, fmt::format("FP8 weight strategy '{}'", strategy)));
    }
    // One block geometry for the whole file: the scale's shape then decides per tensor.
    if (!first && (g.block_rows != s.block_rows || g.block_cols != s.block_cols || g.group_size != s.group_size))
      fail("{}: config groups with different FP8 block sizes are not supported", where);
    s.block_rows = g.block_rows, s.block_cols = g.block_cols, s.group_size = g.group_size;
    first = false;
  }
  return s;
}

std::optional<QuantScheme> modelopt(const json* q, const json* hf_quant, const std::string& source) {
  std::string algo;
  for (const json* j : {q, hf_quant}) {
    if (!j || !j->is_object()) continue;
    if (jf::has(*j, "quant_algo")) algo = jf::required_string(*j, "quant_algo", source);
    if (j->contains("quantization") && jf::has((*j)["quantization"], "quant_algo"))
      algo = jf::required_string((*j)["quantization"], "quant_algo", source);
    if (!algo.empty()) break;
  }
  if (algo != "FP8") fail("{}", unsupported(source, fmt::format("modelopt quant_algo '{}'", algo)));
  return QuantScheme{"modelopt"};
}

// GPTQ (AutoGPTQ / GPTQModel) and AWQ (AutoAWQ's GEMM packing), 4-bit only.
QuantScheme int4_method(const json& q, const std::string& method, const std::string& source) {
  const std::string where = source + " quantization_config";
  QuantScheme s{method};
  s.int4 = true;
  const int bits = jf::optional_int(q, "bits", where).value_or(jf::optional_int(q, "w_bit", where).value_or(0));
  if (bits != 4) fail("{}", unsupported(where, fmt::format("{} with {}-bit weights", method, bits)));
  const int group = jf::optional_int(q, "group_size", where).value_or(jf::optional_int(q, "q_group_size", where).value_or(-1));
  if (group == 0 || group < -1) fail("{}: group_size {} is not a group size", where, group);
  s.group_size = group == -1 ? 0 : group;  // -1: one group a row
  if (method == "gptq") {
    const std::string format = jf::optional_string(q, "checkpoint_format", where).value_or("gptq");
    if (format == "gptq") s.zero_offset = 1;  // AutoGPTQ's format stores zero - 1
    else if (format != "gptq_v2") fail("{}", unsupported(where, fmt::format("GPTQ checkpoint_format '{}'", format)));
  } else {
    std::string version = jf::optional_string(q, "version", where).value_or("gemm");
    std::transform(version.begin(), version.end(), version.begin(), [](unsigned char c) { return std::tolower(c); });
    if (version != "gemm") fail("{}", unsupported(where, fmt::format("AWQ version '{}' (only GEMM packing)", version)));
    if (jf::optional_bool(q, "zero_point", where) == false)
      fail("{}", unsupported(where, "AWQ without zero points"));
  }
  return s;
}

}  // namespace

std::optional<QuantScheme> parse_quantization_config(const json& config, const std::string& source,
                                                   const json* hf_quant_config) {
  const json* q = config.is_object() && jf::has(config, "quantization_config") ? &config["quantization_config"] : nullptr;
  if (!q) {
    if (hf_quant_config) return modelopt(nullptr, hf_quant_config, source + " hf_quant_config.json");
    return std::nullopt;
  }
  if (!q->is_object()) fail("{}: quantization_config is {}, not an object", source, json_excerpt(*q));
  const std::string method = jf::optional_string(*q, "quant_method", source + " quantization_config").value_or("");
  if (method == "fbgemm_fp8") return QuantScheme{"fbgemm_fp8"};
  if (method == "fp8") {
    QuantScheme s{"fp8"};
    if (jf::has(*q, "weight_block_size")) read_block_pair((*q)["weight_block_size"], source, "weight_block_size", s);
    const std::string fmt_name = jf::optional_string(*q, "fmt", source).value_or("e4m3");
    if (fmt_name != "e4m3") fail("{}", unsupported(source, fmt::format("fp8 fmt '{}'", fmt_name)));
    return s;
  }
  if (method == "compressed-tensors") return compressed_tensors(*q, source);
  if (method == "gptq" || method == "awq") return int4_method(*q, method, source);
  if (method == "modelopt") return modelopt(q, hf_quant_config, source);
  fail("{}", unsupported(source, fmt::format("quantization_config.quant_method '{}'", method)));
}

namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The activation and KV-cache scales of W8A8 files: not used (the header says why).
bool is_activation_scale(std::string_view name) {
  for (std::string_view s : {".input_scale", ".k_scale", ".v_scale", ".kv_scale", ".activation_scale"})
    if (ends_with(name, s)) return true;
  return false;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The scale block of `scale` for an [R, C] weight: per tensor, per row, or the scheme's blocks.
void resolve_layout(WeightScale& s, const TensorView& w, const std::optional<QuantScheme>& scheme) {
  const int64_t R = w.shape[0], C = w.shape[1];
  int64_t n = 1;
  const std::vector<int64_t>& shape = s.tensor.shape;
  for (int64_t d : shape) n *= d;
  const bool per_row = (shape.size() == 2 && shape[0] == R && shape[1] == 1) ||
                       (shape.size() == 1 && shape[0] == R && R > 1);
  if (n == 1 && shape.size() <= 2) {
    s.block_rows = R, s.block_cols = C;
  } else if (per_row) {
    s.block_rows = 1, s.block_cols = C;
  } else if (scheme && scheme->group_size > 0 && shape.size() == 2 && shape[0] == R &&
             shape[1] == ceil_div(C, scheme->group_size)) {
    s.block_rows = 1, s.block_cols = scheme->group_size;
  } else {
    // 2-D blocks: the scheme's size, or DeepSeek's 128 x 128 for the fp8 method without one.
    int64_t br = scheme ? scheme->block_rows : 0, bc = scheme ? scheme->block_cols : 0;
    if (br == 0 && scheme && scheme->method == "fp8") br = bc = 128;
    if (br == 0 || shape.size() != 2 || shape[0] != ceil_div(R, br) || shape[1] != ceil_div(C, bc))
      fail("scale '{}' has shape [{}], which fits none of the layouts of its [{}, {}] weight '{}' in {} (one scale, "
           "one a row [{}, 1]{})",
           s.tensor.name, fmt::join(shape, ", "), R, C, w.name, w.file, R,
           br ? fmt::format(", or one per {} x {} block [{}, {}]", br, bc, ceil_div(R, br), ceil_div(C, bc)) : "");
    s.block_rows = br, s.block_cols = bc;
  }
  if (C % 32 != 0)
    fail("FP8 weight '{}' in {} has rows of {} elements; eaglevk reads FP8 in blocks of 32", w.name, w.file, C);
  if (s.block_cols < C && s.block_cols % 32 != 0)
    fail("FP8 weight '{}' in {}: scale blocks of {} columns; eaglevk's FP8 blocks need multiples of 32", w.name,
         w.file, s.block_cols);
}

}  // namespace

void attach_fp8_scales(Checkpoint& ckpt, const std::optional<QuantScheme>& scheme, const std::string& source,
                       std::vector<std::string>& notes) {
  std::vector<std::string> scales_used, activation_scales;
  bool any_fp8 = false;
  for (auto& [name, t] : ckpt.tensors) {
    if (t.dtype != DType::F8_E4M3) continue;
    any_fp8 = true;
    if (!scheme)
      fail("{}: tensor '{}' is FP8 (F8_E4M3) but config.json has no quantization_config saying how to scale it",
           source, name);
    if (t.shape.size() != 2 || t.shape[0] <= 0 || t.shape[1] <= 0)
      fail("FP8 tensor '{}' in {} has shape [{}]; eaglevk reads 2-D FP8 weights (one matrix per expert)", name,
           t.file, fmt::join(t.shape, ", "));
    const TensorView* s = nullptr;
    for (const char* suffix : {"_scale", "_scale_inv"}) {
      const TensorView* found = ckpt.find(name + suffix);
      if (!found) continue;
      if (s) fail("FP8 weight '{}' in {} has both {}_scale and {}_scale_inv", name, t.file, name, name);
      s = found;
    }
    if (!s) fail("FP8 weight '{}' in {} has no scale ({}_scale or {}_scale_inv)", name, t.file, name, name);
    if (s->dtype != DType::F32 && s->dtype != DType::BF16 && s->dtype != DType::F16)
      fail("scale '{}' in {} is {}; scales must be F32, BF16 or F16", s->name, s->file, dtype_name(s->dtype));
    WeightScale ws{TensorPart{s->name, s->dtype, s->shape, s->data, s->bytes}};
    resolve_layout(ws, t, scheme);
    t.scale = std::move(ws);
    scales_used.push_back(s->name);
  }
  if (scheme && !any_fp8)
    fail("{}: quantization_config names {} but no tensor is FP8 (F8_E4M3)", source, scheme->method);
  for (const auto& [name, t] : ckpt.tensors) {
    if (is_activation_scale(name)) {
      activation_scales.push_back(name);
    } else if ((ends_with(name, "_scale") || ends_with(name, "_scale_inv")) && scheme &&
               std::find(scales_used.begin(), scales_used.end(), name) == scales_used.end()) {
      fail("tensor '{}' in {} looks like a weight scale but scales no FP8 weight", name, t.file);
    }
  }
  // The views point into the mappings, which stay: only the map entries go.
  for (const std::string& name : scales_used) ckpt.tensors.erase(name);
  for (const std::string& name : activation_scales) ckpt.tensors.erase(name);
  if (scheme)
    notes.push_back(fmt::format("FP8 weights ({}): {} tensors, dequantized on the fly with f32 activations{}",
                                scheme->method, scales_used.size(),
                                activation_scales.empty()
                                    ? std::string()
                                    : fmt::format("; {} activation/KV-cache scales not used", activation_scales.size())));
}

uint64_t fp8_block_bytes(const TensorView& w) {
  return uint64_t(w.numel()) / 32 * 36;
}

void fp8_rows_to_blocks(const TensorView& w, int64_t first, int64_t count, std::vector<std::byte>& out) {
  if (w.dtype != DType::F8_E4M3 || !w.scale || w.shape.size() != 2)
    fail("tensor '{}' in {} is not a 2-D FP8 weight with a scale", w.name, w.file);
  const WeightScale& s = *w.scale;
  const int64_t R = w.shape[0], C = w.shape[1];
  if (C % 32 != 0 || first < 0 || count < 0 || first + count > R)
    fail("FP8 weight '{}': rows [{}, {}) of a [{}, {}] matrix in blocks of 32", w.name, first, first + count, R, C);
  const int64_t scale_cols = ceil_div(C, s.block_cols);
  size_t at = out.size();
  out.resize(at + size_t(count) * size_t(C / 32) * 36);
  for (int64_t r = first; r < first + count; ++r) {
    const auto* codes = reinterpret_cast<const uint8_t*>(w.data) + r * C;
    for (int64_t b = 0; b < C / 32; ++b, at += 36) {
      const float scale = float_at(s.tensor, (r / s.block_rows) * scale_cols + (b * 32) / s.block_cols);
      if (!std::isfinite(scale)) fail("FP8 weight '{}' in {}: scale of row {} is {}", w.name, w.file, r, scale);
      for (int j = 0; j < 32; ++j)
        if ((codes[b * 32 + j] & 0x7F) == 0x7F)
          fail("FP8 weight '{}' in {} holds a NaN code in row {}, column {}", w.name, w.file, r, b * 32 + j);
      std::memcpy(out.data() + at, &scale, 4);
      std::memcpy(out.data() + at + 4, codes + b * 32, 32);
    }
  }
}

}  // namespace eaglevk::loader
