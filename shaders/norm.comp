#version 450
// Row normalisation: RMSNorm with a weight (Llama) or without one (Llama-4's QK "L2" norm,
// which divides by the RMS). y = w * (x * inversesqrt(mean(x^2) + eps)), the order HF uses.
// LAYER_NORM (the Llama-4 vision encoder's nn.LayerNorm): y = (x - mean) * inversesqrt(var +
// eps) * w + b, the biased variance taken around the mean in a second pass, as torch does.
// One workgroup per row; the reduction order depends only on the row length and the workgroup
// size (ops::norm_workgroup_for: one per device).
// ROPE_KV (ops::rope_norm_kv_write; Llama-4's rope layers with QK norm): the rows are the q and
// k heads of fused q | k | v rows (inner heads a row). Each head is rotated first (rope.comp's
// expressions, PAIRING as there), then normalised without weight in place as a plain row is (the
// same order of the sum of squares); a k head is also written to the K cache at its row's slot
// and its v head to the V cache, as kv_write.comp writes them: the bits of rope, rms_norm_heads
// and kv_write in one dispatch instead of three.
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const bool HAS_WEIGHT = true;
layout(constant_id = 2) const bool LAYER_NORM = false;
layout(constant_id = 3) const uint PAIRING = 1;  // ROPE_KV: ops::RopePairing

layout(binding = 0, std430) readonly buffer In { float x[]; };
layout(binding = 1, std430) readonly buffer Weight { float w[]; };
layout(binding = 2, std430) buffer Out { float y[]; };
layout(binding = 3, std430) readonly buffer Bias { float b[]; };

layout(push_constant) uniform Push {
  uint rows;
  uint dim;
  uint in_offset;
  uint in_stride;
  uint out_offset;
  uint out_stride;
  float eps;
  uint inner;  // sub-rows per row, dim apart (per-head norms of q and k); 1 for plain rows
#if defined(ROPE_KV)
  uint q_heads;     // of the inner heads, the first q_heads are q, the rest k (then as many v)
  uint pos_offset;  // positions and slots of row 0
  uint table_rows;  // positions in the cos/sin table
  uint slot_offset;
  uint capacity;    // rows of the caches
#endif
} p;

shared float partial[64];  // one per subgroup: ops::norm_workgroup_for keeps to 64

#if defined(ROPE_KV)
#include "common.glsl"
#include "rope_pair.glsl"
#include "shared_constants.h"
// In the bindings the weight and the bias take elsewhere (this variant reads neither), then after.
layout(binding = 1, std430) readonly buffer Pos { int positions[]; };
layout(binding = 3, std430) readonly buffer Table { vec2 cos_sin[]; };  // [table_rows][dim/2]
layout(binding = 4, std430) readonly buffer Slots { int slots[]; };
layout(binding = 5, std430) writeonly buffer KCache { uint k_cache[]; };  // [capacity][kv dim] halves
layout(binding = 6, std430) writeonly buffer VCache { uint v_cache[]; };
shared float head[ATTENTION_MAX_HEAD_DIM];  // the rotated head
#endif

// The sum of every invocation's v over the workgroup.
float workgroup_sum(float v) {
  v = subgroupAdd(v);
  if (subgroupElect()) partial[gl_SubgroupID] = v;
  barrier();
  float total = 0.0;
  for (uint s = 0; s < gl_NumSubgroups; ++s) total += partial[s];
  barrier();  // partial is reused by the next reduction
  return total;
}

#if defined(ROPE_KV)
// Element i of the head at src after rotation by rope.comp's expression (unrotated where the
// position lies outside the table, as rope.comp leaves it).
float rotated(uint src, uint i, int position) {
  if (position < 0 || uint(position) >= p.table_rows) return x[src + i];
  RopeSlot s = rope_slot(i, p.dim, PAIRING);
  vec2 cs = cos_sin[uint(position) * (p.dim / 2u) + s.freq];
  return rope_rotated(x[src + i], x[src + s.partner], s.first, cs);
}

void main() {
  uint row = gl_WorkGroupID.x;
  if (row >= p.rows) return;
  uint token = row / p.inner, h = row % p.inner;
  uint src = p.in_offset + token * p.in_stride + h * p.dim;
  int position = positions[p.pos_offset + token];
  // The plain rows' sum of squares, over the rotated head (kept for the writes: the writes of
  // other invocations must not race the partners' reads).
  float sum = 0.0;
  for (uint i = gl_LocalInvocationID.x; i < p.dim; i += gl_WorkGroupSize.x) {
    float v = rotated(src, i, position);
    head[i] = v;
    sum += v * v;
  }
  float scale = inversesqrt(workgroup_sum(sum) / float(p.dim) + p.eps);  // its barriers order head[]
  for (uint i = gl_LocalInvocationID.x; i < p.dim; i += gl_WorkGroupSize.x) y[src + i] = head[i] * scale;
  if (h < p.q_heads) return;
  int slot = slots[p.slot_offset + token];
  if (slot < 0 || uint(slot) >= p.capacity) return;
  uint kv_heads = p.inner - p.q_heads, k = h - p.q_heads, half_dim = p.dim / 2u;
  uint dst = uint(slot) * kv_heads * half_dim + k * half_dim;
  uint v_src = src + kv_heads * p.dim;  // its v head, kv_heads heads further
  for (uint j = gl_LocalInvocationID.x; j < half_dim; j += gl_WorkGroupSize.x) {
    k_cache[dst + j] = pack_half2_rne(head[2u * j] * scale, head[2u * j + 1u] * scale);
    v_cache[dst + j] = pack_half2_rne(x[v_src + 2u * j], x[v_src + 2u * j + 1u]);
  }
}

#else
void main() {
  uint row = gl_WorkGroupID.x;
  if (row >= p.rows) return;
  uint outer = row / p.inner, sub = row % p.inner;
  uint src = p.in_offset + outer * p.in_stride + sub * p.dim;
  uint dst = p.out_offset + outer * p.out_stride + sub * p.dim;
  if (LAYER_NORM) {
    float sum = 0.0;
    for (uint i = gl_LocalInvocationID.x; i < p.dim; i += gl_WorkGroupSize.x) sum += x[src + i];
    float mean = workgroup_sum(sum) / float(p.dim);
    float sq = 0.0;
    for (uint i = gl_LocalInvocationID.x; i < p.dim; i += gl_WorkGroupSize.x) {
      float d = x[src + i] - mean;
      sq += d * d;
    }
    float scale = inversesqrt(workgroup_sum(sq) / float(p.dim) + p.eps);
    for (uint i = gl_LocalInvocationID.x; i < p.dim; i += gl_WorkGroupSize.x)
      y[dst + i] = (x[src + i] - mean) * scale * w[i] + b[i];
    return;
  }
  float sum = 0.0;
  for (uint i = gl_LocalInvocationID.x; i < p.dim; i += gl_WorkGroupSize.x) sum += x[src + i] * x[src + i];
  float scale = inversesqrt(workgroup_sum(sum) / float(p.dim) + p.eps);
  for (uint i = gl_LocalInvocationID.x; i < p.dim; i += gl_WorkGroupSize.x) {
    float v = x[src + i] * scale;
    y[dst + i] = HAS_WEIGHT ? w[i] * v : v;
  }
}
#endif
