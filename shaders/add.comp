#version 450
// Residual add: out[i] = a[i] + b[i] (out may be a).
layout(local_size_x = 64) in;
#include "grid.glsl"

layout(binding = 0, std430) readonly buffer A { float a[]; };
layout(binding = 1, std430) readonly buffer B { float b[]; };
layout(binding = 2, std430) writeonly buffer Out { float y[]; };

layout(push_constant) uniform Push { uint n; } p;

void main() {
  uint i = linear_invocation();
  if (i < p.n) y[i] = a[i] + b[i];
}
