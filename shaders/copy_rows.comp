#version 450
// Strided row copy of 32-bit words: dst[r, c] = src[r, c] for c < width. Used for hidden-state
// taps, which land at a column offset of a [rows, taps * hidden] buffer. GATHER reads source
// row rows_idx[r] instead of r (tree drafting: each frontier row continues from its parent's;
// batched decoding gathers token ids too, which is why the words are copied as uint: bit for
// bit, whatever they hold).
layout(local_size_x = 64) in;
layout(constant_id = 0) const bool GATHER = false;
#include "grid.glsl"

layout(binding = 0, std430) readonly buffer Src { uint src[]; };
layout(binding = 1, std430) writeonly buffer Dst { uint dst[]; };
layout(binding = 2, std430) readonly buffer Rows { int rows_idx[]; };

layout(push_constant) uniform Push {
  uint rows;
  uint width;
  uint src_offset;
  uint src_stride;
  uint dst_offset;
  uint dst_stride;
  uint idx_offset;
} p;

void main() {
  uint idx = linear_invocation();
  if (idx >= p.rows * p.width) return;
  uint r = idx / p.width, c = idx % p.width;
  uint from = GATHER ? uint(rows_idx[p.idx_offset + r]) : r;
  dst[p.dst_offset + r * p.dst_stride + c] = src[p.src_offset + from * p.src_stride + c];
}
