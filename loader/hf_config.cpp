#include "loader/hf_config.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <fstream>
#include <numbers>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <eaglevk/error.h>

#include "loader/input_path.h"
#include "loader/json_excerpt.h"
namespace eaglevk::loader {
namespace fs = std::filesystem;
using nlohmann::json;

namespace json_field {
namespace {

// nullptr when absent or null; throws when `object` itself is not an object.
const json* lookup(const json& object, std::string_view key, std::string_view source) {
  if (!object.is_object()) fail("{}: expected a JSON object holding '{}', got {}", source, key, object.type_name());
  auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

const json& need(const json& object, std::string_view key, std::string_view source) {
  const json* value = lookup(object, key, source);
  if (!value) fail("{}: missing required field '{}'", source, key);
  return *value;
}

int as_int(const json& value, std::string_view key, std::string_view source) {
  if (value.is_number_integer()) {
    if (value.is_number_unsigned() ? value.get<uint64_t>() > uint64_t(INT_MAX)
                                   : value.get<int64_t>() < INT_MIN || value.get<int64_t>() > INT_MAX)
      fail("{}: field '{}' = {} is out of int range", source, key, json_excerpt(value));
    return static_cast<int>(value.get<int64_t>());
  }
  if (value.is_number_float()) {  // some exporters write 8192.0
    double d = value.get<double>();
    if (std::trunc(d) == d && d >= INT_MIN && d <= INT_MAX) return static_cast<int>(d);
  }
  fail("{}: field '{}' must be an integer, got {}", source, key, json_excerpt(value));
}

float as_float(const json& value, std::string_view key, std::string_view source) {
  if (!value.is_number()) fail("{}: field '{}' must be a number, got {}", source, key, json_excerpt(value));
  return static_cast<float>(value.get<double>());
}

bool as_bool(const json& value, std::string_view key, std::string_view source) {
  if (!value.is_boolean()) fail("{}: field '{}' must be true or false, got {}", source, key, json_excerpt(value));
  return value.get<bool>();
}

std::string as_string(const json& value, std::string_view key, std::string_view source) {
  if (!value.is_string()) fail("{}: field '{}' must be a string, got {}", source, key, json_excerpt(value));
  return value.get<std::string>();
}

}  // namespace

bool has(const json& object, std::string_view key) {
  if (!object.is_object()) return false;
  auto it = object.find(key);
  return it != object.end() && !it->is_null();
}

int required_int(const json& o, std::string_view key, std::string_view source) {
  return as_int(need(o, key, source), key, source);
}
std::optional<int> optional_int(const json& o, std::string_view key, std::string_view source) {
  const json* v = lookup(o, key, source);
  return v ? std::optional(as_int(*v, key, source)) : std::nullopt;
}
float required_float(const json& o, std::string_view key, std::string_view source) {
  return as_float(need(o, key, source), key, source);
}
std::optional<float> optional_float(const json& o, std::string_view key, std::string_view source) {
  const json* v = lookup(o, key, source);
  return v ? std::optional(as_float(*v, key, source)) : std::nullopt;
}
bool required_bool(const json& o, std::string_view key, std::string_view source) {
  return as_bool(need(o, key, source), key, source);
}
std::optional<bool> optional_bool(const json& o, std::string_view key, std::string_view source) {
  const json* v = lookup(o, key, source);
  return v ? std::optional(as_bool(*v, key, source)) : std::nullopt;
}
std::string required_string(const json& o, std::string_view key, std::string_view source) {
  return as_string(need(o, key, source), key, source);
}
std::optional<std::string> optional_string(const json& o, std::string_view key, std::string_view source) {
  const json* v = lookup(o, key, source);
  return v ? std::optional(as_string(*v, key, source)) : std::nullopt;
}

std::vector<int> int_or_int_list(const json& o, std::string_view key, std::string_view source) {
  const json* v = lookup(o, key, source);
  if (!v) return {};
  if (!v->is_array()) return {as_int(*v, key, source)};
  std::vector<int> out;
  for (const auto& item : *v) out.push_back(as_int(item, key, source));
  return out;
}

json read_file(const fs::path& path) {
  require_file(path);  // a FIFO would block the read
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open for reading (does it exist?)", path.string());
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    fail("{}: malformed JSON: {}", path.string(), json_parse_error_text(e));
  }
  // Code beyond the readers copies, compares and prints config values (inspect, the model
  // loaders), and nlohmann does each by recursion: a hostile nesting would exhaust the stack.
  // Real configs nest 3 or 4 levels.
  if (json_nested_deeper_than(j, kMaxJsonFileDepth))
    fail("{}: JSON nested more than {} levels deep", path.string(), kMaxJsonFileDepth);
  return j;
}

}  // namespace json_field

using namespace json_field;

std::optional<RopeScaling> parse_rope_scaling(const json& config, std::string_view source) {
  std::string where;
  const json* params = nullptr;
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    if (has(config, key)) {
      params = &config[key];
      where = fmt::format("{} {}", source, key);
      break;
    }
  }
  if (!params) return std::nullopt;
  if (!params->is_object()) fail("{}: must be a JSON object or null, got {}", where, json_excerpt(*params));

