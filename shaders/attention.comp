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
#else
layout(binding = 0, std430) readonly buffer Q { float q[]; };
float qload(uint i) { return q[i]; }
layout(binding = 1, std430) readonly buffer KCache { uvec4 k_cache[]; };
layout(binding = 2, std430) readonly buffer VCache { uint v_cache[]; };
uvec4 kquad(uint q) { return k_cache[q]; }
uint vword(uint i) { return v_cache[i]; }
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
  uint splits;       // SPLIT: workgroups along z, the partial states per (row, head)
} p;

// llvmpipe (lavapipe) stops an invocation's loops once they have run 65,535 iterations in
// all. The loops inside the key loop therefore take 8 elements a turn (constant-bound inner
// loops unroll to straight code): with one a turn a 128-wide head reached the limit near
// 20,000 keys and silently ignored the rest; now a block of 64 keys costs about 50 turns,
// which the host checks against the context (ops::attention_max_keys).
// Sized by GROUP, so that a one-head kernel keeps its 2 KiB of shared memory per head.
// ONE_SUBGROUP uses none of it.
shared float sq[ONE_SUBGROUP ? 1 : GROUP * HEAD_DIM];
shared float sp[GROUP][ONE_SUBGROUP ? 1 : 256];
shared uint sslot[ONE_SUBGROUP ? 1 : 256];  // TREE: cache row of each key of the block
shared float red[GROUP][ONE_SUBGROUP ? 1 : 64];
// Output dims per thread: tid, tid + WG, ... below HEAD_DIM; ONE_SUBGROUP: the pairs
// (2 tid, 2 tid + 1), (2 (tid + WG), ...), ... below HEAD_DIM.
const uint DIMS = (HEAD_DIM + gl_WorkGroupSize.x - 1u) / gl_WorkGroupSize.x;
const uint PAIRS = (HEAD_DIM / 2u + gl_WorkGroupSize.x - 1u) / gl_WorkGroupSize.x;

// Each head's v over the workgroup (its maximum or its sum), for the GROUP heads at once. The
// loop over subgroups holds the heads inside it: llvmpipe counts loop turns, not heads.
void block_reduce(inout float v[MAX_GROUP], bool is_max) {
  [[unroll]] for (uint g = 0; g < GROUP; ++g) v[g] = is_max ? subgroupMax(v[g]) : subgroupAdd(v[g]);
  barrier();  // red[] may still be read from the previous reduction
  if (subgroupElect())
    [[unroll]] for (uint g = 0; g < GROUP; ++g) red[g][gl_SubgroupID] = v[g];
  barrier();
  [[unroll]] for (uint g = 0; g < GROUP; ++g) v[g] = red[g][0];
  for (uint s = 1; s < gl_NumSubgroups; ++s)
    [[unroll]] for (uint g = 0; g < GROUP; ++g) v[g] = is_max ? max(v[g], red[g][s]) : v[g] + red[g][s];
}

// The workgroup's row and heads, and what both paths derive from them.
const uint hd = HEAD_DIM;  // = p.head_dim
uint row, head0, tid, wg, kvh, kv_dim, qrow, start, end, region, path_base;
float qs;

// The row's cache row for the key at position j < end.
uint key_slot(uint j) {
  if (TREE && j >= path_base) return path_base + uint(path[p.path_offset + row * p.path_stride + (j - path_base)]);
  return region + j;
}

// SPLIT: where the partial state of (this dispatch's row, head, split) starts in the output
// buffer: m, l, then acc[head_dim].
uint partial_base(uint head) {
  return p.out_offset + ((gl_WorkGroupID.x * p.heads + head) * p.splits + gl_WorkGroupID.z) * (hd + 2u);
}
void write_split_state(float m[MAX_GROUP], float l[MAX_GROUP]) {
  [[unroll]] for (uint g = 0; g < GROUP; ++g) {
    outv[partial_base(head0 + g)] = m[g];
    outv[partial_base(head0 + g) + 1u] = l[g];  // 0: no key of the split was visible
  }
}

