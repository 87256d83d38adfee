#version 450
// Rotary position embedding, in place, over `heads` consecutive heads of each row (q and k
// heads of a fused qkv row are rotated by one dispatch). cos/sin come from a table the host
// computes in double precision per (position, frequency), so no GPU sin() of large angles.
//   PAIRING 0 (rotate-half, HF Llama-3): pairs (i, i + hd/2)
//   PAIRING 1 (interleaved, HF Llama-4): pairs (2i, 2i + 1)
// The KV_WRITE variant (rope_kv_write) also does kv_write.comp's work in the same dispatch:
// the `heads` q heads are rotated in place, the kv_heads k heads that follow them are rotated
// straight into the f16 K cache at each row's slot and the v heads copied into the V cache. A k
// element is computed by the expression the in-place rotation uses, so the cache gets the bits
// rope then kv_write give; qkv's own k columns stay unrotated (only the cache's are read after).
layout(local_size_x = 64) in;
#include "grid.glsl"
layout(constant_id = 0) const uint PAIRING = 0;
#include "rope_pair.glsl"

layout(binding = 0, std430) buffer X { float x[]; };
layout(binding = 1, std430) readonly buffer Pos { int pos[]; };
layout(binding = 2, std430) readonly buffer Table { vec2 cos_sin[]; };  // [max_pos][hd/2]
#if defined(KV_WRITE)
#include "common.glsl"
layout(binding = 3, std430) readonly buffer Slots { int slots[]; };
layout(binding = 4, std430) writeonly buffer KCache { uint k_cache[]; };  // [capacity][kv_dim] halves
layout(binding = 5, std430) writeonly buffer VCache { uint v_cache[]; };
#endif

layout(push_constant) uniform Push {
  uint rows;
  uint heads;
  uint head_dim;
  uint x_offset;   // element offset of the first rotated head of row 0
  uint x_stride;
  uint pos_offset;
  uint table_rows; // positions in the table
  uint kv_heads;   // KV_WRITE: k heads (then as many v heads) after the q heads
  uint slot_offset;
  uint capacity;   // KV_WRITE: rows of the cache
} p;

// Rotates pair i of the head at `base` in place.
void rotate_pair(uint base, uint i, int position) {
  uint half_dim = p.head_dim / 2u;
  vec2 cs = cos_sin[uint(position) * half_dim + i];
  uint a = PAIRING == 0u ? base + i : base + 2u * i;
  uint b = PAIRING == 0u ? base + i + half_dim : base + 2u * i + 1u;
  vec2 r = rope_rotate(x[a], x[b], cs);
  x[a] = r.x;
  x[b] = r.y;
}

#if defined(KV_WRITE)
// Element e of the head at `base` after rotation, by rotate_pair's arithmetic, without writing.
float rotated(uint base, uint e, int position) {
  RopeSlot s = rope_slot(e, p.head_dim, PAIRING);
  vec2 cs = cos_sin[uint(position) * (p.head_dim / 2u) + s.freq];
  return rope_rotated(x[base + e], x[base + s.partner], s.first, cs);
}
#endif

void main() {
  uint half_dim = p.head_dim / 2u;
  uint idx = linear_invocation();
  uint q_pairs = p.heads * half_dim;
#if defined(KV_WRITE)
  uint kv_pairs = p.kv_heads * half_dim;  // element pairs of a row's k (and of its v)
  if (idx >= p.rows * (q_pairs + 2u * kv_pairs)) return;
#else
  if (idx >= p.rows * q_pairs) return;
#endif
  if (idx < p.rows * q_pairs) {
    uint row = idx / q_pairs, rest = idx % q_pairs;
    int position = pos[p.pos_offset + row];
    if (position < 0 || uint(position) >= p.table_rows) return;  // the host validates positions
    rotate_pair(p.x_offset + row * p.x_stride + (rest / half_dim) * p.head_dim, rest % half_dim, position);
    return;
  }
#if defined(KV_WRITE)
  idx -= p.rows * q_pairs;
  bool is_v = idx >= p.rows * kv_pairs;
  if (is_v) idx -= p.rows * kv_pairs;
  uint row = idx / kv_pairs, j = idx % kv_pairs;
  int position = pos[p.pos_offset + row], slot = slots[p.slot_offset + row];
  if (position < 0 || uint(position) >= p.table_rows || slot < 0 || uint(slot) >= p.capacity) return;
  uint k_base = p.x_offset + row * p.x_stride + p.heads * p.head_dim;
  uint dst = uint(slot) * kv_pairs + j;
  if (is_v) {
    uint v = k_base + p.kv_heads * p.head_dim + 2u * j;
    v_cache[dst] = pack_half2_rne(x[v], x[v + 1u]);
  } else {
    uint head_base = k_base + (2u * j / p.head_dim) * p.head_dim, e = 2u * j % p.head_dim;
    k_cache[dst] = pack_half2_rne(rotated(head_base, e, position), rotated(head_base, e + 1u, position));
  }
#endif
}
