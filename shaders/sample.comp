#version 450
// Token choice and speculative acceptance from logits rows, one workgroup per row.
// The distribution p of a row is HF's: logits / temperature, then top-k (every logit >= the
// k-th largest), then top-p (the most likely tokens while the mass before them is < p),
// renormalised. Row r samples the token at absolute position pos0 + r (pos0 + positions[r]
// when has_positions is set: the rows of a tree verify batch sit at P + depth); its random numbers
// come from a counter-based hash of (seed, position, stream, index), so a seed reproduces a
// run on any device. The settings (temperature, top-k, top-p, seed) are the push constants',
// or, with has_row_params, row r's own record in RowParams (record row_index[r] with
// has_row_index, else r): rows of one dispatch may then each sample their own way, the greedy
// ones included, and a row's result depends only on its own record.
//   draft[r] < 0: ids[r] = a draw from p (temperature 0: the argmax, ties to the lowest id).
//   draft[r] = d: accept[r] = (u < p(d)) and ids[r] = a draw from p with d removed, the
//                 replacement at a rejection (temperature 0: accept iff d is the argmax).
// MODE 1 (drafting by sampling): row r is a draft-vocabulary row; ids[r] = the draw mapped to
//   the target vocabulary through d2t, and q[r, :] = the filtered distribution it came from.
// MODE 2 (verifying sampled drafts): accept[r] = (u < p(d) / q(d)), with q = q[r, :] seen in
//   the target vocabulary through t2d; ids[r] = a draw from max(0, p - q), renormalised.
// A row holding a NaN or an infinity decides nothing: ids[r] = NON_FINITE_ROW_ID (unmapped),
// accept[r] = 0, and its q row is not written.
// RULE selects deliberately wrong rules, kept as negative controls for the tests:
//   1: accept iff d is the argmax (greedy acceptance at temperature > 0);
//   2: resample from p without removing d.
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_control_flow_attributes : require
#include "shared_constants.h"
// The workgroup size (ops::sample_workgroup): 256, or 64 for rows of up to 16,384 logits,
// where a 256-invocation workgroup mostly waits at the barriers of the threshold searches
// (on llvmpipe every barrier switches between all of a workgroup's subgroups).
layout(local_size_x_id = 2) in;
layout(constant_id = 0) const uint RULE = 0;
layout(constant_id = 1) const uint MODE = 0;

layout(binding = 0, std430) readonly buffer Logits { float logits[]; };
layout(binding = 1, std430) readonly buffer Draft { int draft[]; };
layout(binding = 2, std430) writeonly buffer Ids { int ids[]; };
layout(binding = 3, std430) writeonly buffer Accept { int accept[]; };
layout(binding = 4, std430) buffer Q { float q[]; };               // [rows, draft vocab]
layout(binding = 5, std430) readonly buffer D2T { int d2t[]; };    // MODE 1: draft -> target offset
layout(binding = 6, std430) readonly buffer T2D { int t2d[]; };    // MODE 2: target -> draft id or -1
layout(binding = 7, std430) readonly buffer Positions { int positions[]; };  // when has_positions
layout(binding = 8, std430) readonly buffer RowParams { uint row_params[]; };  // SAMPLE_ROW_WORDS a record
layout(binding = 9, std430) readonly buffer RowIndex { int row_index[]; };    // when has_row_index

layout(push_constant) uniform Push {
  uint rows;
  uint n;
  uint offset;
  uint stride;
  float inv_temp;   // 0: greedy
  uint top_k;       // 0: off
  float top_p;      // 1: off
  uint seed_lo;
  uint seed_hi;
  uint pos0;
  uint draft_offset;
  uint has_draft;
  uint out_offset;
  uint stream;      // first random stream: the draft's draws must not reuse the target's
  uint q_width;     // draft vocabulary size (MODE 1 and 2)
  uint has_d2t;
  uint has_positions;
  uint positions_offset;
  uint has_row_params;
  uint row_params_offset;  // word of record 0
  uint has_row_index;
  uint row_index_offset;
} p;

// The settings this workgroup's row samples with (the same in every invocation, so that the
// branches on them below stay uniform around the barriers).
float inv_temp;
uint top_k;
float top_p;
uint seed_lo, seed_hi;

void load_settings(uint row) {
  if (p.has_row_params == 0u) {
    inv_temp = p.inv_temp; top_k = p.top_k; top_p = p.top_p; seed_lo = p.seed_lo; seed_hi = p.seed_hi;
    return;
  }
  uint record = p.has_row_index != 0u ? uint(row_index[p.row_index_offset + row]) : row;
  uint at = p.row_params_offset + record * SAMPLE_ROW_WORDS;
  inv_temp = uintBitsToFloat(row_params[at + SAMPLE_ROW_INV_TEMP]);
  top_k = row_params[at + SAMPLE_ROW_TOP_K];
  top_p = uintBitsToFloat(row_params[at + SAMPLE_ROW_TOP_P]);
  seed_lo = row_params[at + SAMPLE_ROW_SEED_LO];
  seed_hi = row_params[at + SAMPLE_ROW_SEED_HI];
}

