#pragma once
// Llama-4 text model config: Llama4ForConditionalGeneration (the text model's fields under
// text_config, tensors under "language_model.") or Llama4ForCausalLM (fields at the top level or
// under text_config). The Llama fields read as hf_config.h reads them; the rest are Llama-4's.
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "loader/hf_config.h"

namespace eaglevk::loader {

struct Llama4Config {
  LlamaConfig base;               // sizes, eps, rope, vocab, eos; intermediate_size = expert width
  int intermediate_size_mlp = 0;  // dense layers
  int num_local_experts = 0;
  int num_experts_per_tok = 1;
  std::vector<bool> moe_layer;    // per layer
  std::vector<bool> rope_layer;   // per layer: true = RoPE (HF's no_rope_layers value 1)
  std::vector<bool> chunked_layer;
  int attention_chunk_size = 8192;
  bool use_qk_norm = true;
  bool attn_temperature_tuning = true;
  float floor_scale = 8192, attn_scale = 0.1f;
  std::string prefix;             // "language_model." in the multimodal checkpoint
};

// `config` is config.json (or one model_files.h built from a GGUF file); `source` names it in
// errors. No generation config is applied (apply_generation_config does that to `base`).
Llama4Config parse_llama4_config(const nlohmann::json& config, const std::string& source);

}  // namespace eaglevk::loader
