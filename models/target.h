#pragma once
// A target model of any supported family (models/family.h), chosen by config.json's
// architecture or the GGUF file's. The engine works on this; each family keeps its own weights
// struct, shape and layer body, reached through the overloads shared_config, target_shape and
// record_target_forward of its model type.
#include <filesystem>
#include <string>
#include <variant>

#include "models/family.h"
#include "models/llama3.h"
#include "models/llama4.h"
#include "models/qwen3.h"
#include "models/target_state.h"

namespace eaglevk::models {

struct TargetModel {
  std::variant<Llama3Model, Llama4Model, Qwen3Model> family;

  const loader::LlamaConfig& config() const;  // the fields every family shares
  ops::WeightMatrix embed() const;
  ops::WeightMatrix lm_head() const;
  TargetShape shape() const;
  uint64_t weight_bytes() const;  // the weights as uploaded (FP8 and 4-bit ones as eaglevk's blocks)
  uint64_t parameters() const;
  std::string architecture() const;
};

// A model folder or a GGUF file of a family in models/family.h's table; anything else is an
// error naming its architecture.
TargetModel load_target(const vk::Context& ctx, const std::filesystem::path& path);
TargetModel load_target(const vk::Context& ctx, const loader::ModelFiles& files);

// The shared config fields of a model folder or GGUF file and its widest MLP, read without
// loading any weights (memory planning). Same architecture rules as load_target.
TargetPlanConfig read_target_config(const loader::ModelFiles& files);

TargetState make_target_state(const vk::Context& ctx, const TargetModel& m, uint32_t capacity, uint32_t max_rows,
                              bool arena_reuse);
void record_target_forward(ops::OpContext& oc, const TargetModel& m, TargetState& s, const ForwardPass& pass);

}  // namespace eaglevk::models
