#version 450
// Bidirectional attention inside each tile of the Llama-4 vision encoder: row r sees all `seq`
// rows of its own tile (rows [r - r % seq, ... + seq)), no mask, no GQA. q, k and v are f32
// column ranges [q | k | v] (heads * head_dim each) of fused rows. One workgroup per (row,
// head): scores of all keys in shared memory, softmax, then the weighted sum of v. Each row's
// result depends only on its tile, so tiles may be split across dispatches freely.
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "shared_constants.h"
layout(local_size_x = 64) in;

layout(binding = 0, std430) readonly buffer QKV { float qkv[]; };
layout(binding = 1, std430) writeonly buffer Out { float outv[]; };

layout(push_constant) uniform Push {
  uint rows;
  uint seq;
  uint heads;
  uint head_dim;
  uint in_offset;
  uint in_stride;
  uint out_offset;
  uint out_stride;
  float scale;
} p;

shared float sq[ATTENTION_MAX_HEAD_DIM];
shared float sp[VISION_MAX_SEQ];
shared float red[64];

float workgroup_max(float v) {
  v = subgroupMax(v);
  if (subgroupElect()) red[gl_SubgroupID] = v;
  barrier();
  float m = red[0];
  for (uint s = 1; s < gl_NumSubgroups; ++s) m = max(m, red[s]);
  barrier();
  return m;
}

float workgroup_sum(float v) {
  v = subgroupAdd(v);
  if (subgroupElect()) red[gl_SubgroupID] = v;
  barrier();
  float total = 0.0;
  for (uint s = 0; s < gl_NumSubgroups; ++s) total += red[s];
  barrier();
  return total;
}

void main() {
  const uint row = gl_WorkGroupID.x, head = gl_WorkGroupID.y, tid = gl_LocalInvocationID.x;
  if (row >= p.rows) return;
  const uint hd = p.head_dim, width = p.heads * hd;
  const uint first = row - row % p.seq;
  const uint qbase = p.in_offset + row * p.in_stride + head * hd;
  for (uint d = tid; d < hd; d += gl_WorkGroupSize.x) sq[d] = qkv[qbase + d] * p.scale;
  barrier();

  // Scores; the dot product takes 8 elements a turn (llvmpipe counts loop turns, see
  // attention.comp).
  float local_max = -3.4e38;
  for (uint j = tid; j < p.seq; j += gl_WorkGroupSize.x) {
    uint kbase = p.in_offset + (first + j) * p.in_stride + width + head * hd;
    float s = 0.0;
    for (uint d = 0; d < hd; d += 8)
      for (uint e = 0; e < 8; ++e) s += sq[d + e] * qkv[kbase + d + e];
    sp[j] = s;
    local_max = max(local_max, s);
  }
  const float m = workgroup_max(local_max);
  float local_sum = 0.0;
  for (uint j = tid; j < p.seq; j += gl_WorkGroupSize.x) {
    float e = exp(sp[j] - m);
    sp[j] = e;
    local_sum += e;
  }
  const float total = workgroup_sum(local_sum);  // its barriers also publish sp

  for (uint d = tid; d < hd; d += gl_WorkGroupSize.x) {
    uint vcol = p.in_offset + first * p.in_stride + 2u * width + head * hd + d;
    float acc = 0.0;
    for (uint j = 0; j < p.seq; ++j) acc += sp[j] * qkv[vcol + j * p.in_stride];
    outv[p.out_offset + row * p.out_stride + head * hd + d] = acc / total;
  }
}
