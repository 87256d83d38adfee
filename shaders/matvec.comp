#version 450
// y[r, n] (+)= sum_k x[r, k] * W[n, k] for up to MATVEC_MAX_ROWS activation rows r.
// One workgroup per output feature n; threads stride over k, then a subgroup reduction and a
// fixed-order sum over subgroups. The order in which a row's products are added never depends
// on how many rows share the dispatch, so a verify pass of k+1 rows gives each row the bits a
// single-row decode step gives it.
#extension GL_KHR_shader_subgroup_arithmetic : require
#define WEIGHT_BINDING 1
#include "common.glsl"
#include "shared_constants.h"
layout(local_size_x_id = 0) in;

layout(binding = 0, std430) readonly buffer X { float x[]; };
layout(binding = 2, std430) buffer Y { float y[]; };

layout(push_constant) uniform Push {
  uint K;            // input width
  uint N;            // output features in this weight chunk
  uint rows;         // activation rows, 1..MATVEC_MAX_ROWS
  uint x_offset;
  uint x_stride;
  uint y_offset;     // element offset of y[0, 0] for this chunk
  uint y_stride;
  uint accumulate;   // 1: y += x W^T (fused residual add)
} p;

shared float partial[MATVEC_MAX_ROWS][64];

void main() {
  uint n = gl_WorkGroupID.x + gl_WorkGroupID.y * 65535u;
  if (n >= p.N) return;
  float acc[MATVEC_MAX_ROWS];
  [[unroll]] for (uint r = 0; r < MATVEC_MAX_ROWS; ++r) acc[r] = 0.0;
  uint wrow = n * p.K;
  if ((p.K & 1u) == 0u) {
    for (uint k = 2u * gl_LocalInvocationID.x; k < p.K; k += 2u * gl_WorkGroupSize.x) {
      vec2 w = wload2(wrow + k);
      [[unroll]] for (uint r = 0; r < MATVEC_MAX_ROWS; ++r) {
        if (r >= p.rows) break;
        uint xi = p.x_offset + r * p.x_stride + k;
        acc[r] = fma(x[xi + 1u], w.y, fma(x[xi], w.x, acc[r]));
      }
    }
  } else {
    for (uint k = gl_LocalInvocationID.x; k < p.K; k += gl_WorkGroupSize.x) {
      float w = wload(wrow + k);
      [[unroll]] for (uint r = 0; r < MATVEC_MAX_ROWS; ++r) {
        if (r >= p.rows) break;
        acc[r] = fma(x[p.x_offset + r * p.x_stride + k], w, acc[r]);
      }
    }
  }
  [[unroll]] for (uint r = 0; r < MATVEC_MAX_ROWS; ++r) {
    if (r >= p.rows) break;
    float s = subgroupAdd(acc[r]);
    if (subgroupElect()) partial[r][gl_SubgroupID] = s;
  }
  barrier();
  if (gl_LocalInvocationID.x < p.rows) {
    uint r = gl_LocalInvocationID.x;
    float total = 0.0;
    for (uint s = 0; s < gl_NumSubgroups; ++s) total += partial[r][s];
    uint yi = p.y_offset + r * p.y_stride + n;
    y[yi] = p.accumulate != 0u ? y[yi] + total : total;
  }
}
