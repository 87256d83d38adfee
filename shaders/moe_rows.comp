#version 450
// The rows routed to each expert, for the grouped GEMM of a mixture-of-experts prefill
// (gemm.comp's ROW_IDS): invocation e writes, at lists[e * list_stride], how many rows r < rows
// have ids[r] == e, then those rows in ascending order. Rows of other experts are skipped; an
// expert no row chose gets an empty list.
layout(local_size_x = 64) in;
layout(binding = 0, std430) readonly buffer Ids { int ids[]; };
layout(binding = 1, std430) writeonly buffer Lists { int lists[]; };
layout(push_constant) uniform Push {
  uint rows;
  uint experts;
  uint ids_offset;
  uint lists_offset;
  uint list_stride;
} p;

void main() {
  uint e = gl_GlobalInvocationID.x;
  if (e >= p.experts) return;
  uint base = p.lists_offset + e * p.list_stride, count = 0u;
  for (uint r = 0u; r < p.rows; ++r)
    if (ids[p.ids_offset + r] == int(e)) lists[base + 1u + count++] = int(r);
  lists[base] = int(count);
}
