#pragma once
// Llama-3 (LlamaForCausalLM): config, weights on the device, per-sequence state and a forward
// that records one pass for a batch of positions.
#include <cstdint>
#include <filesystem>
#include <vector>

#include "loader/hf_config.h"
#include "loader/model_files.h"
#include "models/family.h"
#include "models/target_state.h"
#include "models/weight_loading.h"
#include "runtime/ops/ops.h"

namespace eaglevk::models {

struct Llama3Layer {
  vk::Buffer attn_norm;  // [H] f32
  DeviceMatrix qkv;      // [(nh + 2 nkv) hd, H]: q_proj | k_proj | v_proj rows
  DeviceMatrix o;        // [H, nh hd]
  vk::Buffer ffn_norm;   // [H] f32
  DeviceMatrix gate_up;  // [2 I, H]: gate_proj | up_proj rows
  DeviceMatrix down;     // [H, I]
};

struct Llama3Model {
  loader::LlamaConfig config;
  DeviceMatrix embed;       // [V, H]
  std::vector<Llama3Layer> layers;
  vk::Buffer norm;          // [H] f32
  DeviceMatrix lm_head;     // [V, H]; empty buffer when tied to embed
  ops::WeightMatrix lm_head_matrix() const { return lm_head.buffer ? lm_head.matrix() : embed.matrix(); }
  // The layers this device holds (models/layer_part.h); the others' entries stay empty.
  LayerRange range;
  uint64_t weight_bytes = 0;
  uint64_t parameters = 0;
};

// From a model folder or a GGUF file (loader/model_files.h).
Llama3Model load_llama3(const vk::Context& ctx, const loader::ModelFiles& files, const WeightPlacement& placement = {});

// The pieces a family whose layer is Llama's with more (Qwen3's q/k norms) shares: layer
// `layer`'s Llama tensors (model.layers.<layer>.*), and the state sizes of such a target.
Llama3Layer load_llama3_layer(const vk::Context& ctx, vk::Uploader& up, TensorUse& use, const loader::LlamaConfig& c,
                              int layer);
TargetShape dense_target_shape(const loader::LlamaConfig& c);
Llama3Model load_llama3(const vk::Context& ctx, const std::filesystem::path& path);

// Its family row's entries (models/family.h): the config read without loading weights, the
// fields every family shares, the sizes its state is planned from, and the forward, which
// records the pass through the shared scaffold (models/forward_scaffold.h). Logits row i (of
// rows - logits_from) lands in arena[logits] row i and its argmax in out_ids[i].
loader::LlamaConfig read_llama3_config(const loader::ModelFiles& files);
inline const loader::LlamaConfig& shared_config(const Llama3Model& m) { return m.config; }
TargetShape target_shape(const Llama3Model& m);
void record_target_forward(ops::OpContext& oc, const Llama3Model& m, TargetState& s, const ForwardPass& pass);

}  // namespace eaglevk::models
