#pragma once
// The target families eaglevk runs, one row each. Every place that asks "which family is this
// checkpoint" reads this table: loading, reading the config without weights (memory planning),
// the error that lists what is supported. A family is a row here plus its own file
// (models/<family>.{h,cpp}: config reading, weights struct, loader, shape and layer body on the
// shared scaffold, models/forward_scaffold.h), an alternative of TargetModel::family, and, for
// GGUF files, its name rules in the loader's GGUF table (loader/model_files.cpp: the loader
// translates GGUF into Hugging Face's names and config and may not include models/).
// docs/models.md counts the files a family touches.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "loader/hf_config.h"
#include "loader/model_files.h"
#include "runtime/vk/context.h"

namespace eaglevk::models {

struct TargetModel;

// What memory planning needs of a target before any weight is loaded.
struct TargetPlanConfig {
  loader::LlamaConfig base;  // the fields every family shares (generation config as the loader applies it)
  uint32_t ffn_width = 0;    // the widest dense MLP (TargetShape::ffn_width)
  // The routed experts' weights as uploaded (Llama-4's mixture-of-experts layers; 0 for a
  // dense model): what WeightPlacement::experts_in_host moves to host memory.
  uint64_t routed_expert_bytes = 0;
};

// Layers [first, end) of a target: the part of a model split across devices that one device
// holds (the embeddings with the part that starts at 0, the final norm and lm_head with the one
// that ends at the last layer). end 0: up to the last layer; the default is the whole model.
struct LayerRange {
  uint32_t first = 0, end = 0;
  uint32_t end_of(uint32_t layers) const { return end ? end : layers; }
  bool whole(uint32_t layers) const { return first == 0 && end_of(layers) == layers; }
};

// Where a target's weights live. Everything is device-local unless a field says otherwise.
struct WeightPlacement {
  // The routed experts in host-visible system memory (vk::MemoryKind::HostWeights), read by
  // the expert kernels in place over the bus; a model without routed experts ignores it.
  bool experts_in_host = false;
  // The layers this device loads; the checkpoint's other layers are left to other devices.
  LayerRange layers = {};
  // Load the embeddings even when the range does not start at 0: the EAGLE-3 draft on the
  // last device embeds its tokens with the target's table.
  bool embed_always = false;
};

struct TargetFamily {
  const char* name;                             // "llama3", "llama4", "qwen3"
  std::span<const char* const> hf_architectures;  // config.json architectures[0] values
  const char* gguf_architecture;                // GGUF general.architecture (opened as the first HF name)
  TargetPlanConfig (*read_config)(const loader::ModelFiles& files);
  TargetModel (*load)(const vk::Context& ctx, const loader::ModelFiles& files, const WeightPlacement& placement);
};

std::span<const TargetFamily> target_families();

// The row whose hf_architectures hold config.json's architectures[0]; nullptr when none does.
const TargetFamily* find_target_family(std::string_view hf_architecture);
// The same for a model folder or GGUF file; an error naming the architecture and listing the
// supported ones when no row has it (and saying so when it is an EAGLE-3 draft).
const TargetFamily& target_family(const loader::ModelFiles& files);

// "LlamaForCausalLM, Llama4ForConditionalGeneration, ..." for messages.
std::string supported_architectures();

}  // namespace eaglevk::models
