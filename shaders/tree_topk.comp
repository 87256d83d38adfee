#version 450
// The K best entries of each row of draft logits by log-probability, for tree drafting: one
// workgroup per row writes lp[row * K + j] = log_softmax(row)[id_j] and tok[row * K + j] =
// id_j + d2t[id_j] (the target-vocabulary token) for j < K, best first. Order: descending
// log-probability, equal values by ascending id (a stable sort, as the reference's tie rule).
// log_softmax is computed as torch does: (x - max) - log(sum(exp(x - max))).
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const bool HAS_D2T = false;
#define TOPK_MAX 16

layout(binding = 0, std430) readonly buffer X { float x[]; };
layout(binding = 1, std430) readonly buffer D2T { int d2t[]; };
layout(binding = 2, std430) writeonly buffer Lp { float lp[]; };
layout(binding = 3, std430) writeonly buffer Tok { int tok[]; };

layout(push_constant) uniform Push {
  uint rows;
  uint n;
  uint offset;
  uint stride;
  uint k;
  uint lp_offset;
  uint tok_offset;
} p;

shared float red_value[256];
shared uint red_index[256];

bool better(float v, uint i, float bv, uint bi) { return v > bv || (v == bv && i < bi); }

// Reduces red_value (max or sum) over the workgroup; all threads get the result.
float reduce(float v, bool is_max) {
  uint tid = gl_LocalInvocationID.x;
  barrier();
  red_value[tid] = v;
  barrier();
  for (uint s = gl_WorkGroupSize.x / 2u; s > 0u; s >>= 1) {
    if (tid < s) red_value[tid] = is_max ? max(red_value[tid], red_value[tid + s]) : red_value[tid] + red_value[tid + s];
    barrier();
  }
  return red_value[0];
}

void main() {
  uint row = gl_WorkGroupID.x;
  if (row >= p.rows) return;
  uint tid = gl_LocalInvocationID.x, wg = gl_WorkGroupSize.x;
  uint base = p.offset + row * p.stride;

  float m = -1.0 / 0.0;
  for (uint i = tid; i < p.n; i += wg) m = max(m, x[base + i]);
  m = reduce(m, true);
  float sum = 0.0;
  for (uint i = tid; i < p.n; i += wg) sum += exp(x[base + i] - m);
  float lse = log(reduce(sum, false));

  // Each thread keeps its own best K (its ids ascend, so an equal value never displaces).
  float bv[TOPK_MAX];
  uint bi[TOPK_MAX];
  for (uint j = 0; j < TOPK_MAX; ++j) { bv[j] = -1.0 / 0.0; bi[j] = 0xffffffffu; }
  for (uint i = tid; i < p.n; i += wg) {
    float v = (x[base + i] - m) - lse;
    if (!better(v, i, bv[p.k - 1u], bi[p.k - 1u])) continue;
    uint at = p.k - 1u;
    while (at > 0u && better(v, i, bv[at - 1u], bi[at - 1u])) {
      bv[at] = bv[at - 1u];
      bi[at] = bi[at - 1u];
      --at;
    }
    bv[at] = v;
    bi[at] = i;
  }

  // K rounds: the best head over all threads wins and its thread moves to its next entry.
  uint head = 0;
  for (uint j = 0; j < p.k; ++j) {
    barrier();
    red_value[tid] = head < p.k ? bv[head] : -1.0 / 0.0;
    red_index[tid] = head < p.k ? bi[head] : 0xffffffffu;
    barrier();
    for (uint s = wg / 2u; s > 0u; s >>= 1) {
      if (tid < s && better(red_value[tid + s], red_index[tid + s], red_value[tid], red_index[tid])) {
        red_value[tid] = red_value[tid + s];
        red_index[tid] = red_index[tid + s];
      }
      barrier();
    }
    uint win = red_index[0];
    if (head < p.k && bi[head] == win) ++head;
    if (tid == 0u) {
      uint id = win == 0xffffffffu ? 0u : win;
      lp[p.lp_offset + row * p.k + j] = red_value[0];
      tok[p.tok_offset + row * p.k + j] = HAS_D2T ? int(id) + d2t[id] : int(id);
    }
  }
}
