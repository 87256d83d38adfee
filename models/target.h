#pragma once
// A target model of any supported family, chosen by config.json's architecture. The engine
// works on this; each family keeps its own weights struct and forward.
#include <filesystem>
#include <string>
#include <variant>

#include "models/llama3.h"
#include "models/llama4.h"
#include "models/target_state.h"

namespace eaglevk::models {

struct TargetModel {
  std::variant<Llama3Model, Llama4Model> family;

  const loader::LlamaConfig& config() const;  // the fields every family shares
  ops::WeightMatrix embed() const;
  ops::WeightMatrix lm_head() const;
  TargetShape shape() const;
  uint64_t weight_bytes() const;  // the weights as uploaded (FP8 and 4-bit ones as eaglevk's blocks)
  uint64_t parameters() const;
  std::string architecture() const;
};

// A model folder (config.json's architecture: LlamaForCausalLM, Llama4ForConditionalGeneration,
// Llama4ForCausalLM) or a GGUF file (`llama`, `llama4`); anything else is an error naming it.
TargetModel load_target(const vk::Context& ctx, const std::filesystem::path& path);
TargetModel load_target(const vk::Context& ctx, const loader::ModelFiles& files);

// The shared config fields of a model folder or GGUF file, read without loading any weights
// (memory planning). Same architecture rules as load_target.
loader::LlamaConfig read_target_config(const loader::ModelFiles& files);

TargetState make_target_state(const vk::Context& ctx, const TargetModel& m, uint32_t capacity, uint32_t max_rows,
                              bool arena_reuse);
void record_target_forward(ops::OpContext& oc, const TargetModel& m, TargetState& s, const ForwardPass& pass);

}  // namespace eaglevk::models
