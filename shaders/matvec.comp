#version 450
// y[r, n] (+)= sum_k x[r, k] * W[n, k] for ROWS (up to MATVEC_MAX_ROWS) activation rows r.
// A workgroup computes OUTS consecutive output features; its threads stride over k, and a
// subgroup reduction (plus a fixed-order sum over subgroups when the workgroup has several)
// finishes each dot product. The order in which a row's products are added never depends on
// how many rows share the dispatch, so a verify pass of k+1 rows gives each row the bits a
// single-row decode step gives it. Block-quantized weights (W_QUANT) are decoded in place; the
// K-quants are read as items whose codes stay packed (quant.glsl).
// Float rows whose length is a multiple of 8 are read 16 bytes of weights at a time. The
// TEXEL_LOADS variant reads x and W through texel buffers (common.glsl says why) and is chosen
// only where x rows start on 4-element boundaries; it adds in the same order as this one.
// GLU (SwiGLU folded into the gate/up product): W holds the gate rows, then at row glu_up the
// up rows; a workgroup computes OUTS/2 gate rows and the OUTS/2 up rows that pair with them
// and writes y[r, j] = silu(gate_j) * up_j, by swiglu.comp's expression on the two dot
// products the plain kernel would have written: the bits of matvec then swiglu, one dispatch
// and no gate/up round trip through memory.
// NORM_WG > 0 (RMSNorm folded in front, float weights with K a multiple of 8): x holds the
// norm's input. Each workgroup forms every row's scale as norm.comp does with a workgroup of
// NORM_WG invocations, and multiplies each x element by it and by the norm's weight as it loads
// it, by norm.comp's expression: the bits of rms_norm then matvec, without the norm's dispatch
// and its round trip through memory.
// ROPE_KV (rope_kv_write folded into the q | k | v product; not with GLU or EXPERTS): a
// workgroup's outputs are whole quads, each holding two rotation pairs: elements 2j, 2j + 1 of a
// rotate-half head and their partners 2j + hd/2, 2j + 1 + hd/2; elements 4j .. 4j + 3 of an
// interleaved or a v head. The epilogue writes the q heads rotated into y, k rotated into the f16
// K cache and v into the V cache at each row's slot, and y's k and v columns as the product gives
// them, by rope.comp's expressions on the sums the product would have written: the bits of the
// product then rope_kv_write, without its dispatch. PAIRING 2 (NoPE layers) rotates nothing and
// writes the caches as kv_write.comp does, whatever the position. A dispatch covers whole heads
// of the row (a part of a matrix stored in several types covers some of them).
// EXPERTS (mixture-of-experts layers, ops::matmul_id; ggml's mul_mat_id): row r is multiplied by
// the weights of expert ids[r], and y[r / slots] (+)= for the rows r % slots == slot of this
// dispatch. Workgroup y = j leads for row j when j is the first, or the (ROWS + 1)th, ..., row of
// its expert (in this slot): it takes the next ROWS rows of that expert, so each expert's weights
// are read once per ROWS of its rows; other workgroups return. A row's sums are the same steps
// as alone, so its bits do not depend on which rows share its expert. Experts [expert_base,
// expert_base + expert_count) are bound; rows of other experts are skipped. K_MAJOR (float
// types): the bound experts are stored [E, K, N] as Hugging Face fuses them, read in place: one
// invocation per output walks k in order (reads consecutive along n); the host binds chunks of k
// and accumulates them. GLU works with EXPERTS as without (with K_MAJOR an invocation takes a gate
// column and its up column, glu_up further along each k row).
#extension GL_KHR_shader_subgroup_arithmetic : require
#define X_BINDING 0
#define WEIGHT_BINDING 1
// The lattice formats' grid, after the last buffer (block formats have no norm-weight binding).
#if defined(EXPERTS)
#define IQ_GRID_BINDING 4
#elif defined(ROPE_KV)
#define IQ_GRID_BINDING 8
#else
#define IQ_GRID_BINDING 3
#endif
#include "common.glsl"
#include "shared_constants.h"
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint OUTS = 1;
// True when the workgroup is exactly one subgroup: no shared memory or barrier is needed,
// which matters on CPU implementations (lavapipe) where barriers are expensive.
layout(constant_id = 2) const bool ONE_SUBGROUP = false;
layout(constant_id = 3) const bool GLU = false;  // OUTS even
layout(constant_id = 4) const uint NORM_WG = 0;  // the folded norm's workgroup size; 0: none
// The activation rows, 1..MATVEC_MAX_ROWS: a constant rather than a push constant so that every
// per-row loop has a known trip count. A CPU implementation (llvmpipe) runs a loop that stops at
// a run-time row count for all MATVEC_MAX_ROWS rows under an execution mask, with the
// accumulators in memory: a one-row product took 3.3x as long (docs/perf.md, 2026-11-28).
layout(constant_id = 5) const uint ROWS = 1;
layout(constant_id = 6) const bool K_MAJOR = false;  // EXPERTS, float weights

