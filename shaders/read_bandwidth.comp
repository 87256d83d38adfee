#version 450
// The device's read ceiling for the GPU check's kernel table (tests/bench/kernel_table.cpp):
// every invocation streams 16-byte words, `words_per_lane` of them a grid-stride apart, and sums
// them; nothing is written unless the sum hits a value no fill makes, so every load must be
// issued and only reads reach memory. Four independent loads per step keep them in flight.
layout(local_size_x = 256) in;

layout(binding = 0, std430) readonly buffer Src { uvec4 src[]; };
layout(binding = 1, std430) writeonly buffer Sink { uint sink[]; };

layout(push_constant) uniform Push { uint words, lanes; } p;

void main() {
  const uint lane = gl_WorkGroupID.x * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
  uvec4 a = uvec4(0), b = uvec4(0), c = uvec4(0), d = uvec4(0);
  uint i = lane;
  for (; i + 3 * p.lanes < p.words; i += 4 * p.lanes) {
    a += src[i];
    b += src[i + p.lanes];
    c += src[i + 2 * p.lanes];
    d += src[i + 3 * p.lanes];
  }
  for (; i < p.words; i += p.lanes) a += src[i];
  const uvec4 s = a + b + c + d;
  if (s.x + s.y + s.z + s.w == 0x9e3779b9u) sink[0] = lane;
}
