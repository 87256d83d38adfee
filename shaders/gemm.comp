#version 450
// Tiled GEMM for prefill: y[m, n] (+)= sum_k x[m, k] * W[n, k]. Each workgroup computes a
// TILE_M x TILE_N block from shared-memory tiles of x and W; each of its 128 threads an 8 x 4
// sub-block, read from the tiles as vec4s (three 16-byte shared loads per 32 products).
// Block-quantized weights (W_QUANT) are decoded into the W tile by all threads, two per
// 32-element group.
// Every output is one fma chain over k in ascending order, so any kernel that keeps that order
// gives the same bits: the TEXEL_LOADS variant (CPU devices, see common.glsl) has no shared
// memory or barriers, which cost llvmpipe more than the loads they save; each thread reads its
// 4 rows of x and 4 rows of W straight from texel buffers, 8 elements of k at a time.
// ROW_IDS (mixture-of-experts prefills): workgroup z serves expert expert_base + z, whose rows
// are listed in binding 3 (ops::group_rows_by_expert: a count, then the rows in ascending
// order); its block's rows are the list's, x and y rows are looked up there (y row r / slots;
// rows of another slot are computed but not stored), and W is that expert's, stored [N, K] or,
// K_MAJOR (float types), [K, N] as Hugging Face fuses experts. A row's outputs are the same fma
// chains as in a product of its own, so its bits do not depend on the other rows.
#define X_BINDING 0
#define WEIGHT_BINDING 1
#if defined(ROW_IDS)
#define IQ_GRID_BINDING 4  // the lattice formats' grid, after the row lists
#else
#define IQ_GRID_BINDING 3
#endif
#include "common.glsl"
#if defined(TEXEL_LOADS)
layout(local_size_x = 8, local_size_y = 8) in;
#else
layout(local_size_x = 16, local_size_y = 8) in;
#endif

#define TILE_M 64
#define TILE_N 64
#if defined(W_QUANT)
#define TILE_K QGROUP  // K is a whole number of blocks: no partial tiles along k
#else
#define TILE_K 16
#endif

layout(binding = 2, std430) buffer Y { float y[]; };
#if defined(ROW_IDS)
layout(binding = 3, std430) readonly buffer Lists { int lists[]; };
layout(constant_id = 0) const bool K_MAJOR = false;
#endif

layout(push_constant) uniform Push {
  uint K;
  uint N;
  uint M;
  uint x_offset;
  uint x_stride;
  uint y_offset;
  uint y_stride;
  uint accumulate;
#if defined(ROW_IDS)
  uint slots;          // rows per y row (experts per token); this dispatch stores slot `slot`
  uint slot;
  uint expert_base;    // the first bound expert; workgroup z serves expert_base + z
  uint expert_stride;  // bytes between consecutive bound experts
  uint lists_offset;   // elements: where expert 0's list starts
  uint list_stride;    // elements between experts' lists
#endif
} p;

#include "gemm_rows.glsl"