layout(constant_id = 7) const uint PAIRING = 0;   // ROPE_KV: ops::RopePairing (2: none)

layout(binding = 2, std430) buffer Y { float y[]; };
#if defined(EXPERTS)
layout(binding = 3, std430) readonly buffer Ids { int ids[]; };
vec4 nload4(uint i) { return vec4(1.0); }  // never folded
// The folded norm's weight (f32 [K]); a dummy binding without NORM_WG.
#elif defined(TEXEL_LOADS)
layout(binding = 3, rgba32f) uniform readonly imageBuffer norm_texels;
vec4 nload4(uint i) { return imageLoad(norm_texels, int(i >> 2)); }  // i % 4 == 0
#else
layout(binding = 3, std430) readonly buffer NormWeight { float norm_w[]; };
vec4 nload4(uint i) { return vec4(norm_w[i], norm_w[i + 1u], norm_w[i + 2u], norm_w[i + 3u]); }
#endif

layout(push_constant) uniform Push {
  uint K;            // input width
  uint N;            // output features in this weight chunk
  uint rows;         // ROWS (the GEMM's push layout)
  uint x_offset;
  uint x_stride;
  uint y_offset;     // element offset of y[0, 0] for this chunk
  uint y_stride;
  uint accumulate;   // 1: y += x W^T (fused residual add)
  uint glu_up;       // GLU: the first up row; N counts the gate rows (outputs)
  float eps;         // NORM_WG: the norm's epsilon
#if defined(EXPERTS)
  uint slots;          // rows per y row (experts per token)
  uint slot;           // which slot this dispatch handles
  uint expert_base;    // the first bound expert
  uint expert_count;
  uint expert_stride;  // bytes between consecutive bound experts' weights
  uint ids_offset;
#endif
#if defined(ROPE_KV)
  uint head_dim;
  uint q_dim;        // q elements of a row, rotated in y
  uint kv_dim;       // then k elements (rotated into the K cache), then as many v
  uint rope_first;   // the row element of this dispatch's weight row 0
  uint pos_offset;   // positions and slots of the dispatch's row 0
  uint table_rows;   // positions in the cos/sin table
  uint slot_offset;
  uint capacity;     // rows of the caches
#endif
} p;

#if defined(ROPE_KV)
// After the weights' binding and the norm weight's where the variant has one.
#if defined(W_QUANT)
#define ROPE_BINDING 3
#else
#define ROPE_BINDING 4
#endif
layout(binding = ROPE_BINDING, std430) readonly buffer Pos { int positions[]; };
layout(binding = ROPE_BINDING + 1, std430) readonly buffer Table { vec2 cos_sin[]; };  // [table_rows][hd/2]
layout(binding = ROPE_BINDING + 2, std430) readonly buffer Slots { int slots[]; };
layout(binding = ROPE_BINDING + 3, std430) writeonly buffer KCache { uint k_cache[]; };  // [capacity][kv_dim] halves
layout(binding = ROPE_BINDING + 4, std430) writeonly buffer VCache { uint v_cache[]; };

// The element (from rope_first) that output l of the dispatch computes: quad l / 4 of its heads.
uint rope_element(uint l) {
  uint quads = p.head_dim / 4u, u = l >> 2, i = l & 3u, head = (u / quads) * p.head_dim, j = u % quads;
  bool rotated = p.rope_first + head < p.q_dim + p.kv_dim;
  if (PAIRING == 0u && rotated) return head + 2u * j + (i & 1u) + (i >> 1) * (p.head_dim / 2u);
  return head + 4u * j + i;
}
#include "rope_pair.glsl"
#endif

