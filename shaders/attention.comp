#version 450
// Attention of a batch of new query rows over the f16 KV cache, one workgroup per
// (row, head). Keys are visited in blocks of the workgroup size from a start that depends only
// on the row's own position, with an online softmax; so a row's result never depends on how
// many rows share the dispatch. The key at position j is visible to the row at position p when
//   j <= p (causal) and j < kv_len,
//   chunk > 0: floor(j / chunk) == floor(p / chunk)   (Llama-4 chunked attention).
// TREE: the rows are nodes of a speculation tree whose keys are not stored at their positions.
// Positions below path_base are committed rows stored at their position; position
// path_base + d is the row's own ancestor at depth d (itself at its depth), stored in cache row
// path_base + path[row * path_stride + d]. Keys are visited in position order exactly as for a
// sequential pass, with the same blocks, so a tree row computes bit for bit what a one-token
// decode step along its own branch computes.
// REGIONS: several sequences share the cache, each in its own range of rows. The row's own
// cache row is path[path_offset + row] (binding 4, unused by REGIONS otherwise); the key at
// position j of its sequence lies at that row - position + j. Blocks and order are those of a
// single-sequence pass, so each sequence computes the same bits as alone.
// QSCALE 1 multiplies the row's q by qscale[row]; QSCALE 2 by Llama-4's attention temperature
// 1 + attn_scale * log(floor((p + 1) / floor_scale) + 1), computed from the row's position.
// GROUP > 1 (grouped-query attention): a workgroup serves GROUP consecutive query heads that
// share one KV head, so each key and value is loaded once for all of them and each block's
// reductions wait at the same two barriers; every head's sums are formed in the order a
// one-head workgroup forms them, so the bits are the same.
// ONE_SUBGROUP (the workgroup is one subgroup: CPU devices, blocks of 8 keys): q is spread over
// the lanes' registers and reaches each key's lane by a shuffle, the block's probabilities and
// tree cache rows pass by shuffles too, and each lane owns pairs of output dims, one cache word
// each. No shared memory and no barrier: llvmpipe runs a workgroup's subgroups as coroutines
// that switch at each barrier, and reads shared memory one lane at a time. Each block's sums are
// taken in the workgroup path's order; its blocks are smaller, so its bits are its own.
// ROWS > 1 (verify passes and prefills, both kernels): a workgroup serves ROWS
// consecutive rows as well as GROUP heads, so each block of keys and values is loaded once for
// all of them. The rows' ranges start on one grid of blocks (the host allows ROWS > 1 only where
// chunks and splits are multiples of the block, and never for REGIONS, nor for TREE on the
// one-subgroup kernel); the workgroup walks the union of the ranges, and a row takes only its own
// blocks and, in its last one, its own keys, in the order a one-row workgroup takes them: the
// same bits. TREE rows share the blocks of committed keys and take the blocks that reach into
// the tree one row at a time (each row's ancestors are its own).
// K_TILE (the workgroup kernel): each block's keys reach shared memory K_TILE quads of every key
// at a time, the invocations reading consecutive quads of one key's row (coalesced), before each
// invocation takes the dot product of its own key; the sums keep their order, so the bits.
// SPLIT > 0 (flash-decoding, GPUs): workgroup z takes only the keys at positions
// [z SPLIT, (z + 1) SPLIT) of its row's range, in the same blocks from there, and writes its
// unnormalised state (m, l, then acc[head_dim]) for attention_combine.comp to merge in split
// order. The boundaries depend only on positions, never on the dispatch, so a row's bits still
// do not depend on the rows beside it or the bound it was recorded with; a row whose keys all
// lie in one split gets exactly the bits of the unsplit kernel (the merge multiplies by 1).
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#include "common.glsl"
#include "shared_constants.h"
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const bool TREE = false;
layout(constant_id = 2) const uint QSCALE = 0;
layout(constant_id = 3) const bool REGIONS = false;
layout(constant_id = 4) const uint GROUP = 1;  // 1..MAX_GROUP
#define MAX_GROUP 8
// The head's width (a multiple of 8, at most ATTENTION_MAX_HEAD_DIM), a constant so that the
// loops over it have known trip counts and each thread's output dims index its accumulators by
// constants: llvmpipe keeps an array indexed at run time in memory and reads it lane by lane.
layout(constant_id = 5) const uint HEAD_DIM = 64;
layout(constant_id = 6) const bool ONE_SUBGROUP = false;
layout(constant_id = 7) const uint SPLIT = 0;
layout(constant_id = 8) const uint ROWS = 1;    // 1..MAX_ROWS, ROWS * GROUP <= MAX_PAIRS
layout(constant_id = 9) const uint K_TILE = 1;  // quads of each key's row staged per step
#define MAX_ROWS ATTENTION_MAX_ROWS
#define MAX_PAIRS ATTENTION_MAX_PAIRS
// The (row, head) pairs a workgroup serves: pair r * GROUP + g is head head0 + g of row r.
const uint PAIRS = ROWS * GROUP;
// The workgroup kernel's block of keys: 64 invocations, one key each (the host's choice).
#define BLOCK 64

