#include "runtime/engine/memory_plan_split.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

#include <eaglevk/error.h>

#include "loader/quant.h"
#include "models/llama4.h"
#include "models/llama4_vision.h"
#include "models/target.h"
#include "runtime/vk/arena.h"
#include "runtime/engine/layer_split.h"
#include "runtime/vk/context.h"

namespace eaglevk::engine {
namespace {

// Layer l's index from a tensor name "[prefix]model.layers.<l>.<rest>"; -1 for any other tensor.
int64_t layer_of(const std::string& name) {
  constexpr std::string_view key = "model.layers.";
  const size_t at = name.find(key);
  if (at == std::string::npos) return -1;
  int64_t l = -1;
  const char* begin = name.data() + at + key.size();
  auto [end, ec] = std::from_chars(begin, name.data() + name.size(), l);
  return ec == std::errc() && end != begin && *end == '.' ? l : -1;
}

bool is_vision(const std::string& name) {
  return name.rfind("vision_model.", 0) == 0 || name.rfind("multi_modal_projector.", 0) == 0;
}

std::string device_line(size_t d, const DeviceShare& s, uint32_t context) {
  const std::string host =
      s.host_weights ? fmt::format(" (its routed experts, {}, in host memory)", format_bytes(s.host_weights)) : "";
  return fmt::format("device {} ({}): layers {}..{}, {} of weights{} + {} of KV cache ({} tokens) + {} for activations "
                     "= {}, {} available ({})",
                     d, s.device, s.layers.first, s.layers.end - 1, format_bytes(s.device_weights()), host,
                     format_bytes(s.kv_per_token * context), context, format_bytes(s.per_pass),
                     format_bytes(s.total(context)), format_bytes(s.budget), s.budget_source);
}

// One device's routed experts by the rule of one device (plan_memory): forced, forbidden, or
// moved only when the share does not fit `context` tokens with them and does without.
void place_experts(DeviceShare& s, const ExpertsPlacementRequest& experts, uint32_t context) {
  if (experts.in_host == true) {
    s.host_weights = s.routed_experts;
    return;
  }
  if (experts.in_host == false || s.routed_experts == 0 || s.total(context) <= s.budget) return;
  DeviceShare moved = s;
  moved.host_weights = s.routed_experts;
  if (moved.total(context) > s.budget) return;  // refused with the share's numbers, experts where they are
  s.host_weights = s.routed_experts;
  s.experts_in_host_automatic = true;
}

}  // namespace

uint64_t DeviceShare::total(uint32_t context) const {
  const unsigned __int128 sum = (unsigned __int128)device_weights() + (unsigned __int128)kv_per_token * context + per_pass;
  return sum > UINT64_MAX ? UINT64_MAX : uint64_t(sum);
}

uint32_t DeviceShare::max_context() const {
  if (device_weights() + per_pass >= budget) return 0;
  const uint64_t tokens = kv_per_token ? (budget - device_weights() - per_pass) / kv_per_token : UINT32_MAX;
  return uint32_t(std::min<uint64_t>(tokens / 64 * 64, UINT32_MAX));
}

SplitMemoryPlan plan_split_memory(ops::Gpu& first, const MemoryPlan& whole, const loader::ModelFiles& target,
                                  const loader::ModelFiles* draft_files, uint32_t max_rows,
                                  std::span<const vk::Context* const> devices, std::span<const double> shares_in,
                                  const ExpertsPlacementRequest& experts) {
  const uint32_t n = uint32_t(devices.size());
  if (!shares_in.empty() && shares_in.size() != n)
    fail_setting(Setting::LayerSplit, "{} shares of the layers for {} devices: give one share per device",
                 shares_in.size(), n);
  std::vector<double> shares(shares_in.begin(), shares_in.end());
  if (shares.empty())
    for (const vk::Context* ctx : devices) shares.push_back(double(std::max<uint64_t>(ctx->memory_budget, 1)));
  const models::TargetPlanConfig config = models::read_target_config(target);
  const uint32_t L = uint32_t(config.base.num_hidden_layers);
  std::vector<models::LayerRange> ranges;
  try {
    ranges = place_layers(L, shares);
  } catch (const Error& e) {
    throw Error(e.what(), shares_in.empty() ? Setting::Devices : Setting::LayerSplit);
  }

  // Each layer's tensors, and the rest: the embeddings go with the first device (and the last
  // when lm_head is tied to them), the final norm and lm_head with the last.
  // A vision tower that loads goes with the first device, beside the embeddings its features
  // replace.
  std::vector<uint64_t> layer_bytes(L, 0), layer_experts(L, 0);
  uint64_t embed = 0, head = 0, tower = 0;
  bool tied = true;
  const bool with_tower =
      models::usable_llama4_vision(target, uint32_t(config.base.hidden_size), config.base.vocab_size, nullptr)
          .has_value();
  for (const auto& [name, t] : target.checkpoint.tensors) {
    const uint64_t bytes = loader::upload_bytes(t);
    if (is_vision(name)) {
      if (with_tower) tower += bytes;
      continue;
    }
    const int64_t l = layer_of(name);
    if (l >= 0 && l < int64_t(L)) {
      layer_bytes[size_t(l)] += bytes;
      if (models::is_llama4_routed_expert(name)) layer_experts[size_t(l)] += bytes;
    } else if (name.find("embed_tokens") != std::string::npos)
      embed += bytes;
    else
      head += bytes;
    if (name.find("lm_head") != std::string::npos) tied = false;
  }
  // K and V of one layer, f16; what the whole plan holds beyond the target's layers and
  // tensors is the draft's (its KV cache and weights), which goes with the last device.
  const uint64_t kv_layer = 4ull * uint64_t(config.base.num_key_value_heads) * uint64_t(config.base.head_dim);
  const uint64_t draft_kv = whole.kv_per_token - std::min(whole.kv_per_token, kv_layer * L);
  uint64_t target_bytes = embed + head + tower;
  for (uint64_t b : layer_bytes) target_bytes += b;
  const uint64_t draft_bytes = whole.weights - std::min(whole.weights, target_bytes);
  const bool draft = draft_kv > 0;
  const uint64_t activations =
      whole.activations ? whole.activations : activation_bytes(first, target, draft_files, max_rows);
  const uint64_t per_pass = whole.activations ? whole.per_pass : whole.per_pass + activations;

  const uint64_t last_staging = uint64_t(max_rows) * uint64_t(config.base.hidden_size) * 4 * (1 + models::kMaxHopTaps);
  // The context the placement of experts is decided for: the one asked for, else the smallest.
  const uint32_t placement_context = experts.context ? std::min(experts.context, whole.model_max_context) : 64;
  SplitMemoryPlan plan;
  for (uint32_t d = 0; d < n; ++d) {
    DeviceShare s;
    s.device = devices[d]->info.name;
    s.layers = ranges[d];
    for (uint32_t l = s.layers.first; l < s.layers.end; ++l) {
      s.weights += layer_bytes[l];
      s.routed_experts += layer_experts[l];
    }
    if (d == 0 || (d + 1 == n && (tied || draft))) s.weights += embed;
    if (d == 0) s.weights += tower;
    if (d + 1 == n) s.weights += head + draft_bytes;
    s.kv_per_token = kv_layer * (s.layers.end - s.layers.first) + (d + 1 == n ? draft_kv : 0);
    // The last device runs the whole pass's tail and the draft: the one-device figures, and the
    // staging its part's input arrives through. An earlier one, its own part's.
    s.per_pass = d + 1 == n ? per_pass + last_staging : earlier_part_per_pass(first, target, s.layers, max_rows);
    s.budget = devices[d]->memory_budget;
    s.budget_source = devices[d]->memory_budget_source;
    place_experts(s, experts, placement_context);
    plan.devices.push_back(std::move(s));
  }
  // A device that cannot hold one layer with a minimal context is named before anything else;
  // where routed experts may live in host memory, the layer's device part is what counts.
  uint64_t smallest_layer = L ? UINT64_MAX : 0;
  for (uint32_t l = 0; l < L; ++l)
    smallest_layer = std::min(smallest_layer, layer_bytes[l] - (experts.in_host != false ? layer_experts[l] : 0));
  for (uint32_t d = 0; d < n; ++d) {
    const DeviceShare& s = plan.devices[d];
    const uint64_t one_layer =
        smallest_layer + kv_layer * 64 + s.per_pass + (d == 0 ? embed + tower : 0) + (d + 1 == n ? head : 0);
    if (s.budget < one_layer)
      fail_setting(Setting::Devices,
                   "device {} ({}) has {} available ({}), less than one layer needs there ({} of weights, KV cache "
                   "and activations): leave it out of the devices or free its memory",
                   d, s.device, format_bytes(s.budget), s.budget_source, format_bytes(one_layer));
  }
  // The binding device: the smallest context.
  size_t tightest = 0;
  for (size_t d = 1; d < n; ++d)
    if (plan.devices[d].max_context() < plan.devices[tightest].max_context()) tightest = d;
  const DeviceShare& t = plan.devices[tightest];
  plan.binding = whole;
  plan.binding.weights = t.weights;
  // The binding device's own experts: the one-device plan's choice does not hold for a share,
  // and split_placement_note (not placement_note) says what the split plan moved.
  plan.binding.routed_experts = t.routed_experts;
  plan.binding.host_weights = t.host_weights;
  plan.binding.experts_in_host_automatic = plan.binding.experts_may_move = false;
  plan.binding.kv_per_token = t.kv_per_token;
  plan.binding.per_pass = t.per_pass;
  plan.binding.activations = activations;
  plan.binding.budget = t.budget;
  plan.binding.budget_source = fmt::format("{} of device {} ({})", t.budget_source, tightest, t.device);
  return plan;
}

uint64_t earlier_part_per_pass(ops::Gpu& gpu, const loader::ModelFiles& target, models::LayerRange layers,
                               uint32_t max_rows) {
  uint64_t arena = 0;
  uint32_t hidden = 0;
  {
    vk::DryAllocations dry;
    models::WeightPlacement placement;
    placement.layers = layers;
    const models::TargetModel part = models::load_target(gpu.ctx, target, placement);
    arena = models::target_arena_bytes(gpu, part, max_rows, vk::arena_reuse_from_env());
    hidden = uint32_t(part.config().hidden_size);
  }
  const uint64_t R = max_rows, H = hidden;
  // models::TargetState's hidden_out (and hidden_in after the first device), engine::SplitFront's
  // inputs (ids, positions, cache rows), cache rows on the device and tap rows.
  const uint64_t staging = R * H * 4 * (1 + models::kMaxHopTaps) * (layers.first > 0 ? 2 : 1);
  const uint64_t front = R * 3 * 4 + R * 4 + R * models::kMaxHopTaps * H * 4;
  const uint64_t scratch = ops::attention_split_keys(gpu.ctx) ? kAttentionSplitScratchBytes : 0;
  return arena + scratch + staging + front + kFixedPlanBytes;
}

uint64_t SplitMemoryPlan::host_weights() const {
  uint64_t sum = 0;
  for (const DeviceShare& s : devices) sum += s.host_weights;
  return sum;
}

uint32_t choose_split_context(const SplitMemoryPlan& plan, uint32_t requested, std::string* note) {
  const MemoryPlan& b = plan.binding;
  // One host holds every device's experts. About the setting when it was asked for, about the
  // model when the plan chose it.
  if (plan.host_weights() > b.host_budget) {
    const bool automatic = std::any_of(plan.devices.begin(), plan.devices.end(),
                                       [](const DeviceShare& s) { return s.experts_in_host_automatic; });
    throw Error(fmt::format("the routed experts to keep in host memory take {} over the devices ({}), but the host "
                            "has {} available ({}); use a smaller (quantized) file or a machine with more memory",
                            format_bytes(plan.host_weights()), describe_split(plan, requested ? requested : 64),
                            format_bytes(b.host_budget), b.host_budget_source),
                automatic ? Setting::None : Setting::ExpertsInHost);
  }
  const uint32_t fits = std::min(b.max_context_that_fits(), b.device_max_context);
  const uint32_t shown = requested ? std::min(requested, b.model_max_context) : 64;
  const bool short_somewhere = std::any_of(plan.devices.begin(), plan.devices.end(),
                                           [&](const DeviceShare& s) { return s.total(shown) > s.budget; });
  if (fits < 64 || short_somewhere) {
    // A context that does not fit is about the setting; a model that fits no context, about the files.
    const std::string advice = fits >= 64 ? fmt::format("; a context of at most {} tokens fits", fits)
                                          : std::string("; use a smaller (quantized) file, more devices or other "
                                                        "shares of the layers");
    throw Error(fmt::format("the model does not fit its devices split as they are: {}{}", describe_split(plan, shown),
                            advice),
                fits >= 64 ? Setting::Context : Setting::None);
  }
  return choose_context(b, requested, note);
}

std::string split_placement_note(const SplitMemoryPlan& plan) {
  std::string devices;
  for (size_t d = 0; d < plan.devices.size(); ++d) {
    const DeviceShare& s = plan.devices[d];
    if (!s.experts_in_host_automatic) continue;
    devices += fmt::format("{}device {} ({}, {})", devices.empty() ? "" : ", ", d, s.device,
                           format_bytes(s.host_weights));
  }
  if (devices.empty()) return {};
  return fmt::format("the share of some devices does not fit them whole: the routed experts of their layers live in "
                     "host memory, which they read over the bus: {}; {} in host memory in all",
                     devices, format_bytes(plan.host_weights()));
}

std::string describe_split(const SplitMemoryPlan& plan, uint32_t context) {
  std::string out;
  for (size_t d = 0; d < plan.devices.size(); ++d) {
    if (d) out += "; ";
    out += device_line(d, plan.devices[d], context);
  }
  return out;
}

}  // namespace eaglevk::engine