// The workgroup's activation rows. Plain: rows 0..ROWS-1. EXPERTS: row_count (1..ROWS) rows of
// one expert, x_rows[i] the activation row of each (x_rows[i] for i >= row_count repeats a valid
// one and is never used), and that expert's weights from w_elem_base (float elements) or
// w_byte_base (block formats).
uint row_count = ROWS;
uint x_rows[MATVEC_MAX_ROWS];
uint w_elem_base = 0u, w_byte_base = 0u;
#if defined(EXPERTS)
bool row_live(uint r) { return r == 0u || r < row_count; }  // a leader has a row
uint x_at(uint r) { return p.x_offset + x_rows[r] * p.x_stride; }
uint y_at(uint r) { return p.y_offset + (x_rows[r] / p.slots) * p.y_stride; }
#else
bool row_live(uint r) { return true; }
uint x_at(uint r) { return p.x_offset + r * p.x_stride; }
uint y_at(uint r) { return p.y_offset + r * p.y_stride; }
#endif

#define MAX_OUTS MATVEC_MAX_OUTS
shared float partial[ROWS * OUTS][ONE_SUBGROUP ? 1 : 64];
// NORM_WG: each row's sums of the norm's subgroups (at most 64, ops::norm_workgroup_for).
shared float norm_partial[NORM_WG > 0u && !ONE_SUBGROUP ? MATVEC_MAX_ROWS * 64 : 1];
float norm_scale[MATVEC_MAX_ROWS];

// NORM_WG: norm_scale[r] = inversesqrt(mean(x_r^2) + eps), the sum of squares formed exactly as
// norm.comp forms it: invocation t of its NORM_WG adds x[t]^2, x[t + NORM_WG]^2, ... in turn; each
// subgroup sums its invocations' values; the subgroups' sums are added in order from 0. Thread
// tid plays invocations tid, tid + WG, tid + 2 WG, ..., and its subgroup plays the subgroups
// that hold them: the host folds only where the subgroup size is fixed, divides WG, and WG
// divides NORM_WG, so that invocation t's lane is t's lane here too.
void form_norm_scales() {
  uint wg = gl_WorkGroupSize.x, played = NORM_WG / wg, sg_per_wg = wg / gl_SubgroupSize;
  [[unroll]] for (uint r = 0; r < ROWS; ++r) {
    uint src = x_at(r);
    float total = 0.0;
    for (uint j = 0; j < played; ++j) {
      float sum = 0.0;
      for (uint i = gl_LocalInvocationID.x + j * wg; i < p.K; i += NORM_WG) {
        float v = xload(src + i);
        sum += v * v;
      }
      sum = subgroupAdd(sum);
      if (ONE_SUBGROUP) total += sum;  // the subgroup of invocations j WG .. j WG + WG - 1
      else if (subgroupElect()) norm_partial[r * 64u + gl_SubgroupID + j * sg_per_wg] = sum;
    }
    norm_scale[r] = total;
  }
  if (!ONE_SUBGROUP) {
    barrier();
    [[unroll]] for (uint r = 0; r < ROWS; ++r) {
      float total = 0.0;
      for (uint s = 0; s < NORM_WG / gl_SubgroupSize; ++s) total += norm_partial[r * 64u + s];
      norm_scale[r] = total;
    }
  }
  [[unroll]] for (uint r = 0; r < ROWS; ++r) {
    norm_scale[r] = inversesqrt(norm_scale[r] / float(p.K) + p.eps);
  }
}

