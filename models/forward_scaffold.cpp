#include "models/forward_scaffold.h"

#include <cmath>

#include <eaglevk/error.h>

namespace eaglevk::models {

void check_pass(const TargetState& s, const ForwardPass& pass) {
  if (pass.rows == 0 || pass.rows > s.max_rows) fail("a pass of {} rows (at most {})", pass.rows, s.max_rows);
  if (pass.kv_len > s.capacity) fail("position {} is beyond the context of {}", pass.kv_len - 1, s.capacity);
}

ops::AttentionParams pass_attention(const ForwardPass& pass, const ops::AttentionSplit& split, uint32_t heads,
                                    uint32_t kv_heads, uint32_t head_dim, uint32_t chunk) {
  ops::AttentionParams params{heads, kv_heads, head_dim, pass.kv_len, chunk, 1.0f / std::sqrt(float(head_dim))};
  params.tree = pass.tree;
  params.regions = pass.slots && !pass.tree ? pass.slots : nullptr;
  params.split = &split;
  return params;
}

ops::RopeKv pass_rope_kv(const TargetState& s, const ForwardPass& pass, uint32_t layer, uint32_t heads,
                         uint32_t head_dim, ops::RopePairing pairing) {
  const ops::IntVec pos{s.positions};
  return {heads, head_dim, pos, s.rope_table, s.capacity, pairing, pass.slots ? *pass.slots : pos, s.kv_layer(layer)};
}

void record_dense_mlp(ops::OpContext& oc, const TargetState& s, const LayerPass& lp, const vk::Buffer& ffn_norm,
                      float eps, const DeviceMatrix& gate_up, const DeviceMatrix& down, uint32_t width) {
  const vk::Arena& a = s.arena;
  const uint32_t H = gate_up.cols;
  const ops::Act act(a[s.act], width);
  norm_linear_swiglu(oc, {lp.x, vk::BufferRange(ffn_norm), eps, ops::Act(a[s.ffn_norm], H), "ffn_norm"}, gate_up,
                     ops::Act(a[s.gate_up], 2 * width), act, lp.rows, width, lp.path, "gate_up");
  linear(oc, act, down, lp.x, lp.rows, /*accumulate=*/true, lp.path, "down_proj");
}

}  // namespace eaglevk::models