  // transformers accepts the legacy "type" spelling as well as "rope_type".
  auto type = optional_string(*params, "rope_type", where);
  if (!type) type = optional_string(*params, "type", where);
  if (!type) fail("{}: missing required field 'rope_type'", where);
  if (*type == "default") return std::nullopt;
  if (*type != "llama3") fail("{}: unsupported rope type '{}' (supported: default, llama3)", where, *type);

  RopeScaling s;
  s.type = *type;
  s.factor = required_float(*params, "factor", where);
  s.low_freq_factor = required_float(*params, "low_freq_factor", where);
  s.high_freq_factor = required_float(*params, "high_freq_factor", where);
  s.original_max_position_embeddings = required_int(*params, "original_max_position_embeddings", where);
  if (!(s.factor > 0) || !(s.low_freq_factor > 0) || !(s.high_freq_factor > 0))
    fail("{}: factor, low_freq_factor and high_freq_factor must be positive", where);
  // transformers' rule (_validate_llama3_parameters): the smoothing between the two wavelength
  // bounds divides by high_freq_factor - low_freq_factor, so equal factors leave it undefined.
  if (!(s.high_freq_factor > s.low_freq_factor))
    fail("{}: high_freq_factor {} must be greater than low_freq_factor {} (llama3 scaling divides by their "
         "difference)",
         where, s.high_freq_factor, s.low_freq_factor);
  if (s.original_max_position_embeddings <= 0)
    fail("{}: original_max_position_embeddings must be positive", where);
  return s;
}