// Every dot product's terms are added in one fixed order whatever the row count or OUTS (order
// of k; item by item for the K-quants): the steps below are the whole of the arithmetic.
#if defined(KQ_ITEMS)
// Item it of the OUTS rows (quant.glsl): each row's activations loaded once for all OUTS.
void kquant_step(KItem w[MAX_OUTS], uint it, inout float acc[MAX_OUTS][MATVEC_MAX_ROWS]) {
  uint e0 = (it / KQ_ITEMS) * QK, t = it % KQ_ITEMS;
  [[unroll]] for (uint r = 0; r < ROWS; ++r) {
    if (!row_live(r)) break;
    vec4 xv[4];
    float xsum[4];
    kq_load_x(x_at(r) + e0, t, xv, xsum);
    [[unroll]] for (uint o = 0; o < OUTS; ++o) acc[o][r] = kq_dot(w[o], xv, xsum, acc[o][r]);
  }
}
#elif defined(W_QUANT)
// Group g (32 elements) of the OUTS rows, decoded eight elements at a time.
void quant_step(QGroup q[MAX_OUTS], uint g, inout float acc[MAX_OUTS][MATVEC_MAX_ROWS]) {
  [[unroll]] for (uint c = 0; c < QGROUP / 8; ++c) {
    float w[MAX_OUTS][8];
    [[unroll]] for (uint o = 0; o < OUTS; ++o) q_decode8(q[o], c, w[o]);
    [[unroll]] for (uint r = 0; r < ROWS; ++r) {
      if (!row_live(r)) break;
      uint xi = x_at(r) + g * QGROUP + 8u * c;
      vec4 lo = xload4(xi), hi = xload4(xi + 4u);
      [[unroll]] for (uint o = 0; o < OUTS; ++o) {
        [[unroll]] for (uint i = 0; i < 4; ++i) acc[o][r] = fma(lo[i], w[o][i], acc[o][r]);
        [[unroll]] for (uint i = 0; i < 4; ++i) acc[o][r] = fma(hi[i], w[o][i + 4], acc[o][r]);
      }
    }
  }
}
#else
// Elements [k, k + 8) of the OUTS rows, whose weights are w.
void float8_step(WRaw8 w[MAX_OUTS], uint k, inout float acc[MAX_OUTS][MATVEC_MAX_ROWS]) {
  vec4 xlo[MATVEC_MAX_ROWS], xhi[MATVEC_MAX_ROWS];
  [[unroll]] for (uint r = 0; r < ROWS; ++r) {
    if (!row_live(r)) break;
    uint xi = x_at(r) + k;
    xlo[r] = xload4(xi);
    xhi[r] = xload4(xi + 4u);
  }
  if (NORM_WG > 0u) {  // norm.comp's y = w * (x * scale), element by element
    vec4 nlo = nload4(k), nhi = nload4(k + 4u);
    [[unroll]] for (uint r = 0; r < ROWS; ++r) {
      xlo[r] = nlo * (xlo[r] * norm_scale[r]);
      xhi[r] = nhi * (xhi[r] * norm_scale[r]);
    }
  }
  [[unroll]] for (uint o = 0; o < OUTS; ++o) {
    float wf[8];
    wdecode8(w[o], wf);
    [[unroll]] for (uint r = 0; r < ROWS; ++r) {
      if (!row_live(r)) break;
      float a = acc[o][r];
      [[unroll]] for (uint i = 0; i < 4; ++i) a = fma(xlo[r][i], wf[i], a);
      [[unroll]] for (uint i = 0; i < 4; ++i) a = fma(xhi[r][i], wf[i + 4], a);
      acc[o][r] = a;
    }
  }
}
#endif

// Outputs a workgroup writes: OUTS, or OUTS/2 gate-up pairs.
const uint WRITES = GLU ? OUTS / 2u : OUTS;
uint n0, outs;  // the workgroup's first output and how many it writes (fewer in the last)
#if defined(ROPE_KV)
uint rope_rows[MAX_OUTS];  // ROPE_KV: wrow(o), formed once
#endif

// Weight row of accumulator o; past the last output, a row already read (its result unused).
uint wrow(uint o) {
#if defined(ROPE_KV)
  return rope_rows[o];
#else
  if (!GLU) return n0 + min(o, outs - 1u);
  return (o < WRITES ? 0u : p.glu_up) + n0 + min(o % WRITES, outs - 1u);
#endif
}

// Writes output o of row r from its dot product(s): sums[o] (and, with GLU, sums[o + WRITES]).
void store(uint r, uint o, float dot, float up) {
  uint yi = y_at(r) + n0 + o;
  if (GLU) y[yi] = dot / (1.0 + exp(-dot)) * up;  // swiglu.comp's expression
  else y[yi] = p.accumulate != 0u ? y[yi] + dot : dot;
}

