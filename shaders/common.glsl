// Shared helpers: weight element loads for the three float weight precisions. A shader that
// reads weights defines WEIGHT_BINDING before including this file, and the variant table
// defines one of W_F32, W_F16, W_BF16, or a block format W_Q4_0 ... W_Q6_K (then W_QUANT is
// defined and quant.glsl supplies the decoding). f16 and bf16 are read as packed uint pairs so
// that no 16-bit storage feature is needed and odd row lengths work.
#extension GL_EXT_control_flow_attributes : enable

#if defined(W_Q4_0) || defined(W_Q4_1) || defined(W_Q5_0) || defined(W_Q5_1) || defined(W_Q8_0) || \
    defined(W_Q2_K) || defined(W_Q3_K) || defined(W_Q4_K) || defined(W_Q5_K) || defined(W_Q6_K) || \
    defined(W_IQ4_NL) || defined(W_IQ4_XS) || defined(W_IQ1_S) || defined(W_IQ1_M) || defined(W_IQ2_XXS) || \
    defined(W_IQ2_XS) || defined(W_IQ2_S) || defined(W_IQ3_XXS) || defined(W_IQ3_S) || defined(W_MXFP4) || \
    defined(W_FP8_B32) || defined(W_INT4_B32)
#define W_QUANT
#endif

// Weights are read as 32-bit words (wword) or 16-byte quads (wquad, 16-byte aligned). In the
// TEXEL_LOADS variants the binding is a storage texel buffer instead of a storage buffer: CPU
// implementations (llvmpipe) vectorize texel loads across a subgroup but load storage-buffer
// elements one invocation at a time, so the same arithmetic runs several times faster there.
// Both variants read the same bits and add in the same order.
#if defined(WEIGHT_BINDING) && defined(TEXEL_LOADS)
#if defined(W_QUANT) && !defined(W_Q4_K) && !defined(W_Q5_K)
// 18-, 22- and 34-byte blocks are not 16-byte aligned: 4-byte texels.
layout(binding = WEIGHT_BINDING, r32ui) uniform readonly uimageBuffer weight_texels;
uint wword(uint i) { return imageLoad(weight_texels, int(i)).x; }  // these formats never read quads
#else
layout(binding = WEIGHT_BINDING, rgba32ui) uniform readonly uimageBuffer weight_texels;
uvec4 wquad(uint i) { return imageLoad(weight_texels, int(i)); }
uint wword(uint i) { return wquad(i >> 2)[i & 3u]; }
#endif
#elif defined(WEIGHT_BINDING)
layout(binding = WEIGHT_BINDING, std430) readonly buffer WeightBuffer { uint weights[]; };
layout(binding = WEIGHT_BINDING, std430) readonly buffer WeightBuffer16 { uvec4 weights16[]; };
uint wword(uint i) { return weights[i]; }
uvec4 wquad(uint i) { return weights16[i]; }
#endif

// Activations: a shader that reads f32 rows x through xload / xload4 defines X_BINDING.
#if defined(X_BINDING) && defined(TEXEL_LOADS)
layout(binding = X_BINDING, rgba32f) uniform readonly imageBuffer x_texels;
float xload(uint i) { return imageLoad(x_texels, int(i >> 2))[i & 3u]; }
vec4 xload4(uint i) { return imageLoad(x_texels, int(i >> 2)); }  // i % 4 == 0
#elif defined(X_BINDING)
layout(binding = X_BINDING, std430) readonly buffer X { float x[]; };
layout(binding = X_BINDING, std430) readonly buffer X4 { vec4 x4[]; };
// Set by a shader all of whose xload4 indices are multiples of 4 (its rows' offset and stride
// are, from push constants, so the branch is uniform): one 16-byte load instead of four.
bool x_vec4 = false;
float xload(uint i) { return x[i]; }
vec4 xload4(uint i) {
  if (x_vec4) return x4[i >> 2];
  return vec4(x[i], x[i + 1u], x[i + 2u], x[i + 3u]);
}
#endif

