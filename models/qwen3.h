#pragma once
// Qwen3 dense (Qwen3ForCausalLM; GGUF architecture `qwen3`): a Llama layer whose q and k heads
// each pass an RMSNorm with a weight of their own ([head_dim], shared by the heads) after the
// projection and before the rotation, rotate-half RoPE, head_dim given apart from
// hidden_size / heads, and embeddings often tied to the output (tie_word_embeddings).
#include <cstdint>

#include "loader/hf_config.h"
#include "loader/model_files.h"
#include "models/llama3.h"
#include "models/target_state.h"
#include "models/weight_loading.h"
#include "runtime/ops/ops.h"

namespace eaglevk::models {

struct Qwen3Layer {
  Llama3Layer llama;     // the Llama layer's norms and products (models/llama3.h)
  vk::Buffer q_norm;     // [hd] f32, applied to every q head
  vk::Buffer k_norm;     // [hd] f32, applied to every k head
};

struct Qwen3Model {
  loader::LlamaConfig config;
  DeviceMatrix embed;    // [V, H]
  std::vector<Qwen3Layer> layers;
  vk::Buffer norm;       // [H] f32
  DeviceMatrix lm_head;  // [V, H]; empty buffer when tied to embed
  ops::WeightMatrix lm_head_matrix() const { return lm_head.buffer ? lm_head.matrix() : embed.matrix(); }
  LayerRange range;     // the layers this device holds (models/layer_part.h)
  uint64_t weight_bytes = 0;
  uint64_t parameters = 0;
};

// config.json's Llama fields (architecture Qwen3ForCausalLM); sliding-window attention, which
// no published Qwen3 dense model turns on, is refused rather than run as full attention.
loader::LlamaConfig read_qwen3_config(const loader::ModelFiles& files);
Qwen3Model load_qwen3(const vk::Context& ctx, const loader::ModelFiles& files, const WeightPlacement& placement = {});

// Its family row's entries (models/family.h), as models/llama3.h describes them.
inline const loader::LlamaConfig& shared_config(const Qwen3Model& m) { return m.config; }
TargetShape target_shape(const Qwen3Model& m);
void record_target_forward(ops::OpContext& oc, const Qwen3Model& m, TargetState& s, const ForwardPass& pass);

}  // namespace eaglevk::models