LlamaConfig parse_llama_config(const json& config, std::string_view source,
                               const std::vector<std::string>& accepted_architectures) {
  if (!config.is_object()) fail("{}: config is not a JSON object", source);
  LlamaConfig c;

  if (!accepted_architectures.empty()) {
    const json& archs = need(config, "architectures", source);
    if (!archs.is_array() || archs.empty() || !archs[0].is_string())
      fail("{}: field 'architectures' must be a non-empty list of strings", source);
    c.architecture = archs[0].get<std::string>();
    if (std::find(accepted_architectures.begin(), accepted_architectures.end(), c.architecture) ==
        accepted_architectures.end())
      fail("{}: unsupported architecture '{}' (supported: {})", source, c.architecture,
           fmt::join(accepted_architectures, ", "));
  }

  c.hidden_size = required_int(config, "hidden_size", source);
  c.intermediate_size = required_int(config, "intermediate_size", source);
  c.num_hidden_layers = required_int(config, "num_hidden_layers", source);
  c.num_attention_heads = required_int(config, "num_attention_heads", source);
  c.num_key_value_heads = optional_int(config, "num_key_value_heads", source).value_or(c.num_attention_heads);
  c.vocab_size = required_int(config, "vocab_size", source);
  c.max_position_embeddings = required_int(config, "max_position_embeddings", source);
  c.rms_norm_eps = required_float(config, "rms_norm_eps", source);

  const std::pair<const char*, int> sizes[] = {
      {"hidden_size", c.hidden_size},           {"intermediate_size", c.intermediate_size},
      {"num_hidden_layers", c.num_hidden_layers}, {"num_attention_heads", c.num_attention_heads},
      {"num_key_value_heads", c.num_key_value_heads}, {"vocab_size", c.vocab_size},
      {"max_position_embeddings", c.max_position_embeddings}};
  for (const auto& [name, value] : sizes)
    if (value <= 0) fail("{}: field '{}' must be positive, got {}", source, name, value);

  if (auto head_dim = optional_int(config, "head_dim", source)) {
    c.head_dim = *head_dim;
  } else {
    if (c.hidden_size % c.num_attention_heads != 0)
      fail("{}: hidden_size {} is not divisible by num_attention_heads {} (and no head_dim given)", source,
           c.hidden_size, c.num_attention_heads);
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  if (c.head_dim <= 0 || c.head_dim % 2 != 0)
    fail("{}: head_dim {} must be positive and even (RoPE rotates pairs)", source, c.head_dim);
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    fail("{}: num_attention_heads {} is not divisible by num_key_value_heads {}", source, c.num_attention_heads,
         c.num_key_value_heads);
  if (!(c.rms_norm_eps > 0)) fail("{}: field 'rms_norm_eps' must be positive", source);
  // The MLP is SwiGLU: silu(gate) * up. transformers' ACT2FN spells SiLU "silu" or "swish";
  // any other activation (gelu, relu, ...) would silently run as SiLU.
  const std::string act = optional_string(config, "hidden_act", source).value_or("silu");
  if (act != "silu" && act != "swish")
    fail("{}: hidden_act '{}' is not supported (the MLP runs SiLU: 'silu' or 'swish')", source, act);

  c.rope_scaling = parse_rope_scaling(config, source);
  // Newer transformers keep rope_theta inside rope_parameters; older ones at the top level.
  std::optional<float> theta;
  if (has(config, "rope_parameters"))
    theta = optional_float(config["rope_parameters"], "rope_theta", fmt::format("{} rope_parameters", source));
  if (!theta) theta = optional_float(config, "rope_theta", source);
  c.rope_theta = theta.value_or(10000.0f);
  if (!(c.rope_theta > 0) || !std::isfinite(c.rope_theta)) fail("{}: field 'rope_theta' must be positive", source);

  c.tie_word_embeddings = optional_bool(config, "tie_word_embeddings", source).value_or(false);
  c.attention_bias = optional_bool(config, "attention_bias", source).value_or(false);
  c.mlp_bias = optional_bool(config, "mlp_bias", source).value_or(false);
  c.bos_token_id = optional_int(config, "bos_token_id", source).value_or(-1);
  c.eos_token_ids = int_or_int_list(config, "eos_token_id", source);
  return c;
}

void apply_generation_config(LlamaConfig& c, const json& gen, std::string_view source_view) {
  const std::string source(source_view);
  if (!gen.is_object()) fail("{}: not a JSON object", source);
  if (auto bos = optional_int(gen, "bos_token_id", source)) c.bos_token_id = *bos;
  // Generation stops on the generation config's ids first; keep config.json's extras too so a
  // stale generation config cannot make a model run past its end-of-turn token.
  std::vector<int> eos = int_or_int_list(gen, "eos_token_id", source);
  for (int id : c.eos_token_ids)
    if (std::find(eos.begin(), eos.end(), id) == eos.end()) eos.push_back(id);
  c.eos_token_ids = std::move(eos);
}

LlamaConfig load_llama_config(const fs::path& dir, const std::vector<std::string>& accepted_architectures) {
  const fs::path config_path = dir / "config.json";
  std::error_code ec;
  if (!fs::is_regular_file(config_path, ec)) fail("{}: config file does not exist", config_path.string());
  LlamaConfig c = parse_llama_config(read_file(config_path), config_path.string(), accepted_architectures);

  const fs::path gen_path = dir / "generation_config.json";
  if (fs::is_regular_file(gen_path, ec)) apply_generation_config(c, read_file(gen_path), gen_path.string());
  return c;
}

std::vector<float> rope_inv_freq(int head_dim, float theta, const std::optional<RopeScaling>& scaling) {
  if (head_dim <= 0 || head_dim % 2 != 0) fail("rope_inv_freq: head_dim {} must be positive and even", head_dim);
  if (!(theta > 0)) fail("rope_inv_freq: theta {} must be positive", theta);
  const int half = head_dim / 2;
  // torch: 1.0 / (base ** (arange(0, dim, 2).float() / dim)), all in float32.
  std::vector<float> inv(half);
  for (int j = 0; j < half; ++j) {
    const float exponent = static_cast<float>(2 * j) / static_cast<float>(head_dim);
    inv[j] = 1.0f / std::pow(theta, exponent);
  }
  if (!scaling) return inv;
  if (scaling->type != "llama3") fail("rope_inv_freq: unsupported rope type '{}'", scaling->type);

  // Python-scalar arithmetic happens in double and meets the f32 tensor as f32; tensor
  // arithmetic is f32 throughout. Mirroring that keeps us bit-close to the reference.
  const double low_ff = scaling->low_freq_factor, high_ff = scaling->high_freq_factor;
  const double old_context = scaling->original_max_position_embeddings;
  const float factor = scaling->factor;
  const float low_freq_wavelen = static_cast<float>(old_context / low_ff);
  const float high_freq_wavelen = static_cast<float>(old_context / high_ff);
  const float two_pi = 2.0f * static_cast<float>(std::numbers::pi);
  const bool has_medium_band = high_ff != low_ff;  // equal factors: the band is empty, never divide by 0

  for (int j = 0; j < half; ++j) {
    const float wavelen = two_pi / inv[j];
    const float inv_llama = wavelen > low_freq_wavelen ? inv[j] / factor : inv[j];
    const bool is_medium = has_medium_band && !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
    if (is_medium) {
      const float smooth = (static_cast<float>(old_context) / wavelen - static_cast<float>(low_ff)) /
                           static_cast<float>(high_ff - low_ff);
      inv[j] = (1.0f - smooth) * inv_llama / factor + smooth * inv_llama;
    } else {
      inv[j] = inv_llama;
    }
  }
  return inv;
}

}  // namespace eaglevk::loader
