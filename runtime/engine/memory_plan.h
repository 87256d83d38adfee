#pragma once
// What a target (and its draft) will take on the device, worked out from the files before a
// byte is uploaded: weights as stored, the KV cache per token of context, activations and
// read-back per row of a pass. Compared with the device's memory budget, it refuses what cannot
// fit with both numbers and what would fit, and picks the context when none is asked for.
#include <cstdint>
#include <optional>
#include <string>

#include "loader/model_files.h"
#include "models/family.h"
#include "runtime/ops/gpu.h"

namespace eaglevk::engine {

struct MemoryPlan {
  uint64_t weights = 0;       // target + draft tensors as the files store them (device and host)
  // The target's routed experts (part of weights; 0 for a dense model), and the bytes of
  // weights that live in host memory instead of the device: the routed experts when they are
  // placed there (models::WeightPlacement), else 0.
  uint64_t routed_experts = 0;
  uint64_t host_weights = 0;
  bool experts_in_host_automatic = false;  // placed there because the whole model did not fit
  bool experts_may_move = false;           // not forbidden: the refusal then says what the rest needs
  uint64_t host_budget = 0;                // vk::Context::host_memory_budget
  std::string host_budget_source;
  uint64_t kv_per_token = 0;  // K and V of every target layer and the draft layer, f16
  uint64_t per_pass = 0;      // activations, taps and read-back for passes of max_rows rows
  // The arenas of the target and the draft for passes of max_rows rows (part of per_pass):
  // what models::make_target_state and make_eagle3_state will allocate, from the same dry
  // recordings of the forwards (models::target_arena_bytes, eagle3_arena_bytes). 0 when the
  // model does not fit without them: it is refused then, and no dry load is made.
  uint64_t activations = 0;
  uint64_t budget = 0;        // vk::Context::memory_budget
  std::string budget_source;
  uint32_t model_max_context = 0;
  // One layer's K (or V) cache is one storage binding: maxStorageBufferRange caps the context
  // (128 MiB on lavapipe: 65,536 tokens at 8 KV heads of 128).
  // On CPU devices attention also caps it (ops::attention_max_keys).
  uint32_t device_max_context = UINT32_MAX;
  std::string context_limit_reason;  // why device_max_context is what it is
  // Tokens one layer's KV binding holds: the context times the sequences that share a cache
  // (batched decoding) must stay within it.
  uint32_t binding_max_tokens = UINT32_MAX;

  uint64_t device_weights() const { return weights - host_weights; }
  models::WeightPlacement placement() const { return {host_weights > 0}; }
  // What the device holds. Saturates at UINT64_MAX: a config's sizes can ask for more than 64
  // bits count.
  uint64_t total(uint32_t context) const;
  // The largest context that fits memory and the binding limit (0 when the weights and one
  // pass alone do not fit).
  uint32_t max_context_that_fits() const;
};

// Where the routed experts go: unset lets the plan choose (host memory only when the whole
// model does not fit the device with `context` tokens, 64 when 0, and would with them moved),
// true puts them there (a model without routed experts is refused), false keeps them on the
// device.
struct ExpertsPlacementRequest {
  std::optional<bool> in_host;
  uint32_t context = 0;
};

// Loads the models dry (vk::DryAllocations: no memory, no weight read) to record their
// forwards for the arenas' sizes.
MemoryPlan plan_memory(ops::Gpu& gpu, const loader::ModelFiles& target, const loader::ModelFiles* draft,
                       uint32_t max_rows, const ExpertsPlacementRequest& experts = {});

// The arenas (target and draft) of passes of max_rows rows, from dry loads and recordings: what
// MemoryPlan::activations holds when the model fits (a split plan needs it when it does not).
uint64_t activation_bytes(ops::Gpu& gpu, const loader::ModelFiles& target, const loader::ModelFiles* draft,
                          uint32_t max_rows);

// What a device holds besides weights, KV cache and activations (staging for uploads, pipelines,
// small buffers), and the flash-decoding partial states of one sequence state (ops::
// make_attention_split_scratch, on devices that split attention): part of every per_pass.
constexpr uint64_t kFixedPlanBytes = 96ull << 20;
constexpr uint64_t kAttentionSplitScratchBytes = 16ull << 20;

// The sentence saying where the routed experts went when the plan moved them itself; empty
// otherwise.
std::string placement_note(const MemoryPlan& plan);

// The context to run with. `requested` 0 means "the model's maximum if it fits, else what
// fits", and `note` then says which (empty when the maximum fits). A requested context above
// the model's maximum is clipped to it, with a warning in `note`. Fails with the budget message when the weights
// do not fit, or when the requested context does not.
uint32_t choose_context(const MemoryPlan& plan, uint32_t requested, std::string* note);

std::string format_bytes(uint64_t bytes);  // "14.96 GiB", "512.0 MiB"

}  // namespace eaglevk::engine
