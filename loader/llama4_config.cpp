#include "loader/llama4_config.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include <eaglevk/error.h>

#include "loader/json_excerpt.h"

namespace eaglevk::loader {

namespace jf = json_field;

namespace {

std::vector<bool> flags_from_list(const nlohmann::json& list, int layers, const std::string& source, const char* key) {
  if (!list.is_array() || int(list.size()) != layers)
    fail("{}: {} must list one value per layer ({})", source, key, layers);
  std::vector<bool> out;
  for (const auto& v : list) {
    if (!v.is_boolean() && !v.is_number()) fail("{}: {} holds {}, not a number or a boolean", source, key, json_excerpt(v));
    out.push_back(v.is_boolean() ? v.get<bool>() : v.get<double>() != 0);
  }
  return out;
}

}  // namespace

Llama4Config parse_llama4_config(const nlohmann::json& j, const std::string& source) {
  std::string arch = j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty() &&
                             j["architectures"][0].is_string()
                         ? j["architectures"][0].get<std::string>()
                         : "";
  Llama4Config c;
  // A reference into the config, never a copy: copying recurses once per level of nesting,
  // which a hostile file makes 100,000 deep.
  const nlohmann::json* text_ptr = &j;
  if (arch == "Llama4ForConditionalGeneration") {
    if (!j.contains("text_config") || !j["text_config"].is_object()) fail("{}: missing text_config", source);
    text_ptr = &j["text_config"];
    c.prefix = "language_model.";
  } else if (arch == "Llama4ForCausalLM") {
    if (j.contains("text_config")) text_ptr = &j["text_config"];
  } else {
    fail("{}: architecture '{}' is not Llama-4", source, arch);
  }
  const nlohmann::json& text = *text_ptr;
  const std::string text_source = source + (c.prefix.empty() ? "" : " text_config");
  // The shared fields read like Llama's; text_config names no architecture.
  c.base = parse_llama_config(text, text_source, {});
  c.base.architecture = arch;
  const int L = c.base.num_hidden_layers;
  c.intermediate_size_mlp = jf::optional_int(text, "intermediate_size_mlp", text_source).value_or(16384);
  c.num_local_experts = jf::optional_int(text, "num_local_experts", text_source).value_or(16);
  c.num_experts_per_tok = jf::optional_int(text, "num_experts_per_tok", text_source).value_or(1);
  if (c.num_experts_per_tok < 1 || c.num_experts_per_tok > std::min(8, c.num_local_experts))
    fail("{}: num_experts_per_tok {} outside 1..{}", text_source, c.num_experts_per_tok, std::min(8, c.num_local_experts));
  c.moe_layer.assign(L, false);
  if (jf::has(text, "moe_layers")) {
    if (!text["moe_layers"].is_array()) fail("{}: moe_layers must be a list of layer ids", text_source);
    for (const auto& v : text["moe_layers"]) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= L)
        fail("{}: moe_layers holds {}, outside 0..{}", text_source, json_excerpt(v), L - 1);
      c.moe_layer[v.get<int64_t>()] = true;
    }
  } else {
    int step = jf::optional_int(text, "interleave_moe_layer_step", text_source).value_or(1);
    if (step < 1) fail("{}: interleave_moe_layer_step must be >= 1", text_source);
    for (int l = step - 1; l < L; l += step) c.moe_layer[l] = true;
  }
  if (jf::has(text, "no_rope_layers") && !text["no_rope_layers"].empty()) {
    c.rope_layer = flags_from_list(text["no_rope_layers"], L, text_source, "no_rope_layers");  // 1 = uses RoPE
  } else {
    int interval = jf::optional_int(text, "no_rope_layer_interval", text_source).value_or(4);
    for (int l = 0; l < L; ++l) c.rope_layer.push_back((l + 1) % interval != 0);
  }
  c.attention_chunk_size = jf::optional_int(text, "attention_chunk_size", text_source).value_or(8192);
  if (jf::has(text, "layer_types")) {
    if (!text["layer_types"].is_array() || int(text["layer_types"].size()) != L)
      fail("{}: layer_types must list one type per layer", text_source);
    for (const auto& t : text["layer_types"]) {
      if (!t.is_string()) fail("{}: layer_types holds {}, not a string", text_source, json_excerpt(t));
      c.chunked_layer.push_back(t.get_ref<const std::string&>() == "chunked_attention");
    }
  } else {
    c.chunked_layer = c.rope_layer;
  }
  c.use_qk_norm = jf::optional_bool(text, "use_qk_norm", text_source).value_or(true);
  // Some configs carry an integer here: any value > 0 turns it on (as vLLM reads it).
  if (jf::has(text, "attn_temperature_tuning")) {
    const nlohmann::json& tuning = text["attn_temperature_tuning"];
    if (!tuning.is_boolean() && !tuning.is_number())
      fail("{}: attn_temperature_tuning must be a boolean or a number, got {}", text_source, json_excerpt(tuning));
    c.attn_temperature_tuning = tuning.is_boolean() ? tuning.get<bool>() : tuning.get<double>() > 0;
  }
  c.floor_scale = jf::optional_float(text, "floor_scale", text_source).value_or(8192);
  c.attn_scale = jf::optional_float(text, "attn_scale", text_source).value_or(0.1f);
  if (c.floor_scale <= 0) fail("{}: floor_scale must be positive", text_source);
  if (c.attention_chunk_size <= 0) fail("{}: attention_chunk_size must be positive", text_source);
  return c;
}

}  // namespace eaglevk::loader
