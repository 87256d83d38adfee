#pragma once
// Hugging Face config.json reading for Llama-family checkpoints, plus the RoPE inverse
// frequencies the config implies. Field readers are exposed so other model families (the
// EAGLE-3 draft, Llama 4) can read their configs with the same error messages.
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace eaglevk::loader {

struct RopeScaling {
  std::string type;  // "llama3" (the only scaled type supported; "default" means no scaling)
  float factor = 1;
  float low_freq_factor = 1;
  float high_freq_factor = 1;
  int original_max_position_embeddings = 0;
};

struct LlamaConfig {
  std::string architecture;  // architectures[0]
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_hidden_layers = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;  // absent => num_attention_heads (HF default)
  int head_dim = 0;             // absent => hidden_size / num_attention_heads
  int vocab_size = 0;
  int max_position_embeddings = 0;
  float rms_norm_eps = 0;
  float rope_theta = 10000;  // absent => 10000 (HF default)
  std::optional<RopeScaling> rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;
  bool mlp_bias = false;
  int bos_token_id = -1;
  std::vector<int> eos_token_ids;
};

// Reads dir/config.json and, when present, dir/generation_config.json: its bos_token_id wins, and
// its eos ids come first, followed by config.json's that it lacks (either may be an int or a list).
// Only `accepted_architectures` pass (default: LlamaForCausalLM).
LlamaConfig load_llama_config(const std::filesystem::path& dir,
                              const std::vector<std::string>& accepted_architectures = {"LlamaForCausalLM"});

// generation_config.json's bos_token_id wins; its eos ids come first, then config.json's extras.
void apply_generation_config(LlamaConfig& config, const nlohmann::json& generation, std::string_view source);

// The same from an already-parsed config.json; `source` names it in errors. No generation config.
// An empty `accepted_architectures` reads a sub-config that names no architecture (Llama-4's
// text_config): `architectures` is then not read and `architecture` stays empty.
LlamaConfig parse_llama_config(const nlohmann::json& config, std::string_view source,
                               const std::vector<std::string>& accepted_architectures = {"LlamaForCausalLM"});

// Reads "rope_parameters" (newer transformers; may hold rope_theta too) or else "rope_scaling".
// nullopt for null, missing or rope type "default"; throws for any type but "llama3".
std::optional<RopeScaling> parse_rope_scaling(const nlohmann::json& config, std::string_view source);

// inv_freq[j] for j < head_dim/2, computed in f32 exactly as transformers does
// (_compute_default_rope_parameters, then _compute_llama3_parameters when scaling is given).
std::vector<float> rope_inv_freq(int head_dim, float theta, const std::optional<RopeScaling>& scaling);

// Field readers: each names the field and `source` when the field is missing (required ones) or
// has the wrong JSON type. A JSON null counts as missing. Integers accept integral floats (8.0);
// floats accept integers.
namespace json_field {
bool has(const nlohmann::json& object, std::string_view key);  // present and not null
int required_int(const nlohmann::json& object, std::string_view key, std::string_view source);
std::optional<int> optional_int(const nlohmann::json& object, std::string_view key, std::string_view source);
float required_float(const nlohmann::json& object, std::string_view key, std::string_view source);
std::optional<float> optional_float(const nlohmann::json& object, std::string_view key, std::string_view source);
bool required_bool(const nlohmann::json& object, std::string_view key, std::string_view source);
std::optional<bool> optional_bool(const nlohmann::json& object, std::string_view key, std::string_view source);
std::string required_string(const nlohmann::json& object, std::string_view key, std::string_view source);
std::optional<std::string> optional_string(const nlohmann::json& object, std::string_view key,
                                           std::string_view source);
// An int or a list of ints (eos_token_id); empty when missing or null.
std::vector<int> int_or_int_list(const nlohmann::json& object, std::string_view key, std::string_view source);
// Parses a whole JSON file; throws naming the file when it cannot be read or parsed, or when it
// nests more than kMaxJsonFileDepth levels deep.
inline constexpr size_t kMaxJsonFileDepth = 64;
nlohmann::json read_file(const std::filesystem::path& path);
}  // namespace json_field

}  // namespace eaglevk::loader
