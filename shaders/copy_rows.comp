#version 450
// Strided f32 row copy: dst[r, c] = src[r, c] for c < width. Used for hidden-state taps,
// which land at a column offset of a [rows, taps * hidden] buffer.
layout(local_size_x = 64) in;
#include "grid.glsl"

layout(binding = 0, std430) readonly buffer Src { float src[]; };
layout(binding = 1, std430) writeonly buffer Dst { float dst[]; };

layout(push_constant) uniform Push {
  uint rows;
  uint width;
  uint src_offset;
  uint src_stride;
  uint dst_offset;
  uint dst_stride;
} p;

void main() {
  uint idx = linear_invocation();
  if (idx >= p.rows * p.width) return;
  uint r = idx / p.width, c = idx % p.width;
  dst[p.dst_offset + r * p.dst_stride + c] = src[p.src_offset + r * p.src_stride + c];
}
