#pragma once
// Llama-4 text model (Llama4ForConditionalGeneration's language model, or Llama4ForCausalLM):
// MoE layers with a top-k sigmoid router and a shared expert, dense layers in between, NoPE
// layers with attention temperature tuning, chunked attention and QK norm on RoPE layers,
// and Llama-4's interleaved rotary pairing.
#include <cstdint>
#include <filesystem>
#include <string_view>
#include <vector>

#include "loader/hf_config.h"
#include "loader/llama4_config.h"
#include "loader/model_files.h"
#include "models/family.h"
#include "models/llama4_vision.h"
#include "models/target_state.h"
#include "models/weight_loading.h"

namespace eaglevk::models {

// The config reading lives in the loader (loader/llama4_config.h), so that it is tested and fuzzed
// without Vulkan. This reads files.config and applies files.generation_config.
using loader::Llama4Config;
Llama4Config load_llama4_config(const loader::ModelFiles& files);

// A fused expert tensor on the device, split into as few allocations as the device's
// maxMemoryAllocationSize allows (whole experts each).
struct ExpertTensor {
  std::vector<vk::Buffer> buffers;  // buffers[i] holds experts [i * per_buffer, (i + 1) * per_buffer)
  uint32_t per_buffer = 0;
  ops::WeightType type = ops::WeightType::BF16;
  uint32_t experts = 0, rows = 0, cols = 0;  // E, N, K of ops::ExpertWeights
  bool k_major = false;                      // Hugging Face's [E, K, N], read in place
  ops::ExpertWeights weights() const;        // views made on demand (buffers move with the model)
};

struct Llama4Layer {
  vk::Buffer attn_norm;        // [H] f32
  DeviceMatrix qkv;            // [(nh + 2 nkv) hd, H]
  DeviceMatrix o;              // [H, nh hd]
  vk::Buffer ffn_norm;         // [H] f32
  // Dense layers.
  DeviceMatrix gate_up;        // [2 I_mlp, H]
  DeviceMatrix down;           // [H, I_mlp]
  // MoE layers.
  DeviceMatrix router;         // [E, H]
  DeviceMatrix shared_gate_up; // [2 I, H]
  DeviceMatrix shared_down;    // [H, I]
  ExpertTensor experts_gate_up;  // per expert [2 I, H] (gate rows, then up) or k-major [H, 2 I]
  ExpertTensor experts_down;     // per expert [H, I] or k-major [I, H]
};

struct Llama4Model {
  Llama4Config config;
  DeviceMatrix embed;     // [V, H]
  std::vector<Llama4Layer> layers;
  vk::Buffer norm;        // [H] f32
  DeviceMatrix lm_head;   // [V, H]
  uint64_t weight_bytes = 0, parameters = 0;
  // The vision tower of a multimodal checkpoint whose image token ids are real; absent for
  // text-only files, and for checkpoints that carry a tower but placeholder image ids (why).
  std::optional<Llama4Vision> vision;
  std::string no_vision_reason;
  ops::WeightMatrix lm_head_matrix() const { return lm_head.buffer ? lm_head.matrix() : embed.matrix(); }
  LayerRange range;       // the layers this device holds (models/layer_part.h)
};

// placement.experts_in_host puts every ExpertTensor's buffers in vk::MemoryKind::HostWeights.
Llama4Model load_llama4(const vk::Context& ctx, const loader::ModelFiles& files, const WeightPlacement& placement = {});
// Whether a checkpoint tensor (by its Hugging Face name, as the GGUF loader translates it) is
// routed experts' weights: `feed_forward.experts.` (fused, GGUF's per matrix, or one matrix per
// expert); the shared expert and the router are not.
bool is_llama4_routed_expert(std::string_view tensor_name);
// Their bytes as uploaded (loader::upload_bytes), for memory planning and `inspect`.
uint64_t llama4_routed_expert_bytes(const loader::Checkpoint& checkpoint);
// Its family row's entries (models/family.h), as models/llama3.h describes them.
inline const loader::LlamaConfig& shared_config(const Llama4Model& m) { return m.config.base; }
TargetShape target_shape(const Llama4Model& m);
void record_target_forward(ops::OpContext& oc, const Llama4Model& m, TargetState& s, const ForwardPass& pass);

}  // namespace eaglevk::models
