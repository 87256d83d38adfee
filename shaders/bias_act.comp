#version 450
// In place over rows of an activation: x[r, c] = act(x[r, c] + bias[(r % period) * width + c]).
// HAS_BIAS covers linear-layer biases (period 1) and the vision encoder's positional embedding
// (period = rows per tile); GELU is the exact (erf) GELU of nn.GELU(), applied after the bias.
layout(local_size_x = 64) in;
#include "grid.glsl"
layout(constant_id = 0) const bool HAS_BIAS = true;
layout(constant_id = 1) const bool GELU = false;

layout(binding = 0, std430) buffer X { float x[]; };
layout(binding = 1, std430) readonly buffer Bias { float bias[]; };

layout(push_constant) uniform Push {
  uint rows;
  uint width;
  uint offset;
  uint stride;
  uint period;  // bias rows, repeated down the activation
} p;

// GLSL has no erf: Abramowitz & Stegun 7.1.26, absolute error below 1.5e-7, which moves
// GELU(x) by at most 0.75e-7 |x|.
float erf_as(float v) {
  float z = abs(v);
  float t = 1.0 / (1.0 + 0.3275911 * z);
  float poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
  float e = 1.0 - poly * exp(-z * z);
  return v < 0.0 ? -e : e;
}

void main() {
  uint idx = linear_invocation();
  if (idx >= p.rows * p.width) return;
  uint r = idx / p.width, c = idx % p.width;
  uint at = p.offset + r * p.stride + c;
  float v = x[at];
  if (HAS_BIAS) v += bias[(r % p.period) * p.width + c];
  if (GELU) v = 0.5 * v * (1.0 + erf_as(v * 0.70710678118654752));
  x[at] = v;
}
