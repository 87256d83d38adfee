#pragma once
// A target model of any supported family (models/family.h), chosen by config.json's
// architecture or the GGUF file's. The engine works on this; each family keeps its own weights
// struct, shape and layer body, reached through the overloads shared_config, target_shape and
// record_target_forward of its model type.
#include <filesystem>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "models/family.h"
#include "models/llama3.h"
#include "models/llama4.h"
#include "models/qwen3.h"
#include "models/target_state.h"

namespace eaglevk::models {

struct TargetPart;

struct TargetModel {
  std::variant<Llama3Model, Llama4Model, Qwen3Model> family;
  // A model split across devices (layers on several vk::Contexts): this model holds the last
  // layer range, the final norm and lm_head (what the engine's sampling and read-back use, on
  // its own device), and `earlier` the ranges before it, in layer order, each loaded on its own
  // device. Empty: every layer is here.
  std::vector<TargetPart> earlier = {};

  LayerRange range() const;  // this model's layers (resolved: end is a count)
  bool split() const { return !earlier.empty(); }

  const loader::LlamaConfig& config() const;  // the fields every family shares
  ops::WeightMatrix embed() const;
  ops::WeightMatrix lm_head() const;
  TargetShape shape() const;
  uint64_t weight_bytes() const;  // the weights as uploaded (FP8 and 4-bit ones as eaglevk's blocks)
  uint64_t parameters() const;
  std::string architecture() const;
};

// One earlier part of a split model and the device its weights and passes are on. The device
// is owned by whoever made the part (api::Model keeps every device it loaded onto).
struct TargetPart {
  ops::Gpu* gpu = nullptr;
  std::unique_ptr<TargetModel> model;
};

// A model folder or a GGUF file of a family in models/family.h's table; anything else is an
// error naming its architecture.
TargetModel load_target(const vk::Context& ctx, const std::filesystem::path& path);
TargetModel load_target(const vk::Context& ctx, const loader::ModelFiles& files, const WeightPlacement& placement = {});

// The shared config fields of a model folder or GGUF file and its widest MLP, read without
// loading any weights (memory planning). Same architecture rules as load_target.
TargetPlanConfig read_target_config(const loader::ModelFiles& files);

// The routed experts' share of the bus when they live in host memory (WeightPlacement):
// what one decode step reads of them, and how much of them there is.
struct ExpertTraffic {
  uint32_t moe_layers = 0, experts = 0, experts_per_token = 0;
  uint64_t bytes_per_expert = 0;   // one expert's gate_up and down in one layer
  uint64_t bytes = 0;              // all routed experts of all layers
  uint64_t host_bytes = 0;         // those of them in host memory
  // One row's experts: top-k per MoE layer. A pass of r rows reads each expert its rows route
  // to once per layer (ops::matmul_id), at most min(E, r k) of them.
  uint64_t bytes_per_token() const { return uint64_t(moe_layers) * experts_per_token * bytes_per_expert; }
  uint64_t bytes_per_pass_bound(uint32_t rows) const;
};
// Zero for a model without routed experts.
ExpertTraffic expert_traffic(const TargetModel& m);

// The state of one sequence (or of several sharing the cache). The arena's lifetimes are
// derived from dry recordings of m's forward (arena_passes, derive_target_arena), so that they
// follow the forward's op order, whatever it becomes.
TargetState make_target_state(ops::Gpu& gpu, const TargetModel& m, uint32_t capacity, uint32_t max_rows,
                              bool arena_reuse);
// The passes whose dry recordings the arena's lifetimes are derived from.
std::vector<ForwardPass> arena_passes(const TargetState& s);
// Records those passes dry into s (its arena as it is laid out) and returns what each touched.
std::vector<vk::CommandLog> record_target_arena_passes(ops::Gpu& gpu, const TargetModel& m, TargetState& s);
// Lays s's arena out dry and derives its tensors' conflicts from those recordings.
void derive_target_arena(ops::Gpu& gpu, const TargetModel& m, TargetState& s);
// The bytes make_target_state's arena takes, for memory planning: the same derivation on a
// state made dry (vk::DryAllocations), so m may be a dry load.
uint64_t target_arena_bytes(ops::Gpu& gpu, const TargetModel& m, uint32_t max_rows, bool arena_reuse);
void record_target_forward(ops::OpContext& oc, const TargetModel& m, TargetState& s, const ForwardPass& pass);

}  // namespace eaglevk::models