// ONE_SUBGROUP: lane tid scores key kb + tid of each block; the block's probabilities reach the
// lanes that own the output dims by shuffles.
void one_subgroup_attention() {
  // sq's values (q * qs) spread over the lanes: lane t holds dims t, t + WG, ... of each head;
  // the key's lane takes each from its holder by a shuffle (HEAD_DIM % WG == 0: the host).
  float qreg[MAX_GROUP][ATTENTION_MAX_HEAD_DIM / 8];
  [[unroll]] for (uint g = 0; g < GROUP; ++g)
    [[unroll]] for (uint c = 0; c < HEAD_DIM / gl_WorkGroupSize.x; ++c) qreg[g][c] = qload(qrow + g * hd + c * wg + tid) * qs;
  float m[MAX_GROUP], l[MAX_GROUP];
  float acc_lo[MAX_GROUP][ATTENTION_MAX_HEAD_DIM / 16], acc_hi[MAX_GROUP][ATTENTION_MAX_HEAD_DIM / 16];  // wg >= 8
  [[unroll]] for (uint g = 0; g < GROUP; ++g) {
    m[g] = -1.0 / 0.0;
    l[g] = 0.0;
    [[unroll]] for (uint i = 0; i < PAIRS; ++i) acc_lo[g][i] = acc_hi[g][i] = 0.0;
  }
  for (uint kb = start; kb < end; kb += wg) {
    uint j = kb + tid;
    bool visible = j < end;
    uint slot = visible ? key_slot(j) : 0u;
    float s[MAX_GROUP];
    [[unroll]] for (uint g = 0; g < GROUP; ++g) s[g] = -1.0 / 0.0;
    if (visible) {
      uint base = (slot * kv_dim + kvh * hd) / 8u;
      float dot_qk[MAX_GROUP];
      [[unroll]] for (uint g = 0; g < GROUP; ++g) dot_qk[g] = 0.0;
      [[unroll]] for (uint d = 0; d < hd; d += 8u) {
        uvec4 kq = kquad(base + d / 8u);
        [[unroll]] for (uint u = 0; u < 4u; ++u) {
          vec2 kk = unpackHalf2x16(kq[u]);
          uint e = d + 2u * u;  // the dims of kk
          [[unroll]] for (uint g = 0; g < GROUP; ++g) {
            dot_qk[g] = fma(subgroupShuffle(qreg[g][e / wg], e % wg), kk.x, dot_qk[g]);
            dot_qk[g] = fma(subgroupShuffle(qreg[g][(e + 1u) / wg], (e + 1u) % wg), kk.y, dot_qk[g]);
          }
        }
      }
      [[unroll]] for (uint g = 0; g < GROUP; ++g) s[g] = dot_qk[g];
    }
    float new_m[MAX_GROUP], prob[MAX_GROUP], total[MAX_GROUP];
    [[unroll]] for (uint g = 0; g < GROUP; ++g) {
      new_m[g] = max(m[g], subgroupMax(s[g]));
      prob[g] = visible ? exp(s[g] - new_m[g]) : 0.0;
      total[g] = subgroupAdd(prob[g]);
    }
    if (new_m[0] == -1.0 / 0.0) continue;
    float alpha[MAX_GROUP];
    [[unroll]] for (uint g = 0; g < GROUP; ++g) {
      alpha[g] = exp(m[g] - new_m[g]);
      l[g] = l[g] * alpha[g] + total[g];
    }
    uint count = min(wg, end - kb);
    [[unroll]] for (uint i = 0; i < PAIRS; ++i) {
      uint d = 2u * (tid + i * wg);
      bool owns = d < hd;  // else reads a valid word and stores nothing
      float lo[MAX_GROUP], hi[MAX_GROUP];
      [[unroll]] for (uint g = 0; g < GROUP; ++g) {
        lo[g] = acc_lo[g][i] * alpha[g];
        hi[g] = acc_hi[g][i] * alpha[g];
      }
      [[unroll]] for (uint jj = 0; jj < gl_WorkGroupSize.x; ++jj) {
        if (jj < count) {
          uint key = TREE ? subgroupShuffle(slot, jj) : region + kb + jj;
          vec2 v = unpackHalf2x16(vword(owns ? (key * kv_dim + kvh * hd + d) / 2u : 0u));
          [[unroll]] for (uint g = 0; g < GROUP; ++g) {
            float pj = subgroupShuffle(prob[g], jj);
            lo[g] = fma(pj, v.x, lo[g]);
            hi[g] = fma(pj, v.y, hi[g]);
          }
        }
      }
      [[unroll]] for (uint g = 0; g < GROUP; ++g) {
        acc_lo[g][i] = lo[g];
        acc_hi[g][i] = hi[g];
      }
    }
    [[unroll]] for (uint g = 0; g < GROUP; ++g) m[g] = new_m[g];
  }
  [[unroll]] for (uint i = 0; i < PAIRS; ++i) {
    uint d = 2u * (tid + i * wg);
    if (d < hd) {
      [[unroll]] for (uint g = 0; g < GROUP; ++g) {
        if (SPLIT > 0u) {
          uint o = partial_base(head0 + g) + 2u + d;
          outv[o] = acc_lo[g][i];
          outv[o + 1u] = acc_hi[g][i];
        } else {
          uint o = p.out_offset + row * p.out_stride + (head0 + g) * hd + d;
          outv[o] = l[g] > 0.0 ? acc_lo[g][i] / l[g] : 0.0;
          outv[o + 1u] = l[g] > 0.0 ? acc_hi[g][i] / l[g] : 0.0;
        }
      }
    }
  }
  if (SPLIT > 0u && tid == 0u) write_split_state(m, l);
}