shared float red_f[64];
shared uint red_u[64];

float sum_all(float v) {
  v = subgroupAdd(v);
  barrier();
  if (subgroupElect()) red_f[gl_SubgroupID] = v;
  barrier();
  float s = 0.0;
  for (uint i = 0; i < gl_NumSubgroups; ++i) s += red_f[i];
  return s;
}
float max_all(float v) {
  v = subgroupMax(v);
  barrier();
  if (subgroupElect()) red_f[gl_SubgroupID] = v;
  barrier();
  float s = red_f[0];
  for (uint i = 1; i < gl_NumSubgroups; ++i) s = max(s, red_f[i]);
  return s;
}
uint count_all(uint v) {
  v = subgroupAdd(v);
  barrier();
  if (subgroupElect()) red_u[gl_SubgroupID] = v;
  barrier();
  uint s = 0u;
  for (uint i = 0; i < gl_NumSubgroups; ++i) s += red_u[i];
  return s;
}

// A 32-bit counter-based hash (murmur3 finaliser rounds over the key words); the host side
// (runtime/engine/sampler.cpp) computes the same numbers.
uint mix32(uint h) {
  h ^= h >> 16; h *= 0x85ebca6bu; h ^= h >> 13; h *= 0xc2b2ae35u; h ^= h >> 16;
  return h;
}
uint hash5(uint a, uint b, uint c, uint d, uint e) {
  uint h = mix32(a ^ 0x9e3779b9u);
  h = mix32(h ^ b);
  h = mix32(h ^ c);
  h = mix32(h ^ d);
  return mix32(h ^ e);
}
// Uniform in (0, 1): never 0, so that logs stay finite.
float uniform01(uint h) { return (float(h >> 8) + 0.5) * (1.0 / 16777216.0); }

// Order-preserving map of floats to uints, for threshold searches.
uint key(float f) {
  uint u = floatBitsToUint(f);
  return (u & 0x80000000u) != 0u ? ~u : u | 0x80000000u;
}

