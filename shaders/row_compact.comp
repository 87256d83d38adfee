#version 450
// Moves the accepted path of the last speculation tree to consecutive rows, on the device so
// that a recorded round serves every round: row base + path[i] goes to row base + i for
// i = 1 .. len - 1, one i after another (path[i] >= i and rises with i, so no row is
// overwritten before it is read), in rows of `words` 32-bit words of one buffer, or of two
// (BOTH: a layer's K and V caches). `len`, `base` and the path come from the round's inputs:
// [len, base, path[0], path[1], ...]; USE_BASE 0 moves node rows (the taps) with base 0.
// One workgroup: a move's writes need only be visible to the workgroup's own invocations, so the
// barrier between moves has workgroup scope (a device-scope one is invalid SPIR-V on devices that
// enable the Vulkan memory model without its device scope, as the coopmat GEMM has eaglevk do).
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const bool BOTH = true;
layout(constant_id = 2) const bool USE_BASE = true;

layout(binding = 0, std430) readonly buffer Path { int path_in[]; };
layout(binding = 1, std430) coherent buffer A { uint a[]; };
layout(binding = 2, std430) coherent buffer B { uint b[]; };

layout(push_constant) uniform Push {
  uint offset;  // of len in path_in
  uint words;   // per row
} p;

void main() {
  const uint len = uint(path_in[p.offset]);
  const uint base = USE_BASE ? uint(path_in[p.offset + 1u]) : 0u;
  for (uint i = 1u; i < len; ++i) {
    const uint from = base + uint(path_in[p.offset + 2u + i]), to = base + i;
    if (from != to) {
      for (uint w = gl_LocalInvocationID.x; w < p.words; w += gl_WorkGroupSize.x) {
        a[to * p.words + w] = a[from * p.words + w];
        if (BOTH) b[to * p.words + w] = b[from * p.words + w];
      }
    }
    // The next move may read a row this one wrote.
    groupMemoryBarrier();
    barrier();
  }
}