// K and V hold f16 pairs in 32-bit words. TEXEL_LOADS (CPU devices, as for the matrix
// kernels: common.glsl says why) reads them through texel buffers, K as 16-byte quads of 8
// halves; the same words, in the same order, so the same bits.
#ifdef TEXEL_LOADS
layout(binding = 0, rgba32f) uniform readonly imageBuffer q_texels;  // rows on 16-byte texels
float qload(uint i) { return imageLoad(q_texels, int(i >> 2))[i & 3u]; }
layout(binding = 1, rgba32ui) uniform readonly uimageBuffer k_texels;
layout(binding = 2, r32ui) uniform readonly uimageBuffer v_texels;
uvec4 kquad(uint q) { return imageLoad(k_texels, int(q)); }
uint vword(uint i) { return imageLoad(v_texels, int(i)).x; }
uvec4 vquad(uint q) { return uvec4(vword(4u * q), vword(4u * q + 1u), vword(4u * q + 2u), vword(4u * q + 3u)); }
#else
layout(binding = 0, std430) readonly buffer Q { float q[]; };
float qload(uint i) { return q[i]; }
layout(binding = 1, std430) readonly buffer KCache { uvec4 k_cache[]; };
layout(binding = 2, std430) readonly buffer VCache { uint v_cache[]; };
// The V cache seen as 16-byte quads too (the same binding): the workgroup kernel stages V's
// blocks as it stages K's.
layout(binding = 2, std430) readonly buffer VQuads { uvec4 v_quads[]; };
uvec4 kquad(uint q) { return k_cache[q]; }
uint vword(uint i) { return v_cache[i]; }
uvec4 vquad(uint q) { return v_quads[q]; }
#endif
layout(binding = 3, std430) readonly buffer Pos { int pos[]; };
layout(binding = 4, std430) readonly buffer Path { int path[]; };
layout(binding = 5, std430) readonly buffer QScale { float qscale[]; };
layout(binding = 6, std430) writeonly buffer Out { float outv[]; };

layout(push_constant) uniform Push {
  uint rows;
  uint heads;
  uint kv_heads;
  uint head_dim;
  uint q_offset;
  uint q_stride;
  uint out_offset;
  uint out_stride;
  uint pos_offset;
  uint kv_len;
  uint chunk;
  uint path_stride;  // TREE: path entries per row
  float scale;
  float floor_scale;
  float attn_scale;
  uint path_base;    // TREE: first position of the tree
  uint path_offset;  // TREE: element offset of row 0's path
  int path_base_slot;  // TREE: >= 0: path_base is path[path_base_slot] (a replayed round's root position)
  uint row0;         // the dispatch's first row (SPLIT dispatches take rows a chunk at a time)
  uint row_limit;    // and its last + 1
  uint splits;       // SPLIT: workgroups along z, the partial states per (row, head)
} p;

