#version 450
// Llama-4 router, per token row: the top-k experts by raw router logit (ties to the lower
// expert), score = sigmoid(logit) for those, and the expert input x * score (the score scales
// the expert's INPUT, as HF does). Slot s of row r goes to row r * k + s of the outputs.
layout(local_size_x = 64) in;

layout(binding = 0, std430) readonly buffer Logits { float logits[]; };
layout(binding = 1, std430) readonly buffer X { float x[]; };
layout(binding = 2, std430) writeonly buffer Ids { int expert_ids[]; };
layout(binding = 3, std430) writeonly buffer Xs { float xs[]; };

layout(push_constant) uniform Push {
  uint rows;
  uint experts;
  uint k;
  uint dim;
  uint logits_offset;
  uint logits_stride;
  uint x_offset;
  uint x_stride;
} p;

shared uint chosen[8];
shared float score[8];

void main() {
  uint row = gl_WorkGroupID.x;
  if (row >= p.rows) return;
  uint base = p.logits_offset + row * p.logits_stride;
  if (gl_LocalInvocationID.x == 0u) {
    for (uint s = 0; s < p.k; ++s) {
      uint best = 0xffffffffu;
      float best_value = 0.0;
      for (uint e = 0; e < p.experts; ++e) {
        bool taken = false;
        for (uint t = 0; t < s; ++t) taken = taken || chosen[t] == e;
        float v = logits[base + e];
        if (!taken && (best == 0xffffffffu || v > best_value)) {
          best = e;
          best_value = v;
        }
      }
      chosen[s] = best;
      score[s] = 1.0 / (1.0 + exp(-best_value));
      expert_ids[row * p.k + s] = int(best);
    }
  }
  barrier();
  for (uint s = 0; s < p.k; ++s)
    for (uint i = gl_LocalInvocationID.x; i < p.dim; i += gl_WorkGroupSize.x)
      xs[(row * p.k + s) * p.dim + i] = x[p.x_offset + row * p.x_stride + i] * score[s];
}
