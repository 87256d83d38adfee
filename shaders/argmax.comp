#version 450
// Argmax per row over vocabularies of any size; ties go to the lowest index (torch, numpy).
// HAS_D2T maps a draft-vocabulary winner to the target vocabulary: id + d2t[id].
// A row holding a NaN or an infinity gets NON_FINITE_ROW_ID, unmapped.
#include "shared_constants.h"
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const bool HAS_D2T = false;

layout(binding = 0, std430) readonly buffer X { float x[]; };
layout(binding = 1, std430) readonly buffer D2T { int d2t[]; };
layout(binding = 2, std430) writeonly buffer Out { int ids[]; };

layout(push_constant) uniform Push {
  uint rows;
  uint n;
  uint offset;
  uint stride;
  uint out_offset;
} p;

shared float best_value[256];
shared uint best_index[256];
shared uint any_non_finite[256];

bool better(float v, uint i, float bv, uint bi) { return v > bv || (v == bv && i < bi); }
// By the bits, so that no compiler's fast-math can fold the test away.
bool non_finite(float v) { return (floatBitsToUint(v) & 0x7f800000u) == 0x7f800000u; }

void main() {
  uint row = gl_WorkGroupID.x;
  if (row >= p.rows) return;
  uint tid = gl_LocalInvocationID.x;
  uint base = p.offset + row * p.stride;
  float bv = -1.0 / 0.0;
  uint bi = 0xffffffffu;
  uint bad = 0u;
  for (uint i = tid; i < p.n; i += gl_WorkGroupSize.x) {
    float v = x[base + i];
    if (non_finite(v)) bad = 1u;
    if (better(v, i, bv, bi)) { bv = v; bi = i; }
  }
  best_value[tid] = bv;
  best_index[tid] = bi;
  any_non_finite[tid] = bad;
  barrier();
  for (uint s = gl_WorkGroupSize.x / 2u; s > 0u; s >>= 1) {
    if (tid < s && better(best_value[tid + s], best_index[tid + s], best_value[tid], best_index[tid])) {
      best_value[tid] = best_value[tid + s];
      best_index[tid] = best_index[tid + s];
    }
    if (tid < s) any_non_finite[tid] |= any_non_finite[tid + s];
    barrier();
  }
  if (tid == 0u) {
    uint id = best_index[0] == 0xffffffffu ? 0u : best_index[0];
    ids[p.out_offset + row] = any_non_finite[0] != 0u ? NON_FINITE_ROW_ID : HAS_D2T ? int(id) + d2t[id] : int(id);
  }
}