// Several subgroups: q, the block's probabilities and its cache rows in shared memory.
void workgroup_attention() {
  for (uint d = tid; d < hd; d += wg)
    [[unroll]] for (uint g = 0; g < GROUP; ++g) sq[g * hd + d] = qload(qrow + g * hd + d) * qs;
  barrier();
  float m[MAX_GROUP], l[MAX_GROUP];
  float acc[MAX_GROUP][ATTENTION_MAX_HEAD_DIM / 32];  // dims tid, tid + wg, ... (wg >= 32)
  [[unroll]] for (uint g = 0; g < GROUP; ++g) {
    m[g] = -1.0 / 0.0;
    l[g] = 0.0;
    [[unroll]] for (uint i = 0; i < ATTENTION_MAX_HEAD_DIM / 32; ++i) acc[g][i] = 0.0;
  }

  for (uint kb = start; kb < end; kb += wg) {
    uint j = kb + tid;
    float s[MAX_GROUP];
    [[unroll]] for (uint g = 0; g < GROUP; ++g) s[g] = -1.0 / 0.0;
    bool visible = j < end;
    uint slot = visible ? key_slot(j) : region + j;
    if (visible) {
      uint base = (slot * kv_dim + kvh * hd) / 8u;  // in quads: kv_dim and hd are multiples of 8
      float dot_qk[MAX_GROUP];
      [[unroll]] for (uint g = 0; g < GROUP; ++g) dot_qk[g] = 0.0;
      for (uint d = 0; d < hd; d += 8u) {  // head_dim is a multiple of 8 (checked by the host)
        uvec4 kq = kquad(base + d / 8u);
        [[unroll]] for (uint u = 0; u < 4u; ++u) {
          vec2 kk = unpackHalf2x16(kq[u]);
          [[unroll]] for (uint g = 0; g < GROUP; ++g) {
            dot_qk[g] = fma(sq[g * hd + d + 2u * u], kk.x, dot_qk[g]);
            dot_qk[g] = fma(sq[g * hd + d + 2u * u + 1u], kk.y, dot_qk[g]);
          }
        }
      }
      [[unroll]] for (uint g = 0; g < GROUP; ++g) s[g] = dot_qk[g];
    }
    float block_max[MAX_GROUP], prob[MAX_GROUP], new_m[MAX_GROUP];
    [[unroll]] for (uint g = 0; g < GROUP; ++g) block_max[g] = s[g];
    block_reduce(block_max, true);
    [[unroll]] for (uint g = 0; g < GROUP; ++g) {
      new_m[g] = max(m[g], block_max[g]);
      prob[g] = visible ? exp(s[g] - new_m[g]) : 0.0;
      sp[g][tid] = prob[g];
    }
    if (TREE) sslot[tid] = slot;
    block_reduce(prob, false);  // now each head's block sum; its barriers also publish sp[]
    // A head with nothing visible yet keeps its state (visibility is the same for every head).
    if (new_m[0] == -1.0 / 0.0) continue;
    float alpha[MAX_GROUP];
    [[unroll]] for (uint g = 0; g < GROUP; ++g) {
      alpha[g] = exp(m[g] - new_m[g]);  // 0 when m is -inf
      l[g] = l[g] * alpha[g] + prob[g];
    }
    uint count = min(wg, end - kb);
    [[unroll]] for (uint i = 0; i < DIMS; ++i) {
      uint d = tid + i * wg;
      if (d >= hd) break;
      float a[MAX_GROUP];
      [[unroll]] for (uint g = 0; g < GROUP; ++g) a[g] = acc[g][i] * alpha[g];
      uint jj = 0;
      for (; jj + 8u <= count; jj += 8u)
        [[unroll]] for (uint u = 0; u < 8u; ++u) {
          uint idx = (TREE ? sslot[jj + u] : region + kb + jj + u) * kv_dim + kvh * hd + d;
          float v = kv_load(vword(idx / 2u), idx);
          [[unroll]] for (uint g = 0; g < GROUP; ++g) a[g] = fma(sp[g][jj + u], v, a[g]);
        }
      for (; jj < count; ++jj) {
        uint idx = (TREE ? sslot[jj] : region + kb + jj) * kv_dim + kvh * hd + d;
        float v = kv_load(vword(idx / 2u), idx);
        [[unroll]] for (uint g = 0; g < GROUP; ++g) a[g] = fma(sp[g][jj], v, a[g]);
      }
      [[unroll]] for (uint g = 0; g < GROUP; ++g) acc[g][i] = a[g];
    }
    [[unroll]] for (uint g = 0; g < GROUP; ++g) m[g] = new_m[g];
  }
  [[unroll]] for (uint i = 0; i < DIMS; ++i) {
    uint d = tid + i * wg;
    if (d >= hd) break;
    [[unroll]] for (uint g = 0; g < GROUP; ++g) {
      if (SPLIT > 0u) outv[partial_base(head0 + g) + 2u + d] = acc[g][i];
      else outv[p.out_offset + row * p.out_stride + (head0 + g) * hd + d] = l[g] > 0.0 ? acc[g][i] / l[g] : 0.0;
    }
  }
  if (SPLIT > 0u && tid == 0u) write_split_state(m, l);
}