// llvmpipe (lavapipe) stops an invocation's loops once they have run 65,535 iterations in
// all. The loops inside the key loop therefore take 8 elements a turn (constant-bound inner
// loops unroll to straight code): with one a turn a 128-wide head reached the limit near
// 20,000 keys and silently ignored the rest; now a block of 64 keys costs about 50 turns,
// which the host checks against the context (ops::attention_max_keys).
// Sized by the pairs, so that a one-head one-row kernel keeps its 2 KiB of shared memory per
// head; the host keeps the whole within the device's limit (ops::attention_shared_bytes).
// ONE_SUBGROUP uses none of it.
shared float sq[ONE_SUBGROUP ? 1 : PAIRS * HEAD_DIM];
shared float sp[PAIRS][ONE_SUBGROUP ? 1 : BLOCK];
shared uint sslot[ONE_SUBGROUP ? 1 : BLOCK];  // TREE: cache row of each key of the block
shared float red[PAIRS][ONE_SUBGROUP ? 1 : 64];
// K_TILE quads of each key of the block; a padding quad per key keeps the invocations'
// reads of their own keys on different banks.
shared uvec4 ktile[ONE_SUBGROUP ? 1 : BLOCK * (K_TILE + 1u)];
// Output dims per thread: tid, tid + WG, ... below HEAD_DIM; ONE_SUBGROUP: the pairs
// (2 tid, 2 tid + 1), (2 (tid + WG), ...), ... below HEAD_DIM.
const uint DIMS = (HEAD_DIM + gl_WorkGroupSize.x - 1u) / gl_WorkGroupSize.x;
const uint DIM_PAIRS = (HEAD_DIM / 2u + gl_WorkGroupSize.x - 1u) / gl_WorkGroupSize.x;

// Each pair's v over the workgroup (its maximum or its sum), for all pairs at once. The loop
// over subgroups holds the pairs inside it: llvmpipe counts loop turns, not pairs.
void block_reduce(inout float v[MAX_PAIRS], bool is_max) {
  [[unroll]] for (uint i = 0; i < PAIRS; ++i) v[i] = is_max ? subgroupMax(v[i]) : subgroupAdd(v[i]);
  barrier();  // red[] may still be read from the previous reduction
  if (subgroupElect())
    [[unroll]] for (uint i = 0; i < PAIRS; ++i) red[i][gl_SubgroupID] = v[i];
  barrier();
  [[unroll]] for (uint i = 0; i < PAIRS; ++i) v[i] = red[i][0];
  for (uint s = 1; s < gl_NumSubgroups; ++s)
    [[unroll]] for (uint i = 0; i < PAIRS; ++i) v[i] = is_max ? max(v[i], red[i][s]) : v[i] + red[i][s];
}

// The workgroup's rows and heads, and what both paths derive from them. row, start, end, qrow
// and qs are those of its first row; the workgroup kernel keeps every row's in the arrays.
const uint hd = HEAD_DIM;  // = p.head_dim
uint row, head0, tid, wg, kvh, kv_dim, qrow, start, end, region, path_base, rows_here;
float qs;
uint row_start[MAX_ROWS], row_end[MAX_ROWS], row_q[MAX_ROWS];
float row_qs[MAX_ROWS];

// Row row + r's cache row for the key at position j (REGIONS have one row per workgroup; keys
// below a tree's path_base lie at their positions for every row).
uint key_slot_of(uint r, uint j) {
  if (TREE && j >= path_base) return path_base + uint(path[p.path_offset + (row + r) * p.path_stride + (j - path_base)]);
  return region + j;
}
uint key_slot(uint j) { return key_slot_of(0u, j); }

// SPLIT: where the partial state of (row, head, split) starts in the output buffer: m, l, then
// acc[head_dim]; rows count from the dispatch's first.
uint partial_base(uint r, uint head) {
  return p.out_offset + (((r - p.row0) * p.heads + head) * p.splits + gl_WorkGroupID.z) * (hd + 2u);
}
void write_split_state(uint r, uint head, float m, float l) {
  outv[partial_base(r, head)] = m;
  outv[partial_base(r, head) + 1u] = l;  // 0: no key of the split was visible
}

