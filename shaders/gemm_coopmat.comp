#version 450
// Prefill GEMM on cooperative matrices (GL_KHR_cooperative_matrix: f16 A and B, f32
// accumulators): y[m, n] (+)= sum_k x[m, k] * W[n, k]. A workgroup is four subgroups in 2 x 2,
// each computing 2 x 2 of the device's MM x MN matrices, so a block of 4 MM rows by 4 MN outputs
// (64 x 64 on NVIDIA and AMD, 32 x 32 on lavapipe), staging k 32 at a time in shared memory.
//
// The f16 inputs lose nothing that matters: every f32 value v is split into hi, v with its
// mantissa cut to f16's 10 bits (exact in f16 over f16's normal range), and lo = f16((v - hi) *
// 2^10), and the block is hi_x hi_w + 2^-10 (lo_x hi_w + hi_x lo_w) (f16 weights are exact: no
// lo_w), which keeps about 21 of f32's 24 significant bits of each product; the lo terms have
// their own accumulators, so their scale costs no range. hi is cut with integer operations: an
// f16 round trip (float16_t, or packHalf2x16 then unpackHalf2x16) is an identity a compiler may
// fold away, leaving lo zero, as NVIDIA's did (the H200, 2026-11-29: f16-sized errors in the
// GPU tests). Values past f16's range (65,504) would not survive; activations entering a product sit inside it in
// the models we know (the largest, residual-stream outliers that EAGLE-3's fc reads from its
// taps, reach a few thousand in Llama models).
// Sums run in the hardware's order, so the bits differ from gemm.comp's; a row's bits do not
// depend on the other rows. ROW_IDS: the rows and weights of one expert (gemm_rows.glsl).
// K_MAJOR: the expert's weights are stored [K, N] (float types).
// BLOCK128 (gemm_coopmat128.glsl; profile key gemm.block=128): eight subgroups in 2 x 4, each 4 x 2
// matrices, a block of 8 MM x 8 MN (128 x 128 on NVIDIA, 256 invocations, 48 KiB of shared
// memory), staged with 16-byte loads of x and 8-element loads of float W where the offsets
// allow, and quantized groups decoded 8 elements an invocation by every invocation. The same
// products in the same k order as the 64 block's: the numerics above hold for both.
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#include "shared_constants.h"
#define X_BINDING 0
#define WEIGHT_BINDING 1
#if defined(ROW_IDS)
#define IQ_GRID_BINDING 4  // the lattice formats' grid, after the row lists
#else
#define IQ_GRID_BINDING 3
#endif
#include "common.glsl"

layout(local_size_x_id = 0) in;              // four (BLOCK128: eight) subgroups of the device's one size
layout(constant_id = 1) const uint MM = 16;  // the device's matrices: A is MM x MK, B MK x MN
layout(constant_id = 2) const uint MN = 16;
layout(constant_id = 3) const uint MK = 16;

#if defined(BLOCK128)
// TILE_K (profile key gemm.tile_k, ops::Gpu::gemm_tile_k): k staged 32 (one quantized group) or 64
// at a time, 64 with half the barriers. The products run over k in the same MK steps in the same
// order either way: the same bits, but for a K padded further with zeros (products of zeros,
// which can turn a sum of -0 into +0).
layout(constant_id = 6) const uint TILE_K = GEMM_COOPMAT_TILE_K;
const uint STRIDE = TILE_K + (GEMM_COOPMAT_STRIDE - GEMM_COOPMAT_TILE_K);
#else
#define TILE_K GEMM_COOPMAT_TILE_K
#define STRIDE GEMM_COOPMAT_STRIDE  // f16 elements a staged row; the padding spreads rows over banks
#endif
#define LO_SCALE 1024.0  // (v - hi) < 2^-10 |v|: lo stays within |v|

layout(binding = 2, std430) buffer Y { float y[]; };
#if defined(ROW_IDS)
layout(binding = 3, std430) readonly buffer Lists { int lists[]; };
layout(constant_id = 4) const bool K_MAJOR = false;
const bool LO_TERMS = true;
#else
// LO_TERMS false (profile key gemm.precision=f16): x and W enter as their nearest f16 alone, as
// llama.cpp's cooperative-matrix kernels take them: a third of the products and half the
// staging, at f16's precision (errors near 2^-11 of each product instead of 2^-21).
layout(constant_id = 4) const bool LO_TERMS = true;
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
  uint slots;
  uint slot;
  uint expert_base;
  uint expert_stride;
  uint lists_offset;
  uint list_stride;
