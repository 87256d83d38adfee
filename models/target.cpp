#include "models/target.h"

#include <algorithm>

namespace eaglevk::models {

const loader::LlamaConfig& TargetModel::config() const {
  return std::visit([](const auto& m) -> const loader::LlamaConfig& { return shared_config(m); }, family);
}

ops::WeightMatrix TargetModel::embed() const {
  return std::visit([](const auto& m) { return m.embed.matrix(); }, family);
}

ops::WeightMatrix TargetModel::lm_head() const {
  return std::visit([](const auto& m) { return m.lm_head_matrix(); }, family);
}

TargetShape TargetModel::shape() const {
  return std::visit(
      [](const auto& m) {
        TargetShape t = target_shape(m);
        t.first_layer = m.range.first;
        t.end_layer = m.range.end;
        return t;
      },
      family);
}

LayerRange TargetModel::range() const {
  return std::visit([](const auto& m) { return m.range; }, family);
}

uint64_t TargetModel::weight_bytes() const {
  return std::visit([](const auto& m) { return m.weight_bytes; }, family);
}

uint64_t TargetModel::parameters() const {
  return std::visit([](const auto& m) { return m.parameters; }, family);
}

std::string TargetModel::architecture() const { return config().architecture; }

TargetModel load_target(const vk::Context& ctx, const std::filesystem::path& path) {
  return load_target(ctx, loader::open_model_files(path));
}

TargetModel load_target(const vk::Context& ctx, const loader::ModelFiles& files, const WeightPlacement& placement) {
  return target_family(files).load(ctx, files, placement);
}

uint64_t ExpertTraffic::bytes_per_pass_bound(uint32_t rows) const {
  const uint64_t touched = std::min<uint64_t>(experts, uint64_t(rows) * experts_per_token);
  return uint64_t(moe_layers) * touched * bytes_per_expert;
}

ExpertTraffic expert_traffic(const TargetModel& m) {
  ExpertTraffic t;
  const auto* llama4 = std::get_if<Llama4Model>(&m.family);
  if (!llama4) return t;
  for (const Llama4Layer& layer : llama4->layers) {
    if (layer.experts_gate_up.buffers.empty()) continue;
    const uint64_t per = layer.experts_gate_up.weights().expert_bytes() + layer.experts_down.weights().expert_bytes();
    ++t.moe_layers;
    t.experts = layer.experts_gate_up.experts;
    t.experts_per_token = uint32_t(llama4->config.num_experts_per_tok);
    t.bytes_per_expert = std::max(t.bytes_per_expert, per);
    t.bytes += per * t.experts;
    for (const ExpertTensor* x : {&layer.experts_gate_up, &layer.experts_down})
      if (std::all_of(x->buffers.begin(), x->buffers.end(),
                      [](const vk::Buffer& b) { return b.kind == vk::MemoryKind::HostWeights; }))
        t.host_bytes += x->weights().expert_bytes() * x->experts;
  }
  return t;
}

TargetPlanConfig read_target_config(const loader::ModelFiles& files) { return target_family(files).read_config(files); }

std::vector<ForwardPass> arena_passes(const TargetState& s) {
  // What changes which activations a pass touches, and when: its row count (matrix-vector
  // kernels or the GEMM, where the SwiGLU and norm folds differ), the batch-invariant path, and
  // the context (attention split in two dispatches past split_keys keys, or not). Taps, trees,
  // the slots of several sequences and image rows touch no activation other than x, which
  // lives through the pass.
  std::vector<ForwardPass> passes;
  for (uint32_t rows : {s.max_rows, 1u})
    for (uint32_t kv_len : {std::min(rows, s.capacity), std::min(s.capacity, std::max(rows, s.split_keys + 1))})
      for (bool batch_invariant : {false, true}) {
        ForwardPass p;
        p.rows = rows;
        p.kv_len = kv_len;
        p.logits_from = rows - std::min(rows, s.logits_rows);
        p.batch_invariant = batch_invariant;
        passes.push_back(p);
      }
  return passes;
}

std::vector<vk::CommandLog> record_target_arena_passes(ops::Gpu& gpu, const TargetModel& m, TargetState& s) {
  vk::Recorder rec(gpu.ctx, vk::Recorder::Dry{});
  vk::DeferredPipelines deferred(gpu.pipelines);  // the dry recorder needs interfaces only
  ops::OpContext oc{gpu, rec};
  std::vector<vk::CommandLog> logs;
  for (const ForwardPass& pass : arena_passes(s)) {
    rec.log = &logs.emplace_back();
    rec.begin();
    record_target_forward(oc, m, s, pass);
  }
  return logs;
}

void derive_target_arena(ops::Gpu& gpu, const TargetModel& m, TargetState& s) {
  s.arena.lay_out_dry(gpu.ctx, "activations (dry)");
  for (const vk::CommandLog& log : record_target_arena_passes(gpu, m, s)) s.arena.plan.derive(s.arena.buffer, log);
}

TargetState make_target_state(ops::Gpu& gpu, const TargetModel& m, uint32_t capacity, uint32_t max_rows,
                              bool arena_reuse) {
  TargetState s = make_target_state(gpu.ctx, m.shape(), capacity, max_rows);
  derive_target_arena(gpu, m, s);
  s.arena.allocate(gpu.ctx, arena_reuse, "activations");
  return s;
}

uint64_t target_arena_bytes(ops::Gpu& gpu, const TargetModel& m, uint32_t max_rows, bool arena_reuse) {
  vk::DryAllocations dry;
  // A context long enough for the split attention, as a real one will be (the state is dry).
  const uint32_t capacity = std::max(64u, ops::attention_split_keys(gpu.ctx) + 64);
  return make_target_state(gpu, m, capacity, max_rows, arena_reuse).arena.plan.total_bytes;
}

void record_target_forward(ops::OpContext& oc, const TargetModel& m, TargetState& s, const ForwardPass& pass) {
  std::visit([&](const auto& family) { record_target_forward(oc, family, s, pass); }, m.family);
}

}  // namespace eaglevk::models
