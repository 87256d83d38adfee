#version 450
// Row normalisation: RMSNorm with a weight (Llama) or without one (Llama-4's QK "L2" norm,
// which divides by the RMS). y = w * (x * inversesqrt(mean(x^2) + eps)), the order HF uses.
// LAYER_NORM (the Llama-4 vision encoder's nn.LayerNorm): y = (x - mean) * inversesqrt(var +
// eps) * w + b, the biased variance taken around the mean in a second pass, as torch does.
// One workgroup per row; the reduction order depends only on the row length and the workgroup
// size (ops::norm_workgroup_for: one per device).
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const bool HAS_WEIGHT = true;
layout(constant_id = 2) const bool LAYER_NORM = false;

layout(binding = 0, std430) readonly buffer In { float x[]; };
layout(binding = 1, std430) readonly buffer Weight { float w[]; };
layout(binding = 2, std430) buffer Out { float y[]; };
layout(binding = 3, std430) readonly buffer Bias { float b[]; };

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

shared float partial[64];  // one per subgroup: ops::norm_workgroup_for keeps to 64

// The sum of every invocation's v over the workgroup.
float workgroup_sum(float v) {
  v = subgroupAdd(v);
  if (subgroupElect()) partial[gl_SubgroupID] = v;
  barrier();
  float total = 0.0;
  for (uint s = 0; s < gl_NumSubgroups; ++s) total += partial[s];
  barrier();  // partial is reused by the next reduction
  return total;
}

void main() {
  uint row = gl_WorkGroupID.x;
  if (row >= p.rows) return;
  uint outer = row / p.inner, sub = row % p.inner;
  uint src = p.in_offset + outer * p.in_stride + sub * p.dim;
  uint dst = p.out_offset + outer * p.out_stride + sub * p.dim;
  if (LAYER_NORM) {
    float sum = 0.0;
    for (uint i = gl_LocalInvocationID.x; i < p.dim; i += gl_WorkGroupSize.x) sum += x[src + i];
    float mean = workgroup_sum(sum) / float(p.dim);
    float sq = 0.0;
    for (uint i = gl_LocalInvocationID.x; i < p.dim; i += gl_WorkGroupSize.x) {
      float d = x[src + i] - mean;
      sq += d * d;
    }
    float scale = inversesqrt(workgroup_sum(sq) / float(p.dim) + p.eps);
    for (uint i = gl_LocalInvocationID.x; i < p.dim; i += gl_WorkGroupSize.x)
      y[dst + i] = (x[src + i] - mean) * scale * w[i] + b[i];
    return;
  }
  float sum = 0.0;
  for (uint i = gl_LocalInvocationID.x; i < p.dim; i += gl_WorkGroupSize.x) sum += x[src + i] * x[src + i];
  float scale = inversesqrt(workgroup_sum(sum) / float(p.dim) + p.eps);
  for (uint i = gl_LocalInvocationID.x; i < p.dim; i += gl_WorkGroupSize.x) {
    float v = x[src + i] * scale;
    y[dst + i] = HAS_WEIGHT ? w[i] * v : v;
  }
}