#endif
} p;

#include "gemm_rows.glsl"

#if defined(BLOCK128)
// Sized from the device's matrices and the k tile, the lo halves one row without LO_TERMS
// (ops::coopmat128_shared_bytes counts these bytes, ws_lo included).
const uint BLOCK_M = GEMM_COOPMAT128_SUBGROUPS * MM, BLOCK_N = GEMM_COOPMAT128_SUBGROUPS * MN;
shared float16_t xs_hi[BLOCK_M * STRIDE], xs_lo[(LO_TERMS ? BLOCK_M : 1u) * STRIDE];
shared float16_t ws_hi[BLOCK_N * STRIDE];
#if !defined(W_F16)
shared float16_t ws_lo[(LO_TERMS ? BLOCK_N : 1u) * STRIDE];
#endif
shared float out_stage[GEMM_COOPMAT128_SUBGROUPS * MM * MN];
#else
shared float16_t xs_hi[GEMM_COOPMAT_TILE * STRIDE], xs_lo[GEMM_COOPMAT_TILE * STRIDE];
shared float16_t ws_hi[GEMM_COOPMAT_TILE * STRIDE];
#if !defined(W_F16)
shared float16_t ws_lo[GEMM_COOPMAT_TILE * STRIDE];
#endif
shared float out_stage[4 * 256];  // one MM x MN matrix per subgroup on its way to y
#endif

// v with its mantissa cut to f16's 10 bits: the f16 it stores as, for |v| in f16's normal range.
float f16_part(float v) { return uintBitsToFloat(floatBitsToUint(v) & 0xffffe000u); }
void stage_x(uint i, float v) {
  if (!LO_TERMS) {
    xs_hi[i] = float16_t(v);
    return;
  }
  float hi = f16_part(v);
  xs_hi[i] = float16_t(hi);
  xs_lo[i] = float16_t((v - hi) * LO_SCALE);
}
void stage_w(uint i, float v) {
  if (!LO_TERMS) {
    ws_hi[i] = float16_t(v);
    return;
  }
  float hi = f16_part(v);
  ws_hi[i] = float16_t(hi);
#if !defined(W_F16)
  ws_lo[i] = float16_t((v - hi) * LO_SCALE);
#endif
}

#define A_MAT coopmat<float16_t, gl_ScopeSubgroup, MM, MK, gl_MatrixUseA>
#define B_MAT coopmat<float16_t, gl_ScopeSubgroup, MK, MN, gl_MatrixUseB>
#define C_MAT coopmat<float, gl_ScopeSubgroup, MM, MN, gl_MatrixUseAccumulator>