// ONE_SUBGROUP: lane tid scores key kb + tid of each block for every pair; the block's
// probabilities reach the lanes that own the output dims by shuffles. Every lane computes its
// score, visible or not (a shuffle reads only from lanes that run it), and keeps the visible ones.
void one_subgroup_attention() {
  // sq's values (q * qs) spread over the lanes: lane t holds dims t, t + WG, ... of each pair;
  // the key's lane takes each from its holder by a shuffle (HEAD_DIM % WG == 0: the host).
  float qreg[MAX_PAIRS][ATTENTION_MAX_HEAD_DIM / 8];
  [[unroll]] for (uint r = 0; r < ROWS; ++r)
    [[unroll]] for (uint g = 0; g < GROUP; ++g)
      [[unroll]] for (uint c = 0; c < HEAD_DIM / gl_WorkGroupSize.x; ++c)
        qreg[r * GROUP + g][c] = r < rows_here ? qload(row_q[r] + g * hd + c * wg + tid) * row_qs[r] : 0.0;
  float m[MAX_PAIRS], l[MAX_PAIRS];
  float acc_lo[MAX_PAIRS][ATTENTION_MAX_HEAD_DIM / 16], acc_hi[MAX_PAIRS][ATTENTION_MAX_HEAD_DIM / 16];  // wg >= 8
  [[unroll]] for (uint i = 0; i < PAIRS; ++i) {
    m[i] = -1.0 / 0.0;
    l[i] = 0.0;
    [[unroll]] for (uint c = 0; c < DIM_PAIRS; ++c) acc_lo[i][c] = acc_hi[i][c] = 0.0;
  }
  // The blocks of any row's range; the ranges start on one grid of blocks (the host).
  uint first = 0xffffffffu, last = 0u;
  [[unroll]] for (uint r = 0; r < ROWS; ++r)
    if (r < rows_here && row_start[r] < row_end[r]) {
      first = min(first, row_start[r]);
      last = max(last, row_end[r]);
    }
  for (uint kb = first; kb < last; kb += wg) {
    uint j = kb + tid;
    bool live[MAX_ROWS], visible[MAX_ROWS];
    [[unroll]] for (uint r = 0; r < ROWS; ++r) {
      live[r] = r < rows_here && kb >= row_start[r] && kb < row_end[r];
      visible[r] = live[r] && j < row_end[r];
    }
    uint slot = j < last ? key_slot(j) : 0u;  // cache row 0 always exists
    uint base = (slot * kv_dim + kvh * hd) / 8u;
    float dot_qk[MAX_PAIRS];
    [[unroll]] for (uint i = 0; i < PAIRS; ++i) dot_qk[i] = 0.0;
    [[unroll]] for (uint d = 0; d < hd; d += 8u) {
      uvec4 kq = kquad(base + d / 8u);
      [[unroll]] for (uint u = 0; u < 4u; ++u) {
        vec2 kk = unpackHalf2x16(kq[u]);
        uint e = d + 2u * u;  // the dims of kk
        [[unroll]] for (uint i = 0; i < PAIRS; ++i) {
          dot_qk[i] = fma(subgroupShuffle(qreg[i][e / wg], e % wg), kk.x, dot_qk[i]);
          dot_qk[i] = fma(subgroupShuffle(qreg[i][(e + 1u) / wg], (e + 1u) % wg), kk.y, dot_qk[i]);
        }
      }
    }
    float new_m[MAX_PAIRS], prob[MAX_PAIRS], total[MAX_PAIRS];
    [[unroll]] for (uint r = 0; r < ROWS; ++r)
      [[unroll]] for (uint g = 0; g < GROUP; ++g) {
        uint i = r * GROUP + g;
        float s = visible[r] ? dot_qk[i] : -1.0 / 0.0;
        new_m[i] = max(m[i], subgroupMax(s));
        prob[i] = visible[r] ? exp(s - new_m[i]) : 0.0;
        total[i] = subgroupAdd(prob[i]);
      }
    // The keys each row takes from the block (attention.comp's workgroup kernel says why).
    uint count[MAX_ROWS];
    uint most = 0;
    [[unroll]] for (uint r = 0; r < ROWS; ++r) {
      count[r] = live[r] && new_m[r * GROUP] != -1.0 / 0.0 ? min(wg, row_end[r] - kb) : 0u;
      most = max(most, count[r]);
    }
    if (most == 0u) continue;
    float alpha[MAX_PAIRS];
    [[unroll]] for (uint r = 0; r < ROWS; ++r)
      [[unroll]] for (uint g = 0; g < GROUP; ++g) {
        uint i = r * GROUP + g;
        alpha[i] = count[r] > 0u ? exp(m[i] - new_m[i]) : 1.0;
        if (count[r] > 0u) l[i] = l[i] * alpha[i] + total[i];
      }
    [[unroll]] for (uint c = 0; c < DIM_PAIRS; ++c) {
      uint d = 2u * (tid + c * wg);
      bool owns = d < hd;  // else reads a valid word and stores nothing
      float lo[MAX_PAIRS], hi[MAX_PAIRS];
      [[unroll]] for (uint r = 0; r < ROWS; ++r)
        [[unroll]] for (uint g = 0; g < GROUP; ++g) {
          uint i = r * GROUP + g;
          lo[i] = count[r] > 0u ? acc_lo[i][c] * alpha[i] : acc_lo[i][c];
          hi[i] = count[r] > 0u ? acc_hi[i][c] * alpha[i] : acc_hi[i][c];
        }
      [[unroll]] for (uint jj = 0; jj < gl_WorkGroupSize.x; ++jj) {
        if (jj < most) {
          uint key = TREE ? subgroupShuffle(slot, jj) : region + kb + jj;
          vec2 v = unpackHalf2x16(vword(owns ? (key * kv_dim + kvh * hd + d) / 2u : 0u));
          [[unroll]] for (uint r = 0; r < ROWS; ++r)
            if (jj < count[r])
              [[unroll]] for (uint g = 0; g < GROUP; ++g) {
                uint i = r * GROUP + g;
                float pj = subgroupShuffle(prob[i], jj);
                lo[i] = fma(pj, v.x, lo[i]);
                hi[i] = fma(pj, v.y, hi[i]);
              }
        }
      }
      [[unroll]] for (uint i = 0; i < PAIRS; ++i) {
        acc_lo[i][c] = lo[i];
        acc_hi[i][c] = hi[i];
      }
    }
    [[unroll]] for (uint r = 0; r < ROWS; ++r)
      if (count[r] > 0u)
        [[unroll]] for (uint g = 0; g < GROUP; ++g) m[r * GROUP + g] = new_m[r * GROUP + g];
  }
  [[unroll]] for (uint r = 0; r < ROWS; ++r) {
    if (r >= rows_here) break;
    [[unroll]] for (uint g = 0; g < GROUP; ++g) {
      uint i = r * GROUP + g;
      [[unroll]] for (uint c = 0; c < DIM_PAIRS; ++c) {
        uint d = 2u * (tid + c * wg);
        if (d < hd) {
          if (SPLIT > 0u) {
            uint o = partial_base(row + r, head0 + g) + 2u + d;
            outv[o] = acc_lo[i][c];
            outv[o + 1u] = acc_hi[i][c];
          } else {
            uint o = p.out_offset + (row + r) * p.out_stride + (head0 + g) * hd + d;
            outv[o] = l[i] > 0.0 ? acc_lo[i][c] / l[i] : 0.0;
            outv[o + 1u] = l[i] > 0.0 ? acc_hi[i][c] / l[i] : 0.0;
          }
        }
      }
      if (SPLIT > 0u && tid == 0u) write_split_state(row + r, head0 + g, m[i], l[i]);
    }
  }
}

