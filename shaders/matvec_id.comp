#version 450
// Indexed matrix-vector product for mixture-of-experts layers (in the spirit of ggml's
// mul_mat_id): row r is multiplied by the weights of expert ids[r]:
//   y[r / slots, n] (+)= sum_k x[r, k] * W[ids[r], n, k]     for rows r with r % slots == slot
// Experts [expert_base, expert_base + expert_count) are bound; other rows are skipped. One
// workgroup (one subgroup) per (OUTS outputs, row): each row's reduction order is fixed, so
// results do not depend on how many rows share the dispatch.
// K_MAJOR (float types): the bound experts are stored [E, K, N] as Hugging Face fuses them
// (used as x W), read in place; one invocation per output accumulates over k in order, so the
// reads of a workgroup are consecutive along n. The host binds row chunks of k and
// accumulates the chunks. The TEXEL_LOADS variant reads x and W through texel buffers (see
// common.glsl) and adds in the same order.
#extension GL_KHR_shader_subgroup_arithmetic : require
#define X_BINDING 0
#define WEIGHT_BINDING 1
#include "common.glsl"
#include "shared_constants.h"
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint OUTS = 1;
layout(constant_id = 2) const bool ONE_SUBGROUP = false;  // see matvec.comp
layout(constant_id = 3) const bool K_MAJOR = false;

layout(binding = 2, std430) buffer Y { float y[]; };
layout(binding = 3, std430) readonly buffer Ids { int ids[]; };

layout(push_constant) uniform Push {
  uint K;
  uint N;              // outputs in the bound weight rows
  uint rows;
  uint x_offset;
  uint x_stride;
  uint y_offset;
  uint y_stride;
  uint accumulate;
  uint slots;          // rows per output row (experts per token)
  uint slot;           // which slot this dispatch handles
  uint expert_base;
  uint expert_count;
  uint expert_stride;  // bytes between consecutive experts' weights
  uint ids_offset;
} p;

shared float partial[OUTS][ONE_SUBGROUP ? 1 : 64];

#if !defined(W_QUANT)
void main_k_major() {
  uint r = gl_WorkGroupID.y;
  uint n = gl_WorkGroupID.x * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
  if (r >= p.rows || n >= p.N || r % p.slots != p.slot) return;
  int e = ids[p.ids_offset + r] - int(p.expert_base);
  if (e < 0 || e >= int(p.expert_count)) return;
#if defined(W_F32)
  uint w = uint(e) * (p.expert_stride / 4u) + n;
#else
  uint w = uint(e) * (p.expert_stride / 2u) + n;
#endif
  uint xi = p.x_offset + r * p.x_stride;
  float acc = 0.0;
  for (uint k = 0; k < p.K; ++k, w += p.N) acc = fma(xload(xi + k), wload(w), acc);
  uint yi = p.y_offset + (r / p.slots) * p.y_stride + n;
  y[yi] = p.accumulate != 0u ? y[yi] + acc : acc;
}
#endif

void main() {
#if !defined(W_QUANT)
  if (K_MAJOR) {
    main_k_major();
    return;
  }
#endif
  uint r = gl_WorkGroupID.y;
  uint n0 = gl_WorkGroupID.x * OUTS;
  if (r >= p.rows || n0 >= p.N || r % p.slots != p.slot) return;
  int e = ids[p.ids_offset + r] - int(p.expert_base);
  if (e < 0 || e >= int(p.expert_count)) return;
  uint outs = min(OUTS, p.N - n0);
  float acc[MATVEC_MAX_OUTS];
  [[unroll]] for (uint o = 0; o < OUTS; ++o) acc[o] = 0.0;
#if defined(KQ_ITEMS)
  // As in matvec.comp: K-quant items (quant.glsl), each row's activations loaded once.
  uint wbase = uint(e) * p.expert_stride, row_bytes = q_row_bytes(p.K);
  for (uint it = gl_LocalInvocationID.x; it < p.K / QK * KQ_ITEMS; it += gl_WorkGroupSize.x) {
    vec4 xv[4];
    float xsum[4];
    kq_load_x(p.x_offset + r * p.x_stride + (it / KQ_ITEMS) * QK, it % KQ_ITEMS, xv, xsum);
    [[unroll]] for (uint o = 0; o < OUTS; ++o)
      acc[o] = kq_dot(kq_load(wbase + (n0 + min(o, outs - 1u)) * row_bytes, it), xv, xsum, acc[o]);
  }
#elif defined(W_QUANT)
  // As in matvec.comp: a thread takes whole 32-element groups of the OUTS rows and loads each
  // eight activations once for all of them.
  uint wbase = uint(e) * p.expert_stride, row_bytes = q_row_bytes(p.K);
  for (uint g = gl_LocalInvocationID.x; g < p.K / QGROUP; g += gl_WorkGroupSize.x) {
    QGroup q[MATVEC_MAX_OUTS];
    [[unroll]] for (uint o = 0; o < OUTS; ++o) q[o] = q_load(wbase + (n0 + min(o, outs - 1u)) * row_bytes, g);
    [[unroll]] for (uint c = 0; c < QGROUP / 8; ++c) {
      uint xi = p.x_offset + r * p.x_stride + g * QGROUP + 8u * c;
      vec4 lo = xload4(xi), hi = xload4(xi + 4u);  // xi % 4 == 0 in the texel variant
      float xv[8] = float[8](lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w);
      [[unroll]] for (uint o = 0; o < OUTS; ++o) {
        float w[8];
        q_decode8(q[o], c, w);
        [[unroll]] for (uint i = 0; i < 8; ++i) acc[o] = fma(xv[i], w[i], acc[o]);
      }
    }
  }
#else
#if defined(W_F32)
  uint wbase = uint(e) * (p.expert_stride / 4u);  // in elements
#else
  uint wbase = uint(e) * (p.expert_stride / 2u);
#endif
  for (uint k = gl_LocalInvocationID.x; k < p.K; k += gl_WorkGroupSize.x) {
    float xv = xload(p.x_offset + r * p.x_stride + k);
    [[unroll]] for (uint o = 0; o < OUTS; ++o) {
      if (o >= outs) break;
      acc[o] = fma(xv, wload(wbase + (n0 + o) * p.K + k), acc[o]);
    }
  }
#endif
  [[unroll]] for (uint o = 0; o < OUTS; ++o) {
    float s = subgroupAdd(acc[o]);
    if (ONE_SUBGROUP) {
      if (subgroupElect() && o < outs) {
        uint yi = p.y_offset + (r / p.slots) * p.y_stride + n0 + o;
        y[yi] = p.accumulate != 0u ? y[yi] + s : s;
      }
    } else if (subgroupElect()) {
      partial[o][gl_SubgroupID] = s;
    }
  }
  if (!ONE_SUBGROUP) {
    barrier();
    uint o = gl_LocalInvocationID.x;
    if (o < outs) {
      float total = 0.0;
      for (uint sg = 0; sg < gl_NumSubgroups; ++sg) total += partial[o][sg];
      uint yi = p.y_offset + (r / p.slots) * p.y_stride + n0 + o;
      y[yi] = p.accumulate != 0u ? y[yi] + total : total;
    }
  }
}
