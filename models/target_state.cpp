#include "models/target_state.h"

#include <algorithm>

#include <eaglevk/error.h>

#include "models/weight_loading.h"

namespace eaglevk::models {

ops::KvLayer TargetState::kv_layer(uint32_t layer) const {
  return ops::KvLayer{vk::BufferRange(k_cache.at(layer)), vk::BufferRange(v_cache.at(layer)), capacity, kv_dim};
}

TargetState make_target_state(const vk::Context& ctx, const TargetShape& t, uint32_t capacity, uint32_t max_rows) {
  TargetState s;
  s.capacity = (capacity + 63) / 64 * 64;
  s.max_rows = max_rows;
  s.kv_dim = t.kv_heads * t.head_dim;
  const uint64_t H = t.hidden, I = t.ffn_width, V = t.vocab, R = max_rows;
  const uint64_t q_dim = uint64_t(t.heads) * t.head_dim, qkv_dim = q_dim + 2ull * s.kv_dim;
  const uint64_t layer_bytes = uint64_t(s.capacity) * s.kv_dim * 2;
  const uint32_t end_layer = t.end_layer ? t.end_layer : t.layers;
  s.k_cache.resize(t.layers);
  s.v_cache.resize(t.layers);
  for (uint32_t l = t.first_layer; l < end_layer; ++l) {
    s.k_cache[l] = vk::Buffer(ctx, layer_bytes, vk::MemoryKind::Device, "k_cache");
    s.v_cache[l] = vk::Buffer(ctx, layer_bytes, vk::MemoryKind::Device, "v_cache");
  }
  const uint64_t hop_bytes = R * H * 4 * (1 + kMaxHopTaps);
  if (t.first_layer > 0) s.hidden_in = vk::Buffer(ctx, hop_bytes, vk::MemoryKind::Upload, "hidden_in");
  if (end_layer < t.layers) s.hidden_out = vk::Buffer(ctx, hop_bytes, vk::MemoryKind::Readback, "hidden_out");
  std::vector<float> table = ops::rope_table(t.rope_inv_freq, s.capacity);
  s.rope_table = vk::Buffer(ctx, table.size() * 4, vk::MemoryKind::Device, "rope_table");
  vk::upload(ctx, s.rope_table, table.data(), table.size() * 4);
  s.ids = vk::Buffer(ctx, R * 4, vk::MemoryKind::Device, "ids");
  s.positions = vk::Buffer(ctx, R * 4, vk::MemoryKind::Device, "positions");
  s.out_ids = vk::Buffer(ctx, R * 4, vk::MemoryKind::Device, "out_ids");
  s.accept = vk::Buffer(ctx, R * 4, vk::MemoryKind::Device, "accept");
  if (t.temperature_tuning) s.qscale = vk::Buffer(ctx, R * 4, vk::MemoryKind::Device, "qscale");
  s.split_keys = ops::attention_split_keys(ctx);
  s.split_scratch =
      ops::make_attention_split_scratch(ctx, t.heads, t.head_dim, s.capacity, max_rows, s.split_keys, "attention splits");

  // Sizes only: the lifetimes come from dry recordings of the forward (models/target.cpp,
  // derive_target_arena). The engine samples and reads back the logits after the pass.
  vk::ArenaPlan& plan = s.arena.plan;
  s.x = plan.add("x", R * H * 4);
  s.attn_norm = plan.add("attn_norm", R * H * 4);
  s.qkv = plan.add("qkv", R * qkv_dim * 4);
  s.attn = plan.add("attn", R * q_dim * 4);
  s.ffn_norm = plan.add("ffn_norm", R * H * 4);
  s.gate_up = plan.add("gate_up", R * 2 * I * 4);
  s.act = plan.add("act", R * I * 4);
  if (t.experts) {
    const uint64_t slots = R * t.experts_per_token, IE = t.expert_width;
    s.expert_ids = vk::Buffer(ctx, slots * 4, vk::MemoryKind::Device, "expert_ids");
    s.expert_rows = vk::Buffer(ctx, ops::moe_row_lists_bytes(uint32_t(slots), t.experts), vk::MemoryKind::Device,
                               "expert_rows");
    s.router = plan.add("router_logits", R * t.experts * 4);
    s.expert_in = plan.add("expert_in", slots * H * 4);
    s.expert_gate_up = plan.add("expert_gate_up", slots * 2 * IE * 4);
    s.expert_act = plan.add("expert_act", slots * IE * 4);
  }
  if (end_layer < t.layers) return s;  // an earlier part of a split model: no logits (logits_rows 0)
  s.out_norm = plan.add("out_norm", R * H * 4);
  s.logits_rows = uint32_t(std::clamp<uint64_t>(ctx.max_binding_range / (V * 4), 1, R));
  s.logits = plan.add("logits", uint64_t(s.logits_rows) * V * 4, vk::Lifetime::Output);
  return s;
}

void record_taps(ops::OpContext& oc, const ForwardPass& pass, ops::Act x, uint32_t layer, uint32_t hidden) {
  if (!pass.taps) return;
  for (size_t i = 0; i < pass.taps->layers.size(); ++i)
    if (pass.taps->layers[i] == layer)
      ops::copy_rows(oc, x, pass.taps->out.cols(uint32_t(i) * hidden), pass.rows, hidden, "tap");
}

void record_hidden_hop(ops::OpContext& oc, TargetState& s, const ForwardPass& pass, ops::Act x, uint32_t hidden,
                       bool into_x) {
  const vk::Buffer& staging = into_x ? s.hidden_in : s.hidden_out;
  if (!staging) fail("a part of a model split across devices has no staging buffer for its hidden state");
  // x is the arena's first rows, [rows, H] without gaps; the taps' rows are [rows, T H] too.
  const uint64_t bytes = uint64_t(pass.rows) * hidden * 4;
  const vk::BufferRange rows_x = x.range.sub(uint64_t(x.offset) * 4, bytes);
  if (into_x)
    oc.rec.copy(vk::BufferRange(staging, 0, bytes), rows_x, "hidden_in");
  else
    oc.rec.copy(rows_x, vk::BufferRange(staging, 0, bytes), "hidden_out");
  if (!pass.taps) return;
  const ops::Act taps = pass.taps->out;
  if (pass.taps->layers.size() > kMaxHopTaps || taps.stride > kMaxHopTaps * hidden)
    fail("a hop between devices carries at most {} tap columns, the pass asks for {}", kMaxHopTaps,
         pass.taps->layers.size());
  const uint64_t tap_bytes = uint64_t(pass.rows) * taps.stride * 4;
  const vk::BufferRange rows_taps = taps.range.sub(uint64_t(taps.offset) * 4, tap_bytes);
  const vk::BufferRange hop_taps(staging, s.hop_taps_offset(), tap_bytes);
  if (into_x)
    oc.rec.copy(hop_taps, rows_taps, "taps_in");
  else
    oc.rec.copy(rows_taps, hop_taps, "taps_out");
}

uint64_t TargetState::hop_taps_offset() const {
  // The staging holds [max_rows, H] of x, then [max_rows, kMaxHopTaps H] of taps.
  const vk::Buffer& staging = hidden_in ? hidden_in : hidden_out;
  return staging.bytes / (1 + kMaxHopTaps);
}

void record_logits(ops::OpContext& oc, TargetState& s, const ForwardPass& pass, ops::Act x, const vk::Buffer& norm,
                   const ops::WeightMatrix& lm_head, float eps) {
  const uint32_t n_logits = pass.rows - pass.logits_from, H = lm_head.cols, V = lm_head.rows;
  if (n_logits == 0) return;
  if (n_logits > s.logits_rows)
    fail("a pass asks for logits of {} rows, but {} rows of {} logits are the most one storage binding holds on "
         "this device; request fewer rows per pass",
         n_logits, s.logits_rows, V);
  const ops::MatmulPath path = pass.batch_invariant ? ops::MatmulPath::Vector : ops::MatmulPath::Auto;
  const vk::Arena& a = s.arena;
  const NormedInput in{x.row(pass.logits_from), vk::BufferRange(norm), eps, ops::Act(a[s.out_norm], H), "out_norm"};
  norm_matmul(oc, in, lm_head, ops::Act(a[s.logits], V), n_logits, path, "lm_head");
  if (pass.argmax) ops::argmax(oc, ops::Act(a[s.logits], V), n_logits, V, ops::IntVec{s.out_ids});
}

void record_input_embeddings(ops::OpContext& oc, const ForwardPass& pass, const TargetState& s,
                             const ops::WeightMatrix& embed, ops::Act x, uint32_t hidden) {
  ops::embed(oc, ops::IntVec{s.ids}, pass.rows, embed, x);
  if (!pass.embeddings) return;
  for (const EmbeddingRun& run : pass.embeddings->runs) {
    if (run.pass_row + run.rows > pass.rows) fail("image feature rows beyond a pass of {} rows", pass.rows);
    ops::copy_rows(oc, pass.embeddings->features.row(run.feature_row), x.row(run.pass_row), run.rows, hidden,
                   "image_features");
  }
}

}  // namespace eaglevk::models