void main() {
  uint row = gl_WorkGroupID.x;
  if (row >= p.rows) return;
  uint tid = gl_LocalInvocationID.x, wg = gl_WorkGroupSize.x;
  uint base = p.offset + row * p.stride;
  int d = p.has_draft != 0u ? draft[p.draft_offset + row] : -1;
  uint position = p.pos0 + (p.has_positions != 0u ? uint(positions[p.positions_offset + row]) : row);
  load_settings(row);

  // The argmax (ties to the lowest id) decides greedy rows and the wrong rule 1.
  float m = -1.0 / 0.0;
  uint non_finite = 0u;
  for (uint i = tid; i < p.n; i += wg) {
    float l = logits[base + i];
    m = max(m, l);
    // By the bits, so that no compiler's fast-math can fold the test away.
    if ((floatBitsToUint(l) & 0x7f800000u) == 0x7f800000u) non_finite = 1u;
  }
  m = max_all(m);
  if (count_all(non_finite) != 0u) {  // the same count in every invocation: all return
    if (tid == 0u) {
      ids[p.out_offset + row] = NON_FINITE_ROW_ID;
      accept[p.out_offset + row] = 0;
    }
    return;
  }
  uint first_max = 0xffffffffu;
  for (uint i = tid; i < p.n; i += wg)
    if (logits[base + i] == m) first_max = min(first_max, i);
  first_max = subgroupMin(first_max);
  barrier();
  if (subgroupElect()) red_u[gl_SubgroupID] = first_max;
  barrier();
  uint argmax_id = red_u[0];
  for (uint i = 1; i < gl_NumSubgroups; ++i) argmax_id = min(argmax_id, red_u[i]);
  barrier();

  if (inv_temp == 0.0) {
    if (MODE == 1u)
      for (uint i = tid; i < p.n; i += wg) q[row * p.q_width + i] = i == argmax_id ? 1.0 : 0.0;
    if (tid == 0u) {
      int id = int(argmax_id);
      if (MODE == 1u && p.has_d2t != 0u) id += d2t[argmax_id];
      ids[p.out_offset + row] = id;
      accept[p.out_offset + row] = d >= 0 && uint(d) == argmax_id ? 1 : 0;
    }
    return;
  }

  // The bit-by-bit searches below pass over the row 63 times; their loops take four elements
  // a turn because llvmpipe (lavapipe) stops an invocation's loops after 65,535 iterations in
  // all, which a 202,048-token row at one element a turn comes within 15% of.
  // top-k: the largest threshold t with at least k logits >= t, built bit by bit from the top.
  uint kmin = 0u;
  if (top_k > 0u && top_k < p.n) {
    for (int bit = 31; bit >= 0; --bit) {
      uint cand = kmin | (1u << uint(bit));
      uint c = 0u;
      for (uint i0 = tid; i0 < p.n; i0 += 4u * wg)
        [[unroll]] for (uint u = 0; u < 4u; ++u) {
          uint i = i0 + u * wg;
          if (i < p.n) c += key(logits[base + i]) >= cand ? 1u : 0u;
        }
      if (count_all(c) >= top_k) kmin = cand;
    }
  }
  // Unnormalised probabilities e_i = exp((l_i - m) / T) of the top-k set, and their mass.
  float z = 0.0;
  for (uint i = tid; i < p.n; i += wg) {
    float l = logits[base + i];
    if (key(l) >= kmin) z += exp((l - m) * inv_temp);
  }
  z = sum_all(z);
  // top-p: the largest threshold t on e with mass(e >= t) >= top_p * z.
  uint emin = 0u;
  if (top_p < 1.0) {
    // e is in (0, 1], whose float bits order like the floats: build the threshold bit by bit.
    for (int bit = 30; bit >= 0; --bit) {
      uint cand = emin | (1u << uint(bit));
      float s = 0.0;
      for (uint i0 = tid; i0 < p.n; i0 += 4u * wg)
        [[unroll]] for (uint u = 0; u < 4u; ++u) {
          uint i = i0 + u * wg;
          if (i >= p.n) break;
          float l = logits[base + i];
          float e = exp((l - m) * inv_temp);
          if (key(l) >= kmin && floatBitsToUint(e) >= cand) s += e;
        }
      if (sum_all(s) >= top_p * z) emin = cand;
    }
    float s = 0.0;
    for (uint i = tid; i < p.n; i += wg) {
      float l = logits[base + i];
      float e = exp((l - m) * inv_temp);
      if (key(l) >= kmin && floatBitsToUint(e) >= emin) s += e;
    }
    z = sum_all(s);
  }

  // Gumbel-max draw over the kept tokens (d removed unless RULE 2): argmax of
  // (l - m) / T - log(-log(u_i)), ties to the lowest id.
  float best = -1.0 / 0.0;
  uint best_id = 0xffffffffu;
  float pd = 0.0, qd = 0.0;
  bool residual = MODE == 2u && d >= 0;  // a rejected sampled draft is replaced from max(0, p - q)
  for (uint i = tid; i < p.n; i += wg) {
    float l = logits[base + i];
    float e = exp((l - m) * inv_temp);
    bool kept = key(l) >= kmin && floatBitsToUint(e) >= emin;
    if (MODE == 1u) q[row * p.q_width + i] = kept ? e / z : 0.0;
    float qi = 0.0;
    if (residual) {
      int j = t2d[i];
      qi = j >= 0 ? q[row * p.q_width + uint(j)] : 0.0;
      if (int(i) == d) qd = qi;
    }
    if (kept && int(i) == d) pd = e / z;
    float noise = -log(-log(uniform01(hash5(seed_lo, seed_hi, position, p.stream + 2u, i))));
    float g;
    if (residual) {
      float r = (kept ? e / z : 0.0) - qi;
      if (r <= 0.0) continue;
      g = log(r) + noise;
    } else {
      if (!kept || (MODE == 0u && int(i) == d && RULE != 2u)) continue;
      g = (l - m) * inv_temp + noise;
    }
    if (g > best || (g == best && i < best_id)) { best = g; best_id = i; }
  }
  pd = sum_all(pd);
  if (residual) qd = sum_all(qd);
  float top = subgroupMax(best);
  uint cand = best == top ? best_id : 0xffffffffu;
  cand = subgroupMin(cand);
  barrier();
  if (subgroupElect()) { red_f[gl_SubgroupID] = top; red_u[gl_SubgroupID] = cand; }
  barrier();
  if (tid == 0u) {
    float b = red_f[0];
    uint bid = red_u[0];
    for (uint i = 1; i < gl_NumSubgroups; ++i)
      if (red_f[i] > b || (red_f[i] == b && red_u[i] < bid)) { b = red_f[i]; bid = red_u[i]; }
    // Nothing left after removing d means p(d) = 1: d is always accepted.
    int id = bid == 0xffffffffu ? max(d, 0) : int(bid);
    if (MODE == 1u && p.has_d2t != 0u) id += d2t[id];
    ids[p.out_offset + row] = id;
    float u = uniform01(hash5(seed_lo, seed_hi, position, p.stream + 1u, 0u));
    bool ok;
    if (RULE == 1u) ok = d >= 0 && uint(d) == argmax_id;
    else if (residual) ok = qd > 0.0 && u < pd / qd;
    else ok = d >= 0 && u < pd;
    accept[p.out_offset + row] = ok ? 1 : 0;
  }
}
