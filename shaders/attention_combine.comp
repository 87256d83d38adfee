#version 450
// The second pass of split attention (attention.comp with SPLIT): merges the partial states
// (m, l, acc[head_dim]) of one (row, head) in split order, skipping splits with no visible key,
// and writes acc / l as the unsplit kernel does. Every split is scaled by exp(m_s - M) against
// the largest m, and the split holding it by exactly 1, so a row whose keys lie in one split
// gets the unsplit kernel's bits. One workgroup per (row, head); each invocation owns the
// output dims tid, tid + WG, ...
layout(local_size_x_id = 0) in;

layout(binding = 0, std430) readonly buffer Partials { float part[]; };
layout(binding = 1, std430) writeonly buffer Out { float outv[]; };

layout(push_constant) uniform Push {
  uint heads;
  uint head_dim;
  uint splits;
  uint part_offset;
  uint out_offset;
  uint out_stride;
  uint row0;  // the dispatch's first row of `out`; the partials start at its row
} p;

void main() {
  const uint row = gl_WorkGroupID.x, head = gl_WorkGroupID.y, tid = gl_LocalInvocationID.x;
  const uint width = p.head_dim + 2u;
  const uint base = p.part_offset + (row * p.heads + head) * p.splits * width;
  float big = -1.0 / 0.0;
  for (uint s = 0; s < p.splits; ++s)
    if (part[base + s * width + 1u] > 0.0) big = max(big, part[base + s * width]);
  float total = 0.0;
  for (uint s = 0; s < p.splits; ++s) {
    const float l = part[base + s * width + 1u];
    if (l > 0.0) {
      const float m = part[base + s * width];
      total += l * (m == big ? 1.0 : exp(m - big));
    }
  }
  for (uint d = tid; d < p.head_dim; d += gl_WorkGroupSize.x) {
    float acc = 0.0;
    for (uint s = 0; s < p.splits; ++s) {
      const float l = part[base + s * width + 1u];
      if (l > 0.0) {
        const float m = part[base + s * width];
        acc += part[base + s * width + 2u + d] * (m == big ? 1.0 : exp(m - big));
      }
    }
    outv[p.out_offset + (p.row0 + row) * p.out_stride + head * p.head_dim + d] = total > 0.0 ? acc / total : 0.0;
  }
}
