#pragma once
// What a model loader reads, from either format: a Hugging Face folder (config.json plus
// safetensors) or one GGUF file. A GGUF file is translated here, once, into the same two
// things: a config in Hugging Face's config.json shape and tensors under Hugging Face names,
// so each model family keeps one loader and one name table.
//
// GGUF specifics handled here:
// - names: `blk.N.attn_q.weight` -> `model.layers.N.self_attn.q_proj.weight` and so on;
// - llama.cpp's converter reorders the q/k rows of `llama` and `eagle3` files for its rope
//   pairing: those views carry `rope_permuted_heads` and are put back in order at upload;
// - llama3 rope scaling survives only as `rope_freqs.weight` (per-frequency factors): the
//   scaling parameters are recovered from it (or read from a config.json beside the file);
// - `llama4` files lack the attention chunk size, the temperature-tuning floor and the NoPE
//   schedule: a config.json beside the file supplies them, else the documented defaults;
// - `eagle3` drafts: d2t holds absolute target ids (safetensors: offsets), tap ids under
//   `eagle3.target_layers` or `eagle3.extract_layers`.
// `notes` records every value that was defaulted or recovered, for `inspect` and the logs.
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loader/chat_template.h"
#include "loader/gguf.h"
#include "loader/safetensors.h"
#include "loader/tokenizer.h"

namespace eaglevk::loader {

struct ModelFiles {
  std::filesystem::path path;     // the folder or the .gguf file given
  std::filesystem::path folder;   // where side files live (the folder, or the file's folder)
  std::string format;             // "safetensors" or "gguf"
  nlohmann::json config;          // config.json, or one built from the GGUF metadata
  std::optional<nlohmann::json> generation_config;
  Checkpoint checkpoint;          // tensors under Hugging Face names
  std::vector<std::string> notes; // values defaulted or recovered, one sentence each
  std::shared_ptr<const GgufHeader> gguf;  // the GGUF metadata (tokenizer, inspect); null for folders
  // A vision file attached to the text model (loader/mmproj.h); empty when none.
  std::filesystem::path mmproj;
  // The image preprocessing when no preprocessor_config.json is beside the model (an mmproj's).
  std::optional<nlohmann::json> preprocessor_config;
  std::string source() const;     // "<path>" or "<path> (GGUF)" for messages
};

// Opens a model folder or a GGUF file. The GGUF architecture decides the config's shape:
// `llama` -> LlamaForCausalLM, `llama4` -> Llama4ForCausalLM, `qwen3` -> Qwen3ForCausalLM (tied
// embeddings when the file has no output.weight), `eagle3` -> an EAGLE-3 draft
// config (architectures ["LlamaForCausalLMEagle3"], `eagle_aux_hidden_state_layer_ids` at the
// top level, "eaglevk_source_format": "gguf"). Anything else is an error naming it.
ModelFiles open_model_files(const std::filesystem::path& path);

// The tokenizer of a model folder (tokenizer.json) or a GGUF file (its tokenizer.ggml.* keys,
// or a tokenizer.json beside it when the file carries none).
Tokenizer load_tokenizer(const ModelFiles& files);
// The chat template (tokenizer_config.json, or GGUF tokenizer.chat_template); nullopt when there
// is none or it is not one eaglevk renders, with the reason in `why` (only chat prompts need a
// template, and they report the reason then).
std::optional<ChatTemplate> load_chat_template(const ModelFiles& files, const Tokenizer& tokenizer,
                                               std::string* why = nullptr);

// llama3 rope scaling parameters whose factors reproduce `factors` (llama.cpp's rope_freqs:
// inv_freq / scaled inv_freq per frequency) within 1e-5 relative; nullopt when no standard
// parameter set does. Exposed for tests.
struct RecoveredRopeScaling {
  double factor, low_freq_factor, high_freq_factor;
  int original_max_position_embeddings;
};
std::optional<RecoveredRopeScaling> recover_llama3_rope_scaling(const std::vector<float>& factors, int head_dim,
                                                                double theta);

}  // namespace eaglevk::loader
