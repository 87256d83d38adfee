#version 450
// Writes the k and v parts of each activation row into the f16 KV cache at the row's
// position. Cache layout per layer: [position][kv_dim] halves, two per uint.
#include "common.glsl"
layout(local_size_x = 64) in;
#include "grid.glsl"

layout(binding = 0, std430) readonly buffer Src { float src[]; };
layout(binding = 1, std430) readonly buffer Pos { int pos[]; };
layout(binding = 2, std430) writeonly buffer KCache { uint k_cache[]; };
layout(binding = 3, std430) writeonly buffer VCache { uint v_cache[]; };

layout(push_constant) uniform Push {
  uint rows;
  uint kv_dim;      // even
  uint k_offset;    // element offset of k in row 0
  uint v_offset;
  uint src_stride;
  uint pos_offset;
  uint capacity;    // positions in the cache
} p;

void main() {
  uint pairs = p.kv_dim / 2u;
  uint idx = linear_invocation();
  if (idx >= p.rows * pairs) return;
  uint row = idx / pairs, j = idx % pairs;
  int position = pos[p.pos_offset + row];
  if (position < 0 || uint(position) >= p.capacity) return;  // the host validates positions
  uint k = p.k_offset + row * p.src_stride + 2u * j;
  uint v = p.v_offset + row * p.src_stride + 2u * j;
  uint dst = uint(position) * pairs + j;
  k_cache[dst] = pack_half2_rne(src[k], src[k + 1u]);
  v_cache[dst] = pack_half2_rne(src[v], src[v + 1u]);
}
