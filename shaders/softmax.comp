#version 450
// Row softmax in place, with an optional inverse temperature: y = softmax(x * inv_temp).
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(local_size_x_id = 0) in;

layout(binding = 0, std430) buffer X { float x[]; };

layout(push_constant) uniform Push {
  uint rows;
  uint n;
  uint offset;
  uint stride;
  float inv_temp;
} p;

shared float red[64];

float block_reduce(float v, bool is_max) {
  v = is_max ? subgroupMax(v) : subgroupAdd(v);
  barrier();
  if (subgroupElect()) red[gl_SubgroupID] = v;
  barrier();
  float r = red[0];
  for (uint s = 1; s < gl_NumSubgroups; ++s) r = is_max ? max(r, red[s]) : r + red[s];
  return r;
}

void main() {
  uint row = gl_WorkGroupID.x;
  if (row >= p.rows) return;
  uint base = p.offset + row * p.stride;
  float m = -1.0 / 0.0;
  for (uint i = gl_LocalInvocationID.x; i < p.n; i += gl_WorkGroupSize.x) m = max(m, x[base + i] * p.inv_temp);
  m = block_reduce(m, true);
  float sum = 0.0;
  for (uint i = gl_LocalInvocationID.x; i < p.n; i += gl_WorkGroupSize.x) {
    float e = exp(x[base + i] * p.inv_temp - m);
    x[base + i] = e;
    sum += e;
  }
  sum = block_reduce(sum, false);
  float inv = 1.0 / sum;
  for (uint i = gl_LocalInvocationID.x; i < p.n; i += gl_WorkGroupSize.x) x[base + i] *= inv;
}
