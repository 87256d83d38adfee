#version 450
// Row normalisation: RMSNorm with a weight (Llama) or without one (Llama-4's QK "L2" norm,
// which divides by the RMS). y = w * (x * inversesqrt(mean(x^2) + eps)), the order HF uses.
// One workgroup per row; the reduction order depends only on the row length.
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const bool HAS_WEIGHT = true;

layout(binding = 0, std430) readonly buffer In { float x[]; };
layout(binding = 1, std430) readonly buffer Weight { float w[]; };
layout(binding = 2, std430) buffer Out { float y[]; };

layout(push_constant) uniform Push {
  uint rows;
  uint dim;
  uint in_offset;
  uint in_stride;
  uint out_offset;
  uint out_stride;
  float eps;
  uint inner;  // sub-rows per row, dim apart (per-head norms of q and k); 1 for plain rows
} p;

shared float partial[64];

void main() {
  uint row = gl_WorkGroupID.x;
  if (row >= p.rows) return;
  uint outer = row / p.inner, sub = row % p.inner;
  uint src = p.in_offset + outer * p.in_stride + sub * p.dim;
  float sum = 0.0;
  for (uint i = gl_LocalInvocationID.x; i < p.dim; i += gl_WorkGroupSize.x) sum += x[src + i] * x[src + i];
  sum = subgroupAdd(sum);
  if (subgroupElect()) partial[gl_SubgroupID] = sum;
  barrier();
  float total = 0.0;
  for (uint s = 0; s < gl_NumSubgroups; ++s) total += partial[s];
  float scale = inversesqrt(total / float(p.dim) + p.eps);
  uint dst = p.out_offset + outer * p.out_stride + sub * p.dim;
  for (uint i = gl_LocalInvocationID.x; i < p.dim; i += gl_WorkGroupSize.x) {
    float v = x[src + i] * scale;
    y[dst + i] = HAS_WEIGHT ? w[i] * v : v;
  }
}