#if defined(WEIGHT_BINDING) && defined(W_QUANT)
#include "quant.glsl"
#elif defined(WEIGHT_BINDING) && defined(W_F32)
float wload(uint i) { return uintBitsToFloat(wword(i)); }
vec2 wload2(uint i) { return vec2(wload(i), wload(i + 1u)); }  // i even
// Elements [8j, 8j + 8) of the binding: loaded raw (wraw8), then converted (wdecode8), so
// that a kernel can have several loads in flight before it uses the first.
struct WRaw8 { uvec4 lo, hi; };
WRaw8 wraw8(uint j) { return WRaw8(wquad(2u * j), wquad(2u * j + 1u)); }
void wdecode8(WRaw8 raw, out float w[8]) {
  [[unroll]] for (uint i = 0; i < 4; ++i) {
    w[i] = uintBitsToFloat(raw.lo[i]);
    w[i + 4] = uintBitsToFloat(raw.hi[i]);
  }
}
void wload8(uint j, out float w[8]) { wdecode8(wraw8(j), w); }
#elif defined(WEIGHT_BINDING)
float half_bits_to_float(uint h) {
#if defined(W_F16)
  return unpackHalf2x16(h).x;
#else
  return uintBitsToFloat(h << 16);
#endif
}
float wload(uint i) {
  uint pair = wword(i >> 1);
  return half_bits_to_float((i & 1u) != 0u ? pair >> 16 : pair & 0xffffu);
}
vec2 wload2(uint i) {  // i even: both halves of one word
  uint pair = wword(i >> 1);
#if defined(W_F16)
  return unpackHalf2x16(pair);
#else
  return vec2(uintBitsToFloat(pair << 16), uintBitsToFloat(pair & 0xffff0000u));
#endif
}
// Elements [8j, 8j + 8): one 16-byte quad, loaded raw and converted as for f32.
#define WRaw8 uvec4
uvec4 wraw8(uint j) { return wquad(j); }
void wdecode8(uvec4 q, out float w[8]) {
  [[unroll]] for (uint i = 0; i < 4; ++i) {
#if defined(W_F16)
    vec2 h = unpackHalf2x16(q[i]);
#else
    vec2 h = vec2(uintBitsToFloat(q[i] << 16), uintBitsToFloat(q[i] & 0xffff0000u));
#endif
    w[2 * i] = h.x;
    w[2 * i + 1] = h.y;
  }
}
void wload8(uint j, out float w[8]) { wdecode8(wraw8(j), w); }
#endif

// The KV cache holds f16 values packed two per uint.
float kv_load(uint pair, uint i) { return unpackHalf2x16((i & 1u) != 0u ? pair >> 16 : pair).x; }

// f32 -> f16 bits with round-to-nearest-even, written out because packHalf2x16's rounding is
// left to the implementation (lavapipe truncates); torch and the CPU references round to even.
uint half_bits_rne(float f) {
  uint x = floatBitsToUint(f);
  uint sign = (x >> 16) & 0x8000u;
  uint ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return sign | (ax > 0x7f800000u ? 0x7e00u : 0x7c00u);  // NaN, inf
  if (ax >= 0x477ff000u) return sign | 0x7c00u;                                  // rounds to inf
  if (ax < 0x38800000u) {                                                        // f16 subnormal
    if (ax <= 0x33000000u) return sign;                                          // <= 2^-25: to zero
    uint e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u, shift = 126u - e;
    uint r = m >> shift, rem = m & ((1u << shift) - 1u), half_ulp = 1u << (shift - 1u);
    if (rem > half_ulp || (rem == half_ulp && (r & 1u) != 0u)) ++r;
    return sign | r;
  }
  uint r = (((ax >> 23) - 112u) << 10) | ((ax & 0x7fffffu) >> 13), rem = ax & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u) != 0u)) ++r;
  return sign | r;
}
uint pack_half2_rne(float a, float b) { return half_bits_rne(a) | (half_bits_rne(b) << 16); }