#if defined(TEXEL_LOADS)
// Thread (tx, ty) of a workgroup computes rows m0 + ty + 8i and outputs n0 + tx + 8j (i, j < 4)
// of a 32 x 32 block; out-of-range rows and outputs read a valid one and are not stored.
void main() {
  uint m0 = gl_WorkGroupID.y * 32u, n0 = gl_WorkGroupID.x * 32u;
  if (!block_rows_begin(m0)) return;
  uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y;
  uint xrow[4], wrow[4];
  [[unroll]] for (uint i = 0; i < 4; ++i) {
    xrow[i] = p.x_offset + x_row(min(m0 + ty + 8u * i, row_count - 1u)) * p.x_stride;
    wrow[i] = min(n0 + tx + 8u * i, p.N - 1u);
  }
  float acc[4][4];
  [[unroll]] for (uint i = 0; i < 4; ++i) [[unroll]] for (uint j = 0; j < 4; ++j) acc[i][j] = 0.0;
#if defined(W_QUANT)
  uint row_bytes = q_row_bytes(p.K);
  for (uint g = 0; g < p.K / QGROUP; ++g) {
    QGroup q[4];
    [[unroll]] for (uint j = 0; j < 4; ++j) q[j] = q_load(w_byte_base + wrow[j] * row_bytes, g);
    [[unroll]] for (uint c = 0; c < QGROUP / 8; ++c) {
      float w[4][8];
      [[unroll]] for (uint j = 0; j < 4; ++j) q_decode8(q[j], c, w[j]);
      uint k = g * QGROUP + 8u * c;
#else
  for (uint k = 0; k < p.K; k += 8u) {  // K % 8 == 0 (checked by the host)
    {
      float w[4][8];
      [[unroll]] for (uint j = 0; j < 4; ++j) wload8_at(wrow[j], k, w[j]);
#endif
      [[unroll]] for (uint i = 0; i < 4; ++i) {
        vec4 lo = xload4(xrow[i] + k), hi = xload4(xrow[i] + k + 4u);
        float xv[8] = float[8](lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w);
        [[unroll]] for (uint j = 0; j < 4; ++j)
          [[unroll]] for (uint e = 0; e < 8; ++e) acc[i][j] = fma(xv[e], w[j][e], acc[i][j]);
      }
    }
  }
  [[unroll]] for (uint i = 0; i < 4; ++i) {
    uint m = m0 + ty + 8u * i;
    if (!row_stored(m)) continue;
    [[unroll]] for (uint j = 0; j < 4; ++j) {
      uint n = n0 + tx + 8u * j;
      if (n >= p.N) continue;
      uint yi = p.y_offset + y_row(m) * p.y_stride + n;
      y[yi] = p.accumulate != 0u ? y[yi] + acc[i][j] : acc[i][j];
    }
  }
}
#else
// Thread (tx, ty) computes rows m0 + 8 ty + i (i < 8) and outputs n0 + 4 tx + j (j < 4). The
// tiles hold four rows (or outputs) per vec4, one vec4 of padding per k, so that a thread's
// eight rows are two shared loads and its four outputs one, and stores along k spread over banks.
shared vec4 xs[TILE_K][TILE_M / 4 + 1];
shared vec4 ws[TILE_K][TILE_N / 4 + 1];

void main() {
  uint m0 = gl_WorkGroupID.y * TILE_M, n0 = gl_WorkGroupID.x * TILE_N;
  if (!block_rows_begin(m0)) return;
  uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y;
  uint tid = ty * 16u + tx;
  float acc[8][4];
  [[unroll]] for (uint i = 0; i < 8; ++i) [[unroll]] for (uint j = 0; j < 4; ++j) acc[i][j] = 0.0;

  for (uint k0 = 0; k0 < p.K; k0 += TILE_K) {
#if defined(W_QUANT)
    // 128 threads load 64 x 32 of x, sixteen elements each (16 consecutive threads a row's 64
    // bytes); thread t decodes half of W row t / 2's 32-element group.
    [[unroll]] for (uint l = 0; l < 16; ++l) {
      uint e = tid + l * 128u;
      uint row = e / TILE_K, kk = e % TILE_K, m = m0 + row;
      xs[kk][row / 4u][row % 4u] = m < row_count ? x[p.x_offset + x_row(m) * p.x_stride + k0 + kk] : 0.0;
    }
    {
      uint row = tid / 2u, part = tid % 2u, n = n0 + row;
      QGroup q = q_load(w_byte_base + min(n, p.N - 1u) * q_row_bytes(p.K), k0 / QGROUP);
      [[unroll]] for (uint c = 0; c < QGROUP / 16; ++c) {
        float w[8];
        q_decode8(q, 2u * part + c, w);
        [[unroll]] for (uint i = 0; i < 8; ++i) ws[16u * part + 8u * c + i][row / 4u][row % 4u] = n < p.N ? w[i] : 0.0;
      }
    }
#else
    // 128 threads load 64 x 16 of x and 64 x 16 of W: eight elements each.
    [[unroll]] for (uint l = 0; l < 8; ++l) {
      uint e = tid + l * 128u;
      uint row = e / TILE_K, kk = e % TILE_K;
      uint m = m0 + row, k = k0 + kk;
      xs[kk][row / 4u][row % 4u] = (m < row_count && k < p.K) ? x[p.x_offset + x_row(m) * p.x_stride + k] : 0.0;
      // W's tile along its stored rows: consecutive invocations read consecutive elements.
      uint w_row = w_k_major() ? e % TILE_N : row, w_k = w_k_major() ? e / TILE_N : kk;
      uint n = n0 + w_row;
      ws[w_k][w_row / 4u][w_row % 4u] = (n < p.N && k0 + w_k < p.K) ? wload(w_index(n, k0 + w_k)) : 0.0;
    }
#endif
    barrier();
    [[unroll]] for (uint kk = 0; kk < TILE_K; ++kk) {
      vec4 a_lo = xs[kk][2u * ty], a_hi = xs[kk][2u * ty + 1u], b = ws[kk][tx];
      [[unroll]] for (uint j = 0; j < 4; ++j) {
        [[unroll]] for (uint i = 0; i < 4; ++i) acc[i][j] = fma(a_lo[i], b[j], acc[i][j]);
        [[unroll]] for (uint i = 0; i < 4; ++i) acc[i + 4][j] = fma(a_hi[i], b[j], acc[i + 4][j]);
      }
    }
    barrier();
  }
  [[unroll]] for (uint i = 0; i < 8; ++i) {
    uint m = m0 + 8u * ty + i;
    if (!row_stored(m)) continue;
    [[unroll]] for (uint j = 0; j < 4; ++j) {
      uint n = n0 + 4u * tx + j;
      if (n >= p.N) continue;
      uint yi = p.y_offset + y_row(m) * p.y_stride + n;
      y[yi] = p.accumulate != 0u ? y[yi] + acc[i][j] : acc[i][j];
    }
  }
}
#endif
