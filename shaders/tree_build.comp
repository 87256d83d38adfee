#version 450
#extension GL_EXT_control_flow_attributes : require
// Builds an EAGLE-2 dynamic tree on the device, one workgroup (docs/tree.md; the reference is
// tree-spec.md §3-4). Candidates have global ids: level 1 = 0..K-1, expansion i's children
// K + i K^2 + r K + j (frontier row r, child rank j); every top-k is a stable descending sort
// (equal scores keep ascending index order).
//   MODE 0, level 1: the catch-up row's top-K become candidates 0..K-1 and the first frontier.
//   MODE 1, expansion `step`: the K frontier rows' top-K children get cumulative scores
//     (parent + log p, float32), join the pool, and the best K become the next frontier.
//   MODE 2, select: the best M-1 of the pool, sorted by global id, become nodes 1..M-1 after the
//     root; writes each node's token, parent, depth, position and ancestor path for verification,
//     and its cumulative score (read back for --spec-draft-tokens auto and debugging).
// A frontier row runs as draft scratch row K * step + r at position base + step; `step_path`
// lists the scratch rows of its ancestors and itself (the draft attention's tree path),
// `step_gather` the u-history row of its parent (0: the catch-up row; 1 + K i + r: row (i, r)).
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint MODE = 0;
#define TREE_MAX_K 16
#define TREE_MAX_NODES 64

layout(binding = 0, std430) buffer F { float f[]; };
layout(binding = 1, std430) buffer I { int iv[]; };

layout(push_constant) uniform Push {
  uint k;           // top-k
  uint levels;      // S: path entries per draft row
  uint nodes;       // M: verified nodes including the root
  uint pool;        // candidates in the pool (select)
  uint step;        // expansion index (MODE 1)
  uint i_base;      // MODE 2: iv[i_base] = P, the root's position
  uint i_root;      // MODE 2: iv[i_root] = the root token
  // float offsets
  uint f_topk, f_pool, f_front, f_node;
  // int offsets
  uint i_topk, i_pool_tok, i_pool_parent, i_front_gid, i_step_ids, i_step_gather, i_step_path;
  uint i_tok, i_pos, i_path, i_parent, i_depth;
} p;

shared float cand_score[TREE_MAX_K * TREE_MAX_K];
shared uint new_from[TREE_MAX_K];   // MODE 1: the new frontier's candidate index t = r K + j
shared int old_path[TREE_MAX_K * 32];
shared uint chosen[TREE_MAX_NODES];
shared uint sorted_ids[TREE_MAX_NODES];
shared int parent_node[TREE_MAX_NODES];

bool better(float v, uint i, float bv, uint bi) { return v > bv || (v == bv && i < bi); }

void level_one() {
  uint t = gl_LocalInvocationID.x;
  if (t >= p.k) return;
  float lp = f[p.f_topk + t];
  int tok = iv[p.i_topk + t];
  f[p.f_pool + t] = lp;
  iv[p.i_pool_tok + t] = tok;
  iv[p.i_pool_parent + t] = -1;
  f[p.f_front + t] = lp;
  iv[p.i_front_gid + t] = int(t);
  iv[p.i_step_ids + t] = tok;
  iv[p.i_step_gather + t] = 0;
  iv[p.i_step_path + t * p.levels] = int(t);
}

void expand() {
  uint t = gl_LocalInvocationID.x, k = p.k, kk = p.k * p.k, i = p.step;
  uint r = t / max(k, 1u);
  if (t < kk) {
    float score = f[p.f_front + r] + f[p.f_topk + t];
    uint gid = k + i * kk + t;
    f[p.f_pool + gid] = score;
    iv[p.i_pool_tok + gid] = iv[p.i_topk + t];
    iv[p.i_pool_parent + gid] = iv[p.i_front_gid + r];
    cand_score[t] = score;
  }
  if (t < k)
    for (uint d = 0; d <= i; ++d) old_path[t * 32u + d] = iv[p.i_step_path + t * p.levels + d];
  barrier();
  if (t < kk) {
    uint rank = 0;
    for (uint u = 0; u < kk; ++u) rank += better(cand_score[u], u, cand_score[t], t) ? 1u : 0u;
    if (rank < k) new_from[rank] = t;
  }
  barrier();
  if (t < k) {
    uint from = new_from[t], pr = from / k;
    uint gid = k + i * kk + from;
    f[p.f_front + t] = cand_score[from];
    iv[p.i_front_gid + t] = int(gid);
    iv[p.i_step_ids + t] = iv[p.i_topk + from];
    iv[p.i_step_gather + t] = int(1u + k * i + pr);
    for (uint d = 0; d <= i; ++d) iv[p.i_step_path + t * p.levels + d] = old_path[pr * 32u + d];
    iv[p.i_step_path + t * p.levels + i + 1u] = int(k * (i + 1u) + t);
  }
}

void select_nodes() {
  uint t = gl_LocalInvocationID.x, wg = gl_WorkGroupSize.x;
  uint want = p.nodes - 1u;
  // Rank of each candidate among all (stable): chosen when below M - 1. Eight comparisons a
  // loop turn (llvmpipe stops an invocation's loops after 65,535 turns in all).
  for (uint g = t; g < p.pool; g += wg) {
    float s = f[p.f_pool + g];
    uint rank = 0;
    uint h = 0;
    for (; h + 8u <= p.pool && rank < want; h += 8u)
      [[unroll]] for (uint u = 0; u < 8u; ++u) rank += better(f[p.f_pool + h + u], h + u, s, g) ? 1u : 0u;
    for (; h < p.pool && rank < want; ++h) rank += better(f[p.f_pool + h], h, s, g) ? 1u : 0u;
    if (rank < want) chosen[rank] = g;
  }
  barrier();
  if (t < want) {
    uint g = chosen[t], order = 0;
    for (uint m = 0; m < want; ++m) order += chosen[m] < g ? 1u : 0u;
    sorted_ids[1u + order] = g;
  }
  barrier();
  if (t == 0u) parent_node[0] = -1;
  if (t >= 1u && t <= want) {
    int pg = iv[p.i_pool_parent + sorted_ids[t]];
    int node = 0;  // level-1 candidates hang from the root
    for (uint m = 1; m <= want; ++m)
      if (int(sorted_ids[m]) == pg) node = int(m);
    parent_node[t] = node;
  }
  barrier();
  if (t <= want) {
    uint depth = 0;
    for (int m = int(t); m > 0; m = parent_node[m]) ++depth;
    uint row = p.i_path + t * (p.levels + 1u);
    int m = int(t);
    for (uint d = depth + 1u; d > 0u; --d) {
      iv[row + d - 1u] = m;
      m = m > 0 ? parent_node[m] : 0;
    }
    iv[p.i_tok + t] = t == 0u ? iv[p.i_root] : iv[p.i_pool_tok + sorted_ids[t]];
    iv[p.i_pos + t] = iv[p.i_base] + int(depth);
    iv[p.i_parent + t] = parent_node[t];
    iv[p.i_depth + t] = int(depth);
    f[p.f_node + t] = t == 0u ? 0.0 : f[p.f_pool + sorted_ids[t]];
  }
}

void main() {
  if (MODE == 0u) level_one();
  if (MODE == 1u) expand();
  if (MODE == 2u) select_nodes();
}
