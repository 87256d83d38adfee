#include "loader/quantization_config.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include <eaglevk/error.h>

#include "loader/hf_config.h"
#include "loader/json_excerpt.h"

namespace eaglevk::loader {
namespace jf = json_field;
using nlohmann::json;

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

}  // namespace eaglevk::loader