void main() {
  row = p.row0 + gl_WorkGroupID.x;
  head0 = gl_WorkGroupID.y * GROUP;
  tid = gl_LocalInvocationID.x;
  wg = gl_WorkGroupSize.x;
  int position = pos[p.pos_offset + row];
  path_base = TREE && p.path_base_slot >= 0 ? uint(path[p.path_base_slot]) : p.path_base;
  kvh = head0 / (p.heads / p.kv_heads);  // the host keeps a group within one KV head
  kv_dim = p.kv_heads * hd;
  qrow = p.q_offset + row * p.q_stride + head0 * hd;
  float temperature = 1.0;
  if (QSCALE == 1u) temperature = qscale[row];
  if (QSCALE == 2u) temperature = log(floor((float(position) + 1.0) / p.floor_scale) + 1.0) * p.attn_scale + 1.0;
  qs = p.scale * temperature;
  end = TREE ? uint(position) + 1u : min(p.kv_len, uint(position) + 1u);
  start = p.chunk > 0u ? (uint(position) / p.chunk) * p.chunk : 0u;
  if (SPLIT > 0u) {
    start = max(start, gl_WorkGroupID.z * SPLIT);
    end = min(end, (gl_WorkGroupID.z + 1u) * SPLIT);  // at or below start: nothing visible
  }
  // REGIONS: the cache row of position 0 of this row's sequence (the sum wraps in uint).
  region = REGIONS ? uint(path[p.path_offset + row]) - uint(position) : 0u;
  if (ONE_SUBGROUP) one_subgroup_attention();
  else workgroup_attention();
}
