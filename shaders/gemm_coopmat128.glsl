// The coopmat GEMM's 128 block (gemm_coopmat.comp's BLOCK128 variant, included at its end after
// the shared arrays and the staging of one value): eight subgroups in 2 x 4, each 4 x 2 of the
// device's matrices, its k loop plain or software-pipelined (PREFETCH), k tiles of 32 or 64.

// A k tile is staged in quads of x (4 elements of a row, 16-byte loads where x_vec4) and octets
// of W (8 elements of a row: 8-element loads of float W where w_vec8; for quantized W the QGroup
// of the group the octet lies in, decoded 8 elements an invocation), invocation tid taking quads
// and octets tid, tid + workgroup, ... x_vec4 and w_vec8 are uniform: every row start is then a
// multiple of 4 (x) or 8 (W) elements, and a load that starts before K ends within it.
const uint X_QUADS = BLOCK_M * (TILE_K / 4u), W_OCTETS = BLOCK_N * (TILE_K / 8u);
#if !defined(W_QUANT)
bool w_vec8 = false;
#endif
vec4 load_x_quad(uint e, uint m0, uint k0) {
  uint row = e / (TILE_K / 4u), kk = 4u * (e % (TILE_K / 4u)), m = m0 + row, k = k0 + kk;
  vec4 v = vec4(0.0);
  if (m < row_count) {
    uint i0 = p.x_offset + x_row(m) * p.x_stride + k;
    if (x_vec4) {
      if (k < p.K) v = x4[i0 >> 2];
    } else {
      [[unroll]] for (uint i = 0; i < 4u; ++i) v[i] = k + i < p.K ? x[i0 + i] : 0.0;
    }
  }
  return v;
}
void stage_x_quad(uint e, vec4 v) {
  uint row = e / (TILE_K / 4u), kk = 4u * (e % (TILE_K / 4u));
  [[unroll]] for (uint i = 0; i < 4u; ++i) stage_x(row * STRIDE + kk + i, v[i]);
}
#if defined(W_QUANT)
#define WOctet QGroup
// K is a whole number of groups; a 64-wide tile's second group past K loads the row's last group
// and stages zeros.
QGroup load_w_octet(uint e, uint n0, uint k0) {
  uint n = n0 + e / (TILE_K / 8u), g = (k0 + 8u * (e % (TILE_K / 8u))) / QGROUP;
  return q_load(w_byte_base + min(n, p.N - 1u) * q_row_bytes(p.K), min(g, p.K / QGROUP - 1u));
}
void stage_w_octet(uint e, uint n0, uint k0, QGroup q) {
  uint row = e / (TILE_K / 8u), kk = 8u * (e % (TILE_K / 8u)), n = n0 + row;
  float w[8];
  q_decode8(q, (kk % QGROUP) / 8u, w);
  [[unroll]] for (uint i = 0; i < 8; ++i) stage_w(row * STRIDE + kk + i, n < p.N && k0 + kk < p.K ? w[i] : 0.0);
}
#else
struct WOctet { float w[8]; };
WOctet load_w_octet(uint e, uint n0, uint k0) {
  uint row = e / (TILE_K / 8u), kk = 8u * (e % (TILE_K / 8u)), n = n0 + row, k = k0 + kk;
  WOctet o;
  if (w_vec8 && n < p.N && k < p.K) {
    wload8_at(n, k, o.w);
  } else {
    [[unroll]] for (uint i = 0; i < 8; ++i) o.w[i] = (n < p.N && k + i < p.K) ? wload(w_index(n, k + i)) : 0.0;
  }
  return o;
}
void stage_w_octet(uint e, uint n0, uint k0, WOctet o) {
  uint kk = 8u * (e % (TILE_K / 8u)), row = e / (TILE_K / 8u);
  [[unroll]] for (uint i = 0; i < 8; ++i) stage_w(row * STRIDE + kk + i, o.w[i]);
}
#endif
// The plain loop stages the tile at k0 straight from memory.
void stage_tile(uint m0, uint n0, uint k0) {
  const uint tid = gl_LocalInvocationID.x, wg = gl_WorkGroupSize.x;
  for (uint e = tid; e < X_QUADS; e += wg) stage_x_quad(e, load_x_quad(e, m0, k0));
  for (uint e = tid; e < W_OCTETS; e += wg) stage_w_octet(e, n0, k0, load_w_octet(e, n0, k0));
}
// PREFETCH (profile key gemm.prefetch=on, ops::Gpu::gemm_prefetch): the k loop software-pipelined.
// Each invocation loads its shares of the next tile (x's quads, float W's octets, a quantized
// group's raw bytes and scales, decoded later) into registers before the current tile's products
// and stages them after the products, so the global loads are in flight during the math. One
// staging buffer (a second does not fit NVIDIA's 48 KiB), the same two barriers a tile. The
// staged values, the products and their k order are the plain loop's: the same bits.
layout(constant_id = 5) const bool PREFETCH = false;
const uint X_LOADS = (X_QUADS + gl_WorkGroupSize.x - 1u) / gl_WorkGroupSize.x;
const uint W_LOADS = (W_OCTETS + gl_WorkGroupSize.x - 1u) / gl_WorkGroupSize.x;
vec4 x_next[X_LOADS];
WOctet w_next[W_LOADS];
void load_next(uint m0, uint n0, uint k0) {
  const uint tid = gl_LocalInvocationID.x, wg = gl_WorkGroupSize.x;
  [[unroll]] for (uint i = 0; i < X_LOADS; ++i)
    if (tid + i * wg < X_QUADS) x_next[i] = load_x_quad(tid + i * wg, m0, k0);
  [[unroll]] for (uint i = 0; i < W_LOADS; ++i)
    if (tid + i * wg < W_OCTETS) w_next[i] = load_w_octet(tid + i * wg, n0, k0);
}
void stage_next(uint n0, uint k0) {
  const uint tid = gl_LocalInvocationID.x, wg = gl_WorkGroupSize.x;
  [[unroll]] for (uint i = 0; i < X_LOADS; ++i)
    if (tid + i * wg < X_QUADS) stage_x_quad(tid + i * wg, x_next[i]);
  [[unroll]] for (uint i = 0; i < W_LOADS; ++i)
    if (tid + i * wg < W_OCTETS) stage_w_octet(tid + i * wg, n0, k0, w_next[i]);
}

