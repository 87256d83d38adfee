#version 450
// Embedding row gather: out[t, :] = table[ids[t], :]. The table may be bound in row chunks
// (rows [row_base, row_base + row_count)) when it exceeds maxStorageBufferRange.
#define WEIGHT_BINDING 1
#define IQ_GRID_BINDING 3  // after ids, weights, out
#include "common.glsl"
layout(local_size_x_id = 0) in;

layout(binding = 0, std430) readonly buffer Ids { int ids[]; };
layout(binding = 2, std430) writeonly buffer Out { float outv[]; };

layout(push_constant) uniform Push {
  uint tokens;
  uint dim;
  uint row_base;
  uint row_count;
  uint ids_offset;
  uint out_offset;
  uint out_stride;
} p;

void main() {
  uint t = gl_WorkGroupID.x;
  if (t >= p.tokens) return;
  int id = ids[p.ids_offset + t];
  if (id < int(p.row_base) || id >= int(p.row_base + p.row_count)) return;
#if defined(W_QUANT)
  // A thread decodes whole 32-element groups of the row.
  uint src = uint(id - int(p.row_base)) * q_row_bytes(p.dim);
  for (uint g = gl_LocalInvocationID.x; g < p.dim / QGROUP; g += gl_WorkGroupSize.x) {
    QGroup q = q_load(src, g);
    [[unroll]] for (uint c = 0; c < QGROUP / 8; ++c) {
      float w[8];
      q_decode8(q, c, w);
      uint o = p.out_offset + t * p.out_stride + g * QGROUP + 8u * c;
      [[unroll]] for (uint i = 0; i < 8; ++i) outv[o + i] = w[i];
    }
  }
#else
  uint src = uint(id - int(p.row_base)) * p.dim;
  for (uint i = gl_LocalInvocationID.x; i < p.dim; i += gl_WorkGroupSize.x)
    outv[p.out_offset + t * p.out_stride + i] = wload(src + i);
#endif
}