// Several subgroups: q, the block's probabilities, its cache rows and its keys in shared
// memory; each pair's sums in the order of a one-pair workgroup.
void workgroup_attention() {
  for (uint d = tid; d < hd; d += wg)
    [[unroll]] for (uint r = 0; r < ROWS; ++r)
      [[unroll]] for (uint g = 0; g < GROUP; ++g)
        sq[(r * GROUP + g) * hd + d] = r < rows_here ? qload(row_q[r] + g * hd + d) * row_qs[r] : 0.0;
  barrier();
  float m[MAX_PAIRS], l[MAX_PAIRS];
  float acc[MAX_PAIRS][ATTENTION_MAX_HEAD_DIM / 32];  // dims tid, tid + wg, ... (wg >= 32)
  [[unroll]] for (uint i = 0; i < PAIRS; ++i) {
    m[i] = -1.0 / 0.0;
    l[i] = 0.0;
    [[unroll]] for (uint c = 0; c < ATTENTION_MAX_HEAD_DIM / 32; ++c) acc[i][c] = 0.0;
  }
  // The blocks of any row's range; the ranges start on one grid of blocks (the host).
  uint first = 0xffffffffu, last = 0u;
  [[unroll]] for (uint r = 0; r < ROWS; ++r)
    if (r < rows_here && row_start[r] < row_end[r]) {
      first = min(first, row_start[r]);
      last = max(last, row_end[r]);
    }

  // TREE: the rows share the blocks of committed keys (below path_base, at their positions for
  // every row); a block that reaches into the tree holds each row's own ancestors, so it is
  // taken once per row, that row alone live, with its own cache rows.
  for (uint kb = first; kb < last; kb += wg)
  for (uint pass = 0u; pass < (TREE && kb + wg > path_base ? rows_here : 1u); ++pass) {
    const bool alone = TREE && kb + wg > path_base;  // this pass serves row `pass` only
    const uint slot_row = alone ? pass : 0u;
    uint j = kb + tid;
    // live: the block is one of row r's (a one-row workgroup visits it); visible: so is key j.
    bool live[MAX_ROWS], visible[MAX_ROWS];
    bool any_visible = false;
    [[unroll]] for (uint r = 0; r < ROWS; ++r) {
      live[r] = r < rows_here && kb >= row_start[r] && kb < row_end[r] && (!alone || r == pass);
      visible[r] = live[r] && j < row_end[r];
      any_visible = any_visible || visible[r];
    }
    uint slot = j < last ? key_slot_of(slot_row, j) : region + j;
    float dot_qk[MAX_PAIRS];
    [[unroll]] for (uint i = 0; i < PAIRS; ++i) dot_qk[i] = 0.0;
    [[unroll]] for (uint d0 = 0; d0 < HEAD_DIM; d0 += 8u * K_TILE) {
      barrier();  // the tile's last readers are done
      [[unroll]] for (uint c = 0; c < K_TILE; ++c) {
        uint key = (c * wg + tid) / K_TILE, quad = (c * wg + tid) % K_TILE;
        if (kb + key < last && d0 + 8u * quad < hd)
          ktile[key * (K_TILE + 1u) + quad] = kquad((key_slot_of(slot_row, kb + key) * kv_dim + kvh * hd + d0) / 8u + quad);
      }
      barrier();
      // Rolled: unrolled over the pairs as well, llvmpipe took minutes to compile the kernel.
      // With the tile loop unrolled its turns are head_dim / 8 a block, as the host counts.
      if (any_visible)
        for (uint c = 0; c < K_TILE; ++c) {
          uint d = d0 + 8u * c;
          if (d < hd) {
            uvec4 kq = ktile[tid * (K_TILE + 1u) + c];
            [[unroll]] for (uint u = 0; u < 4u; ++u) {
              vec2 kk = unpackHalf2x16(kq[u]);
              [[unroll]] for (uint i = 0; i < PAIRS; ++i) {
                dot_qk[i] = fma(sq[i * hd + d + 2u * u], kk.x, dot_qk[i]);
                dot_qk[i] = fma(sq[i * hd + d + 2u * u + 1u], kk.y, dot_qk[i]);
              }
            }
          }
        }
    }
    float s[MAX_PAIRS], block_max[MAX_PAIRS], prob[MAX_PAIRS], new_m[MAX_PAIRS];
    [[unroll]] for (uint r = 0; r < ROWS; ++r)
      [[unroll]] for (uint g = 0; g < GROUP; ++g) s[r * GROUP + g] = visible[r] ? dot_qk[r * GROUP + g] : -1.0 / 0.0;
    [[unroll]] for (uint i = 0; i < PAIRS; ++i) block_max[i] = s[i];
    block_reduce(block_max, true);
    [[unroll]] for (uint r = 0; r < ROWS; ++r)
      [[unroll]] for (uint g = 0; g < GROUP; ++g) {
        uint i = r * GROUP + g;
        new_m[i] = max(m[i], block_max[i]);
        prob[i] = visible[r] ? exp(s[i] - new_m[i]) : 0.0;
        sp[i][tid] = prob[i];
      }
    if (TREE) sslot[tid] = slot;
    block_reduce(prob, false);  // now each pair's block sum; its barriers also publish sp[]
    // The keys each row takes from the block: none where the block is not the row's, or where
    // nothing of the row is visible yet (a one-row workgroup keeps its state then; visibility
    // is the same for every head of a row).
    uint count[MAX_ROWS];
    uint most = 0;
    [[unroll]] for (uint r = 0; r < ROWS; ++r) {
      count[r] = live[r] && new_m[r * GROUP] != -1.0 / 0.0 ? min(wg, row_end[r] - kb) : 0u;
      most = max(most, count[r]);
    }
    if (most == 0u) continue;
    float alpha[MAX_PAIRS];
    [[unroll]] for (uint r = 0; r < ROWS; ++r)
      [[unroll]] for (uint g = 0; g < GROUP; ++g) {
        uint i = r * GROUP + g;
        alpha[i] = count[r] > 0u ? exp(m[i] - new_m[i]) : 1.0;  // 0 when m is -inf
        if (count[r] > 0u) l[i] = l[i] * alpha[i] + prob[i];
      }
    // The block's values reach shared memory as its keys did, K_TILE quads of every key at a
    // time (the key tile is free once the scores are formed): coalesced loads, all in flight at
    // once. Each invocation walking the keys' rows one dependent load after another was
    // latency-bound: half the decode speed at depth 1024 on an H200 (docs/perf.md). Each output
    // dim lies in one tile and takes its keys in order.
    [[unroll]] for (uint d0 = 0; d0 < HEAD_DIM; d0 += 8u * K_TILE) {
      barrier();  // the tile's last readers are done
      [[unroll]] for (uint c = 0; c < K_TILE; ++c) {
        uint key = (c * wg + tid) / K_TILE, quad = (c * wg + tid) % K_TILE;
        if (kb + key < last && d0 + 8u * quad < hd)
          ktile[key * (K_TILE + 1u) + quad] = vquad((key_slot_of(slot_row, kb + key) * kv_dim + kvh * hd + d0) / 8u + quad);
      }
      barrier();
      [[unroll]] for (uint c = 0; c < DIMS; ++c) {
        uint d = tid + c * wg;
        if (d >= hd) break;
        if (d < d0 || d >= d0 + 8u * K_TILE) continue;
        uint q = (d - d0) / 8u, word = (d % 8u) / 2u;
        float a[MAX_PAIRS];
        [[unroll]] for (uint r = 0; r < ROWS; ++r)
          [[unroll]] for (uint g = 0; g < GROUP; ++g) {
            uint i = r * GROUP + g;
            a[i] = count[r] > 0u ? acc[i][c] * alpha[i] : acc[i][c];
          }
        // Eight keys a turn (llvmpipe counts loop turns: ops::attention_max_keys).
        uint jj = 0;
        for (; jj + 8u <= most; jj += 8u)
          [[unroll]] for (uint u = 0; u < 8u; ++u) {
            float v = kv_load(ktile[(jj + u) * (K_TILE + 1u) + q][word], d);
            [[unroll]] for (uint r = 0; r < ROWS; ++r)
              if (jj + u < count[r])
                [[unroll]] for (uint g = 0; g < GROUP; ++g) a[r * GROUP + g] = fma(sp[r * GROUP + g][jj + u], v, a[r * GROUP + g]);
          }
        for (; jj < most; ++jj) {
          float v = kv_load(ktile[jj * (K_TILE + 1u) + q][word], d);
          [[unroll]] for (uint r = 0; r < ROWS; ++r)
            if (jj < count[r])
              [[unroll]] for (uint g = 0; g < GROUP; ++g) a[r * GROUP + g] = fma(sp[r * GROUP + g][jj], v, a[r * GROUP + g]);
        }
        [[unroll]] for (uint i = 0; i < PAIRS; ++i) acc[i][c] = a[i];
      }
    }
    [[unroll]] for (uint r = 0; r < ROWS; ++r)
      if (count[r] > 0u)
        [[unroll]] for (uint g = 0; g < GROUP; ++g) m[r * GROUP + g] = new_m[r * GROUP + g];
  }
  [[unroll]] for (uint r = 0; r < ROWS; ++r) {
    if (r >= rows_here) break;
    [[unroll]] for (uint g = 0; g < GROUP; ++g) {
      uint i = r * GROUP + g;
      [[unroll]] for (uint c = 0; c < DIMS; ++c) {
        uint d = tid + c * wg;
        if (d >= hd) break;
        if (SPLIT > 0u) outv[partial_base(row + r, head0 + g) + 2u + d] = acc[i][c];
        else outv[p.out_offset + (row + r) * p.out_stride + (head0 + g) * hd + d] = l[i] > 0.0 ? acc[i][c] / l[i] : 0.0;
      }
      if (SPLIT > 0u && tid == 0u) write_split_state(row + r, head0 + g, m[i], l[i]);
    }
  }
}