void main() {
  const uint m0 = gl_WorkGroupID.y * BLOCK_M, n0 = gl_WorkGroupID.x * BLOCK_N;
  if (!block_rows_begin(m0)) return;
  // The subgroup's 4 x 2 matrices: subgroups 0-3 the upper half of the rows, 4-7 the lower.
  const uint qm = (gl_SubgroupID >> 2) * 4u * MM, qn = (gl_SubgroupID & 3u) * 2u * MN;
  C_MAT acc[4][2], lo[4][2];
  [[unroll]] for (uint i = 0; i < 4; ++i) [[unroll]] for (uint j = 0; j < 2; ++j) {
    acc[i][j] = C_MAT(0.0);
    lo[i][j] = C_MAT(0.0);
  }
  x_vec4 = ((p.x_offset | p.x_stride | p.K) & 3u) == 0u;
#if !defined(W_QUANT)
  w_vec8 = (p.K & 7u) == 0u && !w_k_major() && (w_byte_base & 15u) == 0u;
#endif
  if (PREFETCH) {
    load_next(m0, n0, 0u);
    stage_next(n0, 0u);
  }
  for (uint k0 = 0; k0 < p.K; k0 += TILE_K) {
    const bool next = PREFETCH && k0 + TILE_K < p.K;  // uniform
    if (!PREFETCH) stage_tile(m0, n0, k0);
    if (next) load_next(m0, n0, k0 + TILE_K);  // in flight over the barrier and the products
    barrier();
    for (uint kk = 0; kk < TILE_K; kk += MK) {
      A_MAT a_hi[4], a_lo[4];
      B_MAT b_hi[2];
      [[unroll]] for (uint i = 0; i < 4; ++i) {
        coopMatLoad(a_hi[i], xs_hi, (qm + MM * i) * STRIDE + kk, STRIDE, gl_CooperativeMatrixLayoutRowMajor);
        if (LO_TERMS)
          coopMatLoad(a_lo[i], xs_lo, (qm + MM * i) * STRIDE + kk, STRIDE, gl_CooperativeMatrixLayoutRowMajor);
      }
      [[unroll]] for (uint j = 0; j < 2; ++j)
        coopMatLoad(b_hi[j], ws_hi, (qn + MN * j) * STRIDE + kk, STRIDE, gl_CooperativeMatrixLayoutColumnMajor);
#if !defined(W_F16)
      B_MAT b_lo[2];
      if (LO_TERMS)
        [[unroll]] for (uint j = 0; j < 2; ++j)
          coopMatLoad(b_lo[j], ws_lo, (qn + MN * j) * STRIDE + kk, STRIDE, gl_CooperativeMatrixLayoutColumnMajor);
#endif
      // Per output the 64 block's order: hi x hi, then lo x hi and hi x lo into the lo sums.
      [[unroll]] for (uint i = 0; i < 4; ++i) [[unroll]] for (uint j = 0; j < 2; ++j) {
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
    if (next) stage_next(n0, k0 + TILE_K);  // the tile the next step multiplies
  }
  const uint stage = gl_SubgroupID * MM * MN;
  [[unroll]] for (uint i = 0; i < 4; ++i) [[unroll]] for (uint j = 0; j < 2; ++j) {
    C_MAT r = acc[i][j];
    if (LO_TERMS) r = acc[i][j] + lo[i][j] * float(1.0 / LO_SCALE);
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
