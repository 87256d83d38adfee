#include "loader/eagle3_config.h"

#include <limits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <eaglevk/error.h>

#include "loader/json_excerpt.h"

namespace eaglevk::loader {

namespace jf = json_field;

namespace {

// Ids are read as 64-bit and range-checked before narrowing: get<uint32_t>() would wrap
// 2^32 + 1 to 1, a valid-looking tap. `max_id` leaves room for the ModelOpt + 1.
std::vector<uint32_t> read_ids(const nlohmann::json& j, const std::string& source, const char* key, uint64_t max_id) {
  if (!j.is_array()) fail("{}: {} must be a list of layer ids, got {}", source, key, json_excerpt(j));
  std::vector<uint32_t> ids;
  for (const auto& v : j) {
    const bool in_range = v.is_number_unsigned()  ? v.get<uint64_t>() <= max_id
                          : v.is_number_integer() ? v.get<int64_t>() >= 0 && uint64_t(v.get<int64_t>()) <= max_id
                                                  : false;
    if (!in_range) fail("{}: {} holds {}, not a layer id (0..{})", source, key, json_excerpt(v), max_id);
    ids.push_back(static_cast<uint32_t>(v.get<uint64_t>()));
  }
  return ids;
}

void refuse_flag(const nlohmann::json& j, const char* key, const std::string& source) {
  if (jf::has(j, key) && j.at(key).is_boolean() && j.at(key).get<bool>())
    fail("{}: {} = true is not supported by eaglevk (the head would run wrongly)", source, key);
}

constexpr uint64_t kMaxId = std::numeric_limits<uint32_t>::max();

}  // namespace

Eagle3Config parse_eagle3_config(const nlohmann::json& j, const std::string& source) {
  Eagle3Config c;
  std::string arch = j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty() &&
                             j["architectures"][0].is_string()
                         ? j["architectures"][0].get<std::string>()
                         : "";
  if (jf::has(j, "speculators_model_type")) {
    std::string type = jf::required_string(j, "speculators_model_type", source);
    if (type != "eagle3") fail("{}: speculators_model_type '{}' is not eagle3", source, type);
    c.format = "speculators";
    if (!j.contains("transformer_layer_config")) fail("{}: missing transformer_layer_config", source);
    c.layer = parse_llama_config(j["transformer_layer_config"], source + " transformer_layer_config",
                                 {"LlamaForCausalLM"});
    c.target_vocab_size = c.layer.vocab_size;
    c.draft_vocab_size = jf::optional_int(j, "draft_vocab_size", source).value_or(32000);
    c.norm_before_residual = jf::optional_bool(j, "norm_before_residual", source).value_or(false);
    c.target_hidden_size = jf::optional_int(j, "target_hidden_size", source).value_or(c.layer.hidden_size);
    for (const char* flag : {"norm_before_fc", "fc_norm", "norm_output"}) refuse_flag(j, flag, source);
    if (jf::has(j, "eagle_aux_hidden_state_layer_ids")) {
      c.aux_layers = read_ids(j["eagle_aux_hidden_state_layer_ids"], source, "eagle_aux_hidden_state_layer_ids", kMaxId);
      c.aux_layers_rule = "speculators eagle_aux_hidden_state_layer_ids: the residual stream entering each layer (vLLM), as given";
    }
  } else if (arch == "LlamaForCausalLMEagle3" || (arch == "LlamaForCausalLM" && jf::has(j, "draft_vocab_size"))) {
    const bool gguf = jf::has(j, "eaglevk_source_format");
    c.format = gguf ? "gguf" : "eagle3";
    // The layer is a plain Llama layer under the draft's architecture name. Accepting that name
    // here, rather than editing a copy of the config, never copies the file's values: a copy
    // recurses once per level of nesting, which a hostile file makes 100,000 deep.
    c.layer = parse_llama_config(j, source, {arch});
    c.layer.architecture = "LlamaForCausalLM";
    c.target_vocab_size = c.layer.vocab_size;
    c.draft_vocab_size = jf::optional_int(j, "draft_vocab_size", source).value_or(c.layer.vocab_size);
    c.norm_before_residual = jf::optional_bool(j, "norm_before_residual", source).value_or(false);
    c.target_hidden_size = jf::optional_int(j, "target_hidden_size", source).value_or(c.layer.hidden_size);
    if (jf::has(j, "eagle_aux_hidden_state_layer_ids")) {
      c.aux_layers = read_ids(j["eagle_aux_hidden_state_layer_ids"], source, "eagle_aux_hidden_state_layer_ids", kMaxId);
      c.aux_layers_rule = gguf ? "GGUF eagle3 tap layers: the residual stream entering each layer (llama.cpp), as given"
                               : "eagle_aux_hidden_state_layer_ids: the residual stream entering each layer, as given";
    } else if (j.contains("eagle_config") && jf::has(j["eagle_config"], "eagle_aux_hidden_state_layer_ids")) {
      // NVIDIA ModelOpt heads name layer outputs; SGLang serves them one layer later.
      c.aux_layers = read_ids(j["eagle_config"]["eagle_aux_hidden_state_layer_ids"], source,
                              "eagle_config.eagle_aux_hidden_state_layer_ids", kMaxId - 1);
      for (uint32_t& id : c.aux_layers) ++id;
      c.aux_layers_rule = "eagle_config.eagle_aux_hidden_state_layer_ids name layer outputs (ModelOpt, SGLang): +1";
    }
  } else {
    fail("{}: not an EAGLE-3 draft (architecture '{}'; expected LlamaForCausalLMEagle3 or a speculators eagle3 "
         "config)",
         source, arch);
  }
  if (c.layer.num_hidden_layers != 1)
    fail("{}: the draft has {} layers; eaglevk runs one-layer EAGLE-3 heads", source, c.layer.num_hidden_layers);
  if (c.draft_vocab_size <= 0 || c.draft_vocab_size > c.target_vocab_size)
    fail("{}: draft_vocab_size {} outside 1..{}", source, c.draft_vocab_size, c.target_vocab_size);
  return c;
}

}  // namespace eaglevk::loader
