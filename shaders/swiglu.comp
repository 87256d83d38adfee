#version 450
// out[r, i] = silu(gate[r, i]) * up[r, i], silu(z) = z / (1 + exp(-z)). gate and up are two
// column ranges of one fused [rows, 2I] matmul output (or of two buffers bound alike).
layout(local_size_x = 64) in;
#include "grid.glsl"

layout(binding = 0, std430) readonly buffer In { float x[]; };
layout(binding = 1, std430) writeonly buffer Out { float y[]; };

layout(push_constant) uniform Push {
  uint rows;
  uint width;
  uint gate_offset;
  uint up_offset;
  uint in_stride;
  uint out_offset;
  uint out_stride;
} p;

void main() {
  uint idx = linear_invocation();
  if (idx >= p.rows * p.width) return;
  uint r = idx / p.width, i = idx % p.width;
  float g = x[p.gate_offset + r * p.in_stride + i];
  float u = x[p.up_offset + r * p.in_stride + i];
  y[p.out_offset + r * p.out_stride + i] = g / (1.0 + exp(-g)) * u;
}
