#include "runtime/engine/memory_plan.h"

#include <algorithm>

#include <fmt/format.h>

#include <eaglevk/error.h>

#include "loader/quant.h"
#include "models/eagle3.h"
#include "models/llama4_vision.h"
#include "models/target.h"
#include "runtime/ops/ops.h"
#include "runtime/vk/arena.h"

namespace eaglevk::engine {
namespace {

// The tensors a model uploads: all of them when its vision tower loads (a vision checkpoint, a
// GGUF file with its mmproj), else all but the tower's (pair B's placeholder tower stays on disk).
uint64_t tensor_bytes(const loader::Checkpoint& c, bool with_tower) {
  uint64_t sum = 0;
  for (const auto& [name, t] : c.tensors)
    if (with_tower || (name.rfind("vision_model.", 0) != 0 && name.rfind("multi_modal_projector.", 0) != 0))
      sum += loader::upload_bytes(t);  // FP8 and 4-bit weights go up as eaglevk's blocks
  return sum;
}

// Sizes a config multiplies together: each is an int of the config, so a product of three can
// pass 64 bits. Past 2^62 bytes (4 EiB) no device holds it: refused naming the config's sizes.
constexpr unsigned __int128 kMaxPlanBytes = (unsigned __int128)1 << 62;
uint64_t checked_bytes(unsigned __int128 bytes, const char* what, const loader::LlamaConfig& c) {
  if (bytes > kMaxPlanBytes)
    fail("the {} would take over 2^62 bytes ({} layers, {} attention and {} KV heads of {}, hidden size {}): the "
         "config's sizes are not a real model's",
         what, c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.hidden_size);
  return uint64_t(bytes);
}

// The arenas of the decoders: the models loaded dry (no memory, no weight read), their forwards
// recorded dry as make_target_state and make_eagle3_state record them.
uint64_t arena_bytes(ops::Gpu& gpu, const loader::ModelFiles& target, const loader::ModelFiles* draft,
                     uint32_t max_rows) {
  const bool reuse = vk::arena_reuse_from_env();
  vk::DryAllocations dry;
  const models::TargetModel t = models::load_target(gpu.ctx, target);
  uint64_t bytes = models::target_arena_bytes(gpu, t, max_rows, reuse);
  if (draft) {
    // Tap ids 0, 1, 2: the arena does not depend on them, and the ids the head's config gives
    // (or the caller overrides) are checked when it loads.
    const loader::LlamaConfig& tc = t.config();
    const std::vector<uint32_t> taps = tc.num_hidden_layers >= 2 ? std::vector<uint32_t>{0, 1, 2} : std::vector<uint32_t>{};
    bytes += models::eagle3_arena_bytes(gpu, models::load_eagle3(gpu.ctx, draft->path, tc, taps), max_rows, reuse);
  }
  return bytes;
}

}  // namespace

uint64_t activation_bytes(ops::Gpu& gpu, const loader::ModelFiles& target, const loader::ModelFiles* draft,
                          uint32_t max_rows) {
  return arena_bytes(gpu, target, draft, max_rows);
}

std::string format_bytes(uint64_t bytes) {
  if (bytes >= (1ull << 30)) return fmt::format("{:.2f} GiB", bytes / double(1ull << 30));
  if (bytes >= (1ull << 20)) return fmt::format("{:.1f} MiB", bytes / double(1ull << 20));
  return fmt::format("{:.1f} KiB", bytes / 1024.0);
}

uint64_t MemoryPlan::total(uint32_t context) const {
  const unsigned __int128 sum =
      (unsigned __int128)device_weights() + (unsigned __int128)kv_per_token * context + per_pass;
  return sum > UINT64_MAX ? UINT64_MAX : uint64_t(sum);
}

uint32_t MemoryPlan::max_context_that_fits() const {
  const uint64_t on_device = device_weights();
  if (on_device + per_pass >= budget) return 0;
  uint64_t tokens = kv_per_token ? (budget - on_device - per_pass) / kv_per_token : UINT32_MAX;
  return uint32_t(std::min<uint64_t>({tokens / 64 * 64, device_max_context, UINT32_MAX}));  // KV comes in 64s
}

MemoryPlan plan_memory(ops::Gpu& gpu, const loader::ModelFiles& target, const loader::ModelFiles* draft,
                       uint32_t max_rows, const ExpertsPlacementRequest& experts) {
  const vk::Context& ctx = gpu.ctx;
  MemoryPlan p;
  p.budget = ctx.memory_budget;
  p.budget_source = ctx.memory_budget_source;
  p.host_budget = ctx.host_memory_budget;
  p.host_budget_source = ctx.host_memory_budget_source;
  const models::TargetPlanConfig plan = models::read_target_config(target);
  p.routed_experts = plan.routed_expert_bytes;
  if (experts.in_host == true && p.routed_experts == 0)
    fail_setting(Setting::ExpertsInHost,
                 "{} has no routed experts to keep in host memory: only a mixture-of-experts model (Llama-4) has them",
                 target.source());
  p.experts_may_move = p.routed_experts > 0 && experts.in_host != false;
  if (experts.in_host == true) p.host_weights = p.routed_experts;
  const loader::LlamaConfig& c = plan.base;
  const uint64_t kv_dim = uint64_t(c.num_key_value_heads) * c.head_dim;
  p.model_max_context = uint32_t(c.max_position_embeddings);
  const bool tower = models::usable_llama4_vision(target, uint32_t(c.hidden_size), c.vocab_size, nullptr).has_value();
  p.weights = tensor_bytes(target.checkpoint, tower);
  p.kv_per_token = checked_bytes((unsigned __int128)c.num_hidden_layers * 2 * kv_dim * 2, "KV cache of one token", c);
  auto cap_by_binding = [&](uint64_t layer_kv_dim) {
    const uint32_t tokens = uint32_t(std::min<uint64_t>(UINT32_MAX, ctx.max_binding_range / (layer_kv_dim * 2) / 64 * 64));
    p.binding_max_tokens = std::min(p.binding_max_tokens, tokens);
    if (tokens < p.device_max_context) {
      p.device_max_context = tokens;
      p.context_limit_reason = fmt::format(
          "one layer's KV cache must fit one storage binding (maxStorageBufferRange), which holds {} tokens", tokens);
    }
  };
  auto cap_by_attention = [&](uint32_t head_dim) {
    const uint32_t keys = ops::attention_max_keys(ctx, head_dim) / 64 * 64;
    if (keys < p.device_max_context) {
      p.device_max_context = keys;
      p.context_limit_reason = fmt::format(
          "attention on this CPU device sees at most {} keys per row (llvmpipe stops shader loops after 65,535 "
          "iterations)",
          keys);
    }
  };
  cap_by_binding(kv_dim);
  cap_by_attention(uint32_t(c.head_dim));
  // Per pass besides the arenas: a row of logits read back, the fixed part, and with a draft the
  // taps (3 hidden rows) the target hands it and two more logits rows.
  p.per_pass = uint64_t(c.vocab_size) * 4 + kFixedPlanBytes;
  if (draft) {
    const models::Eagle3Config d = models::load_eagle3_config(*draft);
    p.weights += tensor_bytes(draft->checkpoint, false);
    p.kv_per_token += checked_bytes((unsigned __int128)4 * d.layer.num_key_value_heads * d.layer.head_dim,
                                    "draft's KV cache of one token", d.layer);
    cap_by_binding(uint64_t(d.layer.num_key_value_heads) * d.layer.head_dim);
    cap_by_attention(uint32_t(d.layer.head_dim));
    p.per_pass += checked_bytes((unsigned __int128)max_rows * 12ull * c.hidden_size, "taps of a pass", d.layer) +
                  uint64_t(c.vocab_size) * 4 * 2;
  }
  // Flash-decoding's partial states: 16 MiB a state (ops::make_attention_split_scratch; more only
  // where one row of a very long context needs more).
  if (ops::attention_split_keys(ctx)) p.per_pass += (draft ? 2 : 1) * kAttentionSplitScratchBytes;
  // The automatic choice: the routed experts go to host memory only when the whole model does
  // not fit the context asked for (the smallest, 64 tokens, when none is) and would without them.
  const uint32_t context = experts.context ? std::min(experts.context, p.model_max_context) : 64;
  auto with_host = [&](uint64_t host) {
    MemoryPlan q = p;
    q.host_weights = host;
    return q;
  };
  auto choose_placement = [&] {
    if (experts.in_host.has_value() || !p.experts_may_move) return;
    const bool whole_fits = with_host(0).total(context) <= p.budget;
    p.host_weights = !whole_fits && with_host(p.routed_experts).total(context) <= p.budget ? p.routed_experts : 0;
    p.experts_in_host_automatic = p.host_weights > 0;
  };
  choose_placement();
  // A model that does not fit even without its activations (and its routed experts, where they
  // may move) is refused with the budget message (choose_context) before anything more is read.
  if (with_host(p.experts_may_move ? p.routed_experts : p.host_weights).total(64) >= p.budget) return p;
  p.activations = arena_bytes(gpu, target, draft, max_rows);
  p.per_pass += p.activations;
  choose_placement();
  return p;
}

std::string placement_note(const MemoryPlan& p) {
  if (!p.experts_in_host_automatic) return {};
  return fmt::format("the whole model does not fit the device ({} of weights, {} available ({})): its routed "
                     "experts ({}) live in host memory, which the device reads over the bus; the rest takes {} of "
                     "the device",
                     format_bytes(p.weights), format_bytes(p.budget), p.budget_source, format_bytes(p.routed_experts),
                     format_bytes(p.device_weights()));
}

uint32_t choose_context(const MemoryPlan& p, uint32_t requested, std::string* note) {
  if (p.host_weights > p.host_budget)
    // About the setting when it was asked for, about the model when the plan chose it.
    throw Error(fmt::format("the routed experts to keep in host memory take {}, but the host has {} available ({}); "
                            "use a smaller (quantized) file or a machine with more memory",
                            format_bytes(p.host_weights), format_bytes(p.host_budget), p.host_budget_source),
                p.experts_in_host_automatic ? Setting::None : Setting::ExpertsInHost);
  const uint32_t fits = p.max_context_that_fits();
  const std::string budget = fmt::format("{} available ({})", format_bytes(p.budget), p.budget_source);
  if (fits < 64) {
    // The whole bill: weights, the KV cache of the context asked for (of the smallest one, 64
    // tokens, when none is), activations. A config with a huge layer count has small weights
    // on disk and a KV cache that alone does not fit.
    const uint32_t shown = requested ? std::min(requested, p.model_max_context) : 64;
    const unsigned __int128 kv = (unsigned __int128)p.kv_per_token * shown;
    // With routed experts that may live in host memory (or do), what the device part alone needs.
    std::string experts;
    if (p.experts_may_move || p.host_weights) {
      MemoryPlan whole = p, moved = p;
      whole.host_weights = 0;
      moved.host_weights = p.routed_experts;
      experts = fmt::format(" (the whole model needs {}; even with its routed experts, {}, in host memory the "
                            "device part needs {})",
                            format_bytes(whole.total(shown)), format_bytes(p.routed_experts),
                            format_bytes(moved.total(shown)));
    }
    fail("the model does not fit the device: {} of weights + {} of KV cache ({} tokens at {} per token) + {} for "
         "activations = {}, but {}{}; use a smaller (quantized) file or a device with more memory",
         format_bytes(p.device_weights()), format_bytes(kv > UINT64_MAX ? UINT64_MAX : uint64_t(kv)), shown,
         format_bytes(p.kv_per_token), format_bytes(p.per_pass), format_bytes(p.total(shown)), budget, experts);
  }
  const std::string& binding_limit = p.context_limit_reason;
  if (requested == 0) {
    uint32_t context = std::min(p.model_max_context, fits);
    if (note && context < p.model_max_context)
      *note = fits == p.device_max_context
                  ? fmt::format("context {} tokens: {}; the model allows {}", context, binding_limit,
                                p.model_max_context)
                  : fmt::format("context {} tokens: what fits in the device's memory ({} of weights, {} per token "
                                "of KV cache, {}); the model allows {}",
                                context, format_bytes(p.device_weights()), format_bytes(p.kv_per_token), budget,
                                p.model_max_context);
    return context;
  }
  const uint32_t context = std::min(requested, p.model_max_context);
  if (note && requested > p.model_max_context)
    *note = fmt::format("warning: a context of {} tokens was asked for, but the model allows {}: using {}", requested,
                        p.model_max_context, context);
  if (context > p.device_max_context)
    fail_setting(Setting::Context, "a context of {} tokens is too long for this device: {}", context, binding_limit);
  if (p.total(context) > p.budget)
    fail_setting(Setting::Context,
                 "a context of {} tokens does not fit the device: {} of weights + {} of KV cache ({} per token) + {} "
                 "for activations = {}, but {}; a context of at most {} fits (or use a quantized file)",
                 context, format_bytes(p.device_weights()), format_bytes(p.total(context) - p.device_weights() - p.per_pass),
                 format_bytes(p.kv_per_token), format_bytes(p.per_pass), format_bytes(p.total(context)), budget, fits);
  return context;
}

}  // namespace eaglevk::engine