void main() {
  row = p.row0 + gl_WorkGroupID.x * ROWS;
  rows_here = min(ROWS, p.row_limit - row);
  head0 = gl_WorkGroupID.y * GROUP;
  tid = gl_LocalInvocationID.x;
  wg = gl_WorkGroupSize.x;
  path_base = TREE && p.path_base_slot >= 0 ? uint(path[p.path_base_slot]) : p.path_base;
  kvh = head0 / (p.heads / p.kv_heads);  // the host keeps a group within one KV head
  kv_dim = p.kv_heads * hd;
  [[unroll]] for (uint r = 0; r < ROWS; ++r) {
    row_start[r] = row_end[r] = row_q[r] = 0u;
    row_qs[r] = 0.0;
    if (r >= rows_here) continue;
    int position = pos[p.pos_offset + row + r];
    row_q[r] = p.q_offset + (row + r) * p.q_stride + head0 * hd;
    float temperature = 1.0;
    if (QSCALE == 1u) temperature = qscale[row + r];
    if (QSCALE == 2u) temperature = log(floor((float(position) + 1.0) / p.floor_scale) + 1.0) * p.attn_scale + 1.0;
    row_qs[r] = p.scale * temperature;
    row_end[r] = TREE ? uint(position) + 1u : min(p.kv_len, uint(position) + 1u);
    row_start[r] = p.chunk > 0u ? (uint(position) / p.chunk) * p.chunk : 0u;
    if (SPLIT > 0u) {
      row_start[r] = max(row_start[r], gl_WorkGroupID.z * SPLIT);
      row_end[r] = min(row_end[r], (gl_WorkGroupID.z + 1u) * SPLIT);  // at or below start: nothing visible
    }
  }
  qrow = row_q[0];
  qs = row_qs[0];
  start = row_start[0];
  end = row_end[0];
  // REGIONS: the cache row of position 0 of this row's sequence (the sum wraps in uint).
  region = REGIONS ? uint(path[p.path_offset + row]) - uint(pos[p.pos_offset + row]) : 0u;
  if (ONE_SUBGROUP) one_subgroup_attention();
  else workgroup_attention();
}