#if defined(ROPE_KV)
// Writes the quad of accumulators o .. o + 3 (OUTS is a multiple of 4) of row r from their dot
// products d, as rope_kv_write does to the product's output: rotated q heads into y; rotated k
// into the K cache and v into the V cache at the row's slot, and both unrotated into y. A row
// whose position or slot lies outside the table or the cache keeps q unrotated and writes no
// cache, as rope.comp does (the host checks positions; a wrong one must not write elsewhere).
void store_quad(uint r, uint o, vec4 d) {
  uint e0 = rope_rows[o], e2 = rope_rows[o + 2u];  // elements e0, e0 + 1, e2, e2 + 1
  uint g = p.rope_first + e0, half_dim = p.head_dim / 2u;
  int position = PAIRING == 2u ? 0 : positions[p.pos_offset + r];
  bool placed = PAIRING == 2u || (position >= 0 && uint(position) < p.table_rows);
  bool is_v = g >= p.q_dim + p.kv_dim;
  vec4 turned = d;  // d after the rotation, for q and k
  if (placed && !is_v && PAIRING != 2u) {
    // The pairs' frequencies: 2j and 2j + 1 of the head, whose pairs are (d0, d2), (d1, d3) for
    // rotate-half and (d0, d1), (d2, d3) interleaved.
    uint f = PAIRING == 0u ? g % p.head_dim : (g % p.head_dim) / 2u, t = uint(position) * half_dim + f;
    vec2 c0 = cos_sin[t], c1 = cos_sin[t + 1u];
    if (PAIRING == 0u) {
      vec2 a = rope_rotate(d.x, d.z, c0), b = rope_rotate(d.y, d.w, c1);
      turned = vec4(a.x, b.x, a.y, b.y);
    } else {
      turned = vec4(rope_rotate(d.x, d.y, c0), rope_rotate(d.z, d.w, c1));
    }
  }
  bool is_q = g < p.q_dim;
  vec4 out_y = is_q ? turned : d;
  uint yi = y_at(r);
  y[yi + e0] = out_y.x;
  y[yi + e0 + 1u] = out_y.y;
  y[yi + e2] = out_y.z;
  y[yi + e2 + 1u] = out_y.w;
  if (is_q || !placed) return;
  int slot = slots[p.slot_offset + r];
  if (slot < 0 || uint(slot) >= p.capacity) return;
  uint c = uint(slot) * (p.kv_dim / 2u) + ((g - p.q_dim - (is_v ? p.kv_dim : 0u)) >> 1), c2 = c + ((e2 - e0) >> 1);
  if (is_v) {
    v_cache[c] = pack_half2_rne(d.x, d.y);
    v_cache[c2] = pack_half2_rne(d.z, d.w);
  } else {
    k_cache[c] = pack_half2_rne(turned.x, turned.y);
    k_cache[c2] = pack_half2_rne(turned.z, turned.w);
  }
}
#endif

#if defined(EXPERTS)
// EXPERTS: whether workgroup y leads a group of its expert's rows; if so sets the rows and the
// expert's weights. Rows of this slot routed to expert e: the leader is every ROWS-th of them.
bool expert_rows_begin() {
  uint j = gl_WorkGroupID.y;
  if (j >= p.rows || j % p.slots != p.slot) return false;
  int e = ids[p.ids_offset + j];
  if (e < int(p.expert_base) || e >= int(p.expert_base + p.expert_count)) return false;
  uint before = 0u;
  for (uint r = p.slot; r < j; r += p.slots)
    if (ids[p.ids_offset + r] == e) ++before;
  if (before % ROWS != 0u) return false;
  // The rows, found in one walk; x_rows is only indexed by unrolled constants, so that it stays
  // in registers (and uniform) rather than in per-invocation memory.
  [[unroll]] for (uint i = 0; i < ROWS; ++i) x_rows[i] = j;
  row_count = 0u;
  for (uint r = j; r < p.rows && row_count < ROWS; r += p.slots) {
    if (ids[p.ids_offset + r] != e) continue;
    [[unroll]] for (uint i = 0; i < ROWS; ++i)
      if (i == row_count) x_rows[i] = r;
    ++row_count;
  }
  uint expert = uint(e) - p.expert_base;
  w_byte_base = expert * p.expert_stride;
#if defined(W_F32)
  w_elem_base = w_byte_base / 4u;
#else
  w_elem_base = w_byte_base / 2u;
#endif
  return true;
}

