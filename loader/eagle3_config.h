#pragma once
// The EAGLE-3 draft head's config.json, in its three source shapes: the original layout
// (LlamaForCausalLMEagle3), the speculators layout (speculators_model_type "eagle3" with a
// transformer_layer_config) and the config that model_files.h builds from a GGUF eagle3 file.
// Host-only (no Vulkan), so that tests and the fuzzer read it as the model loader does.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "loader/hf_config.h"

namespace eaglevk::loader {

struct Eagle3Config {
  std::string format;               // "eagle3" (original), "speculators" or "gguf"
  LlamaConfig layer;                // the decoder layer's sizes, norm eps and rope (the head's own)
  int draft_vocab_size = 0;         // Vd
  int target_vocab_size = 0;        // V the head was trained against
  int target_hidden_size = 0;       // Ht (equals layer.hidden_size unless the head says otherwise)
  bool norm_before_residual = false;
  std::vector<uint32_t> aux_layers;  // canonical tap ids (residual stream entering layer j); empty: default
  std::string aux_layers_rule;       // how the configured ids were read (logged when they are used)
};

// Tap ids by source format (engines disagree on what a configured id means):
//   speculators `eagle_aux_hidden_state_layer_ids` and GGUF `eagle3.target_layers` /
//   `extract_layers`: the residual stream entering layer i (vLLM, speculators, llama.cpp),
//   used as given;
//   original-layout configs with `eagle_config.eagle_aux_hidden_state_layer_ids` (NVIDIA
//   ModelOpt exports, served by SGLang): the output of layer i, i.e. the stream entering
//   layer i + 1, so each id gets + 1 (the Maverick head's [1, 23, 44] taps 2, 24, 45);
//   a top-level `eagle_aux_hidden_state_layer_ids` in an original-layout config: as given;
//   no ids: the family default (2, L/2, L-3).
// An id must be an integer in 0..2^32-1 (after the + 1); the model loader checks it against the
// target's layer count. `source` names the config in errors.
Eagle3Config parse_eagle3_config(const nlohmann::json& config, const std::string& source);

}  // namespace eaglevk::loader
