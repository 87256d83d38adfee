#pragma once
// The memory plan of a target split across devices (engine/layer_split.h): each device's layer
// range, the weights of those layers (the embeddings on the first, the final norm and lm_head on
// the last), the KV cache of its layers per token and the activations of a pass, checked against
// that device's own budget. A model that fits no device's share is refused with every device's
// numbers; a device that cannot hold even one layer is refused by name. Each device's routed
// experts may live in host memory (the one-device rule, decided per device); the host holds the
// experts of every device, so their total is checked once against the host's budget.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "loader/model_files.h"
#include "models/family.h"
#include "runtime/engine/memory_plan.h"

namespace eaglevk::engine {

struct DeviceShare {
  std::string device;            // the device's name, for messages
  models::LayerRange layers;     // resolved: end is a layer count
  uint64_t weights = 0;          // its layers' tensors as uploaded, with the embeddings / head it holds
  uint64_t routed_experts = 0;   // its layers' routed experts (part of weights; 0 for a dense model)
  uint64_t host_weights = 0;     // of weights, in host memory: its routed experts, or nothing
  bool experts_in_host_automatic = false;  // moved there because its share did not fit otherwise
  uint64_t kv_per_token = 0;     // K and V of its layers, f16
  // Activations, staging and fixed costs: the last device's are one device's plan's (the draft
  // included) and its hop staging, an earlier one's its own part's (earlier_part_per_pass).
  uint64_t per_pass = 0;
  uint64_t budget = 0;           // vk::Context::memory_budget of its device
  std::string budget_source;
  uint64_t device_weights() const { return weights - host_weights; }
  uint64_t total(uint32_t context) const;  // what the device holds (host weights apart)
  uint32_t max_context() const;  // the tokens of KV cache that fit beside the rest (64s; 0: none)
};

struct SplitMemoryPlan {
  std::vector<DeviceShare> devices;
  // The device whose context limit is the tightest, as a one-device plan (weights, KV per
  // token, per pass and budget its own): what sessions check a context against.
  MemoryPlan binding;
  uint64_t host_weights() const;  // every device's routed experts kept in host memory
};

// `whole`: plan_memory of the model (and `draft`, null for none) on the first device: its
// per-pass figures, activations included, hold for the last part (the same forward's tail over
// fewer layers, the draft beside it), whose weights and KV cache go with the last device too;
// each earlier part is charged its own (earlier_part_per_pass: no logits, no draft). `shares`
// empty: in proportion to each device's memory budget. `devices` are the contexts in layer
// order, `names` their names. `experts`: where each device's routed experts go, by the rule of
// one device (plan_memory) applied to its share: forced, forbidden, or host memory only for a
// device whose share does not fit with them and does without.
SplitMemoryPlan plan_split_memory(ops::Gpu& first, const MemoryPlan& whole, const loader::ModelFiles& target,
                                  const loader::ModelFiles* draft, uint32_t max_rows,
                                  std::span<const vk::Context* const> devices, std::span<const double> shares,
                                  const ExpertsPlacementRequest& experts = {});

// The context every device holds, as choose_context decides it for one device; a refusal names
// every device's numbers. Routed experts in host memory beyond the host's budget are refused first.
uint32_t choose_split_context(const SplitMemoryPlan& plan, uint32_t requested, std::string* note);

// The per-pass bytes of the part of a split target that holds `layers` when it is not the last:
// its arena (a dry load of those layers and dry recordings of their forward, without the final
// norm, lm_head and logits), its flash-decoding scratch, the host-visible staging its hidden
// state and tap rows leave (and, after the first device, arrive) through, the engine's inputs
// and tap rows for its passes, and the fixed part. No draft and no logits read-back: those are
// the last device's.
uint64_t earlier_part_per_pass(ops::Gpu& gpu, const loader::ModelFiles& target, models::LayerRange layers,
                               uint32_t max_rows);

// One line per device: "device 1 (llvmpipe): layers 2..3, 1.2 MiB of weights + ...", and where
// a device's routed experts live in host memory, how much.
std::string describe_split(const SplitMemoryPlan& plan, uint32_t context);

// The sentence naming the devices whose routed experts the plan moved to host memory itself;
// empty when it moved none.
std::string split_placement_note(const SplitMemoryPlan& plan);

}  // namespace eaglevk::engine