#if !defined(W_QUANT)
// K_MAJOR: invocation n takes output n of the workgroup's rows, over k in order.
void main_k_major() {
  uint n = gl_WorkGroupID.x * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
  if (n >= p.N) return;
  // Stored outputs per k: N, or with GLU the gate columns and then, from glu_up, the up columns.
  uint width = GLU ? p.glu_up + p.N : p.N, up_col = GLU ? p.glu_up : 0u;
  float acc[MATVEC_MAX_ROWS], up[MATVEC_MAX_ROWS];
  [[unroll]] for (uint r = 0; r < ROWS; ++r) {
    acc[r] = 0.0;
    up[r] = 0.0;
  }
  uint w = w_elem_base + n, k = 0u;
  // Four k at a time, so that the rows' checks are paid once per four products.
  for (; k + 4u <= p.K; k += 4u, w += 4u * width) {
    vec4 wv = vec4(wload(w), wload(w + width), wload(w + 2u * width), wload(w + 3u * width)), uv = vec4(0.0);
    if (GLU) {
      uint u = w + up_col;
      uv = vec4(wload(u), wload(u + width), wload(u + 2u * width), wload(u + 3u * width));
    }
    [[unroll]] for (uint r = 0; r < ROWS; ++r) {
      if (!row_live(r)) break;
      uint xi = x_at(r) + k;
      [[unroll]] for (uint i = 0; i < 4; ++i) {
        float xv = xload(xi + i);
        acc[r] = fma(xv, wv[i], acc[r]);
        if (GLU) up[r] = fma(xv, uv[i], up[r]);
      }
    }
  }
  for (; k < p.K; ++k, w += width) {
    float wv = wload(w), uv = GLU ? wload(w + up_col) : 0.0;
    [[unroll]] for (uint r = 0; r < ROWS; ++r) {
      if (!row_live(r)) break;
      float xv = xload(x_at(r) + k);
      acc[r] = fma(xv, wv, acc[r]);
      if (GLU) up[r] = fma(xv, uv, up[r]);
    }
  }
  [[unroll]] for (uint r = 0; r < ROWS; ++r) {
    if (!row_live(r)) break;
    uint yi = y_at(r) + n;
    if (GLU) y[yi] = acc[r] / (1.0 + exp(-acc[r])) * up[r];  // swiglu.comp's expression
    else y[yi] = p.accumulate != 0u ? y[yi] + acc[r] : acc[r];
  }
}
#endif
#endif

