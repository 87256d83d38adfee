#version 450
// Rotary position embedding, in place, over `heads` consecutive heads of each row (q and k
// heads of a fused qkv row are rotated by one dispatch). cos/sin come from a table the host
// computes in double precision per (position, frequency), so no GPU sin() of large angles.
//   PAIRING 0 (rotate-half, HF Llama-3): pairs (i, i + hd/2)
//   PAIRING 1 (interleaved, HF Llama-4): pairs (2i, 2i + 1)
layout(local_size_x = 64) in;
#include "grid.glsl"
layout(constant_id = 0) const uint PAIRING = 0;

layout(binding = 0, std430) buffer X { float x[]; };
layout(binding = 1, std430) readonly buffer Pos { int pos[]; };
layout(binding = 2, std430) readonly buffer Table { vec2 cos_sin[]; };  // [max_pos][hd/2]

layout(push_constant) uniform Push {
  uint rows;
  uint heads;
  uint head_dim;
  uint x_offset;   // element offset of the first rotated head of row 0
  uint x_stride;
  uint pos_offset;
  uint table_rows; // positions in the table
} p;

void main() {
  uint half_dim = p.head_dim / 2u;
  uint idx = linear_invocation();
  uint per_row = p.heads * half_dim;
  if (idx >= p.rows * per_row) return;
  uint row = idx / per_row, rest = idx % per_row;
  uint head = rest / half_dim, i = rest % half_dim;
  int position = pos[p.pos_offset + row];
  if (position < 0 || uint(position) >= p.table_rows) return;  // the host validates positions
  vec2 cs = cos_sin[uint(position) * half_dim + i];
  uint base = p.x_offset + row * p.x_stride + head * p.head_dim;
  uint a = PAIRING == 0u ? base + i : base + 2u * i;
  uint b = PAIRING == 0u ? base + i + half_dim : base + 2u * i + 1u;
  float x0 = x[a], x1 = x[b];
  x[a] = x0 * cs.x - x1 * cs.y;
  x[b] = x1 * cs.x + x0 * cs.y;
}