#if !defined(BLOCK128)
void main() {
  const uint wg = gl_WorkGroupSize.x;
  const uint tid = gl_LocalInvocationID.x;
  const uint block_m = 4u * MM, block_n = 4u * MN;
  const uint m0 = gl_WorkGroupID.y * block_m, n0 = gl_WorkGroupID.x * block_n;
  if (!block_rows_begin(m0)) return;
  const uint qm = (gl_SubgroupID >> 1) * 2u * MM, qn = (gl_SubgroupID & 1u) * 2u * MN;  // the quadrant
  C_MAT acc[2][2], lo[2][2];
  [[unroll]] for (uint i = 0; i < 2; ++i) [[unroll]] for (uint j = 0; j < 2; ++j) {
    acc[i][j] = C_MAT(0.0);
    lo[i][j] = C_MAT(0.0);
  }
  for (uint k0 = 0; k0 < p.K; k0 += TILE_K) {
    for (uint e = tid; e < block_m * TILE_K; e += wg) {
      uint row = e / TILE_K, kk = e % TILE_K, m = m0 + row, k = k0 + kk;
      stage_x(row * STRIDE + kk, (m < row_count && k < p.K) ? x[p.x_offset + x_row(m) * p.x_stride + k] : 0.0);
    }
#if defined(W_QUANT)
    // One 32-element group of a W row per invocation (K is a whole number of groups).
    for (uint row = tid; row < block_n; row += wg) {
      uint n = n0 + row;
      QGroup q = q_load(w_byte_base + min(n, p.N - 1u) * q_row_bytes(p.K), k0 / QGROUP);
      [[unroll]] for (uint c = 0; c < QGROUP / 8; ++c) {
        float w[8];
        q_decode8(q, c, w);
        [[unroll]] for (uint i = 0; i < 8; ++i) stage_w(row * STRIDE + 8u * c + i, n < p.N ? w[i] : 0.0);
      }
    }
#else
    for (uint e = tid; e < block_n * TILE_K; e += wg) {
      // Consecutive invocations read consecutive elements of W's stored rows.
      uint row = w_k_major() ? e % block_n : e / TILE_K, kk = w_k_major() ? e / block_n : e % TILE_K;
      uint n = n0 + row, k = k0 + kk;
      stage_w(row * STRIDE + kk, (n < p.N && k < p.K) ? wload(w_index(n, k)) : 0.0);
    }
#endif
    barrier();
    for (uint kk = 0; kk < TILE_K; kk += MK) {
      A_MAT a_hi[2], a_lo[2];
      B_MAT b_hi[2];
      [[unroll]] for (uint i = 0; i < 2; ++i) {
        coopMatLoad(a_hi[i], xs_hi, (qm + MM * i) * STRIDE + kk, STRIDE, gl_CooperativeMatrixLayoutRowMajor);
        if (LO_TERMS)
          coopMatLoad(a_lo[i], xs_lo, (qm + MM * i) * STRIDE + kk, STRIDE, gl_CooperativeMatrixLayoutRowMajor);
        // B is W's rows seen as columns: element (k, n) at n * STRIDE + k.
        coopMatLoad(b_hi[i], ws_hi, (qn + MN * i) * STRIDE + kk, STRIDE, gl_CooperativeMatrixLayoutColumnMajor);
      }
#if !defined(W_F16)
      B_MAT b_lo[2];
      if (LO_TERMS)
        [[unroll]] for (uint j = 0; j < 2; ++j)
          coopMatLoad(b_lo[j], ws_lo, (qn + MN * j) * STRIDE + kk, STRIDE, gl_CooperativeMatrixLayoutColumnMajor);
#endif
      [[unroll]] for (uint i = 0; i < 2; ++i) [[unroll]] for (uint j = 0; j < 2; ++j) {
        acc[i][j] = coopMatMulAdd(a_hi[i], b_hi[j], acc[i][j]);
        if (LO_TERMS) {
          lo[i][j] = coopMatMulAdd(a_lo[i], b_hi[j], lo[i][j]);
#if !defined(W_F16)
          lo[i][j] = coopMatMulAdd(a_hi[i], b_lo[j], lo[i][j]);
#endif
        }
      }
    }
    barrier();
  }
  // Each subgroup passes its matrices through its own MM x MN of shared memory to the outputs in
  // range (the edges of y are not whole matrices).
  const uint stage = gl_SubgroupID * 256u;
  [[unroll]] for (uint i = 0; i < 2; ++i) [[unroll]] for (uint j = 0; j < 2; ++j) {
    C_MAT r = acc[i][j];
    if (LO_TERMS) r = acc[i][j] + lo[i][j] * float(1.0 / LO_SCALE);  // a power of two: exact
    coopMatStore(r, out_stage, stage, MN, gl_CooperativeMatrixLayoutRowMajor);
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    for (uint e = gl_SubgroupInvocationID; e < MM * MN; e += gl_SubgroupSize) {
      uint m = m0 + qm + MM * i + e / MN, n = n0 + qn + MN * j + e % MN;
      if (!row_stored(m) || n >= p.N) continue;
      uint yi = p.y_offset + y_row(m) * p.y_stride + n;
      float v = out_stage[stage + e];
      y[yi] = p.accumulate != 0u ? y[yi] + v : v;
    }
    subgroupMemoryBarrierShared();
    subgroupBarrier();
  }
}
#else
#include "gemm_coopmat128.glsl"
#endif