void main() {
#if !defined(TEXEL_LOADS)
  x_vec4 = ((p.x_offset | p.x_stride) & 3u) == 0u;  // every xload4 index is then a multiple of 4
#endif
#if defined(EXPERTS)
  if (!expert_rows_begin()) return;
#if !defined(W_QUANT)
  if (K_MAJOR) {
    main_k_major();
    return;
  }
#endif
  n0 = gl_WorkGroupID.x * WRITES;
#else
  n0 = (gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x) * WRITES;  // y: see ops::linear_grid
#endif
  if (n0 >= p.N) return;
  float acc[MAX_OUTS][MATVEC_MAX_ROWS];
  [[unroll]] for (uint o = 0; o < OUTS; ++o)
    [[unroll]] for (uint r = 0; r < ROWS; ++r) acc[o][r] = 0.0;
  outs = min(WRITES, p.N - n0);
#if defined(ROPE_KV)
  [[unroll]] for (uint o = 0; o < OUTS; ++o) rope_rows[o] = rope_element(n0 + min(o, outs - 1u));
#endif
  if (NORM_WG > 0u) form_norm_scales();
#if defined(KQ_ITEMS)
  // K-quants: a thread takes items (16 elements of a super-block, quant.glsl) of the OUTS rows;
  // the x values of an item are loaded once per row for all OUTS outputs.
  uint row_bytes = q_row_bytes(p.K), items = p.K / QK * KQ_ITEMS;
  for (uint it = gl_LocalInvocationID.x; it < items; it += gl_WorkGroupSize.x) {
    KItem w[MAX_OUTS];
    [[unroll]] for (uint o = 0; o < OUTS; ++o) w[o] = kq_load(w_byte_base + wrow(o) * row_bytes, it);
    kquant_step(w, it, acc);
  }
#elif defined(W_QUANT)
  // Block weights: a thread takes whole 32-element groups (a block, or a K-quant sub-block) of
  // the OUTS rows, decodes each group's scales once, then walks its elements eight at a time:
  // the eight activations of each row are loaded once for all OUTS outputs.
  uint row_bytes = q_row_bytes(p.K), groups = p.K / QGROUP;
  for (uint g = gl_LocalInvocationID.x; g < groups; g += gl_WorkGroupSize.x) {
    QGroup q[MAX_OUTS];
    [[unroll]] for (uint o = 0; o < OUTS; ++o) q[o] = q_load(w_byte_base + wrow(o) * row_bytes, g);
    quant_step(q, g, acc);
  }
#else
  if ((p.K & 7u) == 0u) {
    // Eight consecutive elements per thread and step: one 16-byte load of bf16/f16 weights
    // (two of f32).
    for (uint k = 8u * gl_LocalInvocationID.x; k < p.K; k += 8u * gl_WorkGroupSize.x) {
      WRaw8 w[MAX_OUTS];
      [[unroll]] for (uint o = 0; o < OUTS; ++o) w[o] = wraw8((w_elem_base + wrow(o) * p.K + k) >> 3);
      float8_step(w, k, acc);
    }
  } else if ((p.K & 1u) == 0u) {
    for (uint k = 2u * gl_LocalInvocationID.x; k < p.K; k += 2u * gl_WorkGroupSize.x) {
      vec2 xv[MATVEC_MAX_ROWS];
      [[unroll]] for (uint r = 0; r < ROWS; ++r) {
        if (!row_live(r)) break;
        uint xi = x_at(r) + k;
        xv[r] = vec2(xload(xi), xload(xi + 1u));
      }
      [[unroll]] for (uint o = 0; o < OUTS; ++o) {
        if (!GLU && o >= outs) break;
        vec2 w = wload2(w_elem_base + wrow(o) * p.K + k);
        [[unroll]] for (uint r = 0; r < ROWS; ++r) {
          if (!row_live(r)) break;
          acc[o][r] = fma(xv[r].y, w.y, fma(xv[r].x, w.x, acc[o][r]));
        }
      }
    }
  } else {
    for (uint k = gl_LocalInvocationID.x; k < p.K; k += gl_WorkGroupSize.x) {
      [[unroll]] for (uint o = 0; o < OUTS; ++o) {
        if (!GLU && o >= outs) break;
        float w = wload(w_elem_base + wrow(o) * p.K + k);
        [[unroll]] for (uint r = 0; r < ROWS; ++r) {
          if (!row_live(r)) break;
          acc[o][r] = fma(xload(x_at(r) + k), w, acc[o][r]);
        }
      }
    }
  }
#endif
  [[unroll]] for (uint o = 0; o < OUTS; ++o) {
    [[unroll]] for (uint r = 0; r < ROWS; ++r) {
      if (!row_live(r)) break;
      acc[o][r] = subgroupAdd(acc[o][r]);
      if (!ONE_SUBGROUP && subgroupElect()) partial[o * ROWS + r][gl_SubgroupID] = acc[o][r];
    }
  }
#if defined(ROPE_KV)
  if (ONE_SUBGROUP) {
    if (subgroupElect()) {
      [[unroll]] for (uint o = 0; o < OUTS; o += 4u) {
        if (o >= outs) break;
        [[unroll]] for (uint r = 0; r < ROWS; ++r)
          store_quad(r, o, vec4(acc[o][r], acc[o + 1u][r], acc[o + 2u][r], acc[o + 3u][r]));
      }
    }
  } else {
    barrier();
    for (uint i = gl_LocalInvocationID.x; i < OUTS / 4u * ROWS; i += gl_WorkGroupSize.x) {
      uint o = i / ROWS * 4u, r = i % ROWS;
      if (o >= outs) continue;
      vec4 d;
      for (uint q = 0; q < 4u; ++q) {
        float total = 0.0;
        for (uint s = 0; s < gl_NumSubgroups; ++s) total += partial[(o + q) * ROWS + r][s];
        d[q] = total;
      }
      store_quad(r, o, d);
    }
  }
#else
  if (ONE_SUBGROUP) {
    if (subgroupElect()) {
      [[unroll]] for (uint o = 0; o < WRITES; ++o) {
        if (o >= outs) break;
        [[unroll]] for (uint r = 0; r < ROWS; ++r) {
          if (!row_live(r)) break;
          store(r, o, acc[o][r], GLU ? acc[o + WRITES][r] : 0.0);
        }
      }
    }
  } else {
    barrier();
    for (uint i = gl_LocalInvocationID.x; i < WRITES * ROWS; i += gl_WorkGroupSize.x) {
      uint o = i / ROWS, r = i % ROWS;
      if (o >= outs || !row_live(r)) continue;
      float total = 0.0, up = 0.0;
      for (uint s = 0; s < gl_NumSubgroups; ++s) total += partial[i][s];
      if (GLU)
        for (uint s = 0; s < gl_NumSubgroups; ++s) up += partial[i + WRITES * ROWS][s];
      store(r, o, total, up);
    }
  }
#endif
}
