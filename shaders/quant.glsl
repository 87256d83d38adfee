// ggml's block-quantized weights, decoded inside the kernels. common.glsl includes this file
// when the variant defines one of W_Q4_0 ... W_Q6_K, W_IQ1_S ... W_IQ4_XS, W_MXFP4, W_FP8_B32 or W_INT4_B32. Layouts:
// shared_constants.h and loader/quant.h. The weights are read as 32-bit words and 16-byte quads
// (common.glsl's wword and wquad; no 16-bit storage feature needed): blocks of 18, 22, 34, 50,
// 66, 74, 82, 84, 98, 110, 136 and 210 bytes start on 2-byte boundaries, so loads read the
// covering words and shift (MXFP4's 17-byte blocks on any byte);
// Q4_K and Q5_K blocks (144, 176 bytes) sit on 16-byte boundaries and are read as quads. Every
// row is a whole number of blocks, so a block's words lie inside the binding.
//
// A thread decodes a group of QGROUP = 32 consecutive elements of a row: a whole block of the
// 32-element formats, one sub-block of a 256-element super-block (K-quants, IQ1-IQ3, IQ4_XS). q_load reads the
// group's bytes and decodes its scales once; q_decode8 turns eight of its elements into floats
// with the arithmetic of ggml's dequantize_row_* (loader/quant.cpp, the tests' reference).
#include "shared_constants.h"

#define QGROUP 32

// Bytes [a, a + 2) and [a, a + 16) of the binding; a is even.
uint load_u16(uint a) { return (wword(a >> 2) >> ((a & 2u) * 8u)) & 0xffffu; }
uint load_u8(uint a) { return (wword(a >> 2) >> (8u * (a & 3u))) & 0xffu; }
uint load_u32(uint a) {  // bytes [a, a + 4), a even
  uint i = a >> 2;
  return (a & 2u) == 0u ? wword(i) : (wword(i) >> 16) | (wword(i + 1u) << 16);
}
float load_half(uint a) { return unpackHalf2x16(load_u16(a)).x; }
uvec4 load_16(uint a) {
  uint i = a >> 2;
  uvec4 w = uvec4(wword(i), wword(i + 1u), wword(i + 2u), wword(i + 3u));
  if ((a & 2u) == 0u) return w;
  return (w >> 16) | (uvec4(w.yzw, wword(i + 4u)) << 16);  // the fifth word only when needed
}

// Byte j of 16 bytes held in a uvec4, of 32 bytes held in two; j is constant after unrolling.
uint byte16(uvec4 v, uint j) { return (v[j >> 2] >> (8u * (j & 3u))) & 0xffu; }
uint byte32(uvec4 lo, uvec4 hi, uint j) { return byte16(j < 16u ? lo : hi, j & 15u); }
int int8_at(uint b) { return int(b << 24) >> 24; }

#if defined(W_Q4_0)
#define QK QK4_0_ELEMS
#define QB QK4_0_BYTES
struct QGroup { uvec4 qs; float d; };
QGroup q_load(uint row, uint g) {
  uint a = row + g * QB;
  return QGroup(load_16(a + 2u), load_half(a));
}
// Element e < 16 is the low nibble of qs[e], e + 16 its high nibble.
void q_decode8(QGroup q, uint c, out float w[8]) {
  [[unroll]] for (uint i = 0; i < 8; ++i) {
    uint e = 8u * c + i;
    w[i] = float(int((byte16(q.qs, e & 15u) >> ((e >> 4) * 4u)) & 15u) - 8) * q.d;
  }
}

#elif defined(W_Q4_1)
#define QK QK4_1_ELEMS
#define QB QK4_1_BYTES
struct QGroup { uvec4 qs; float d, m; };
QGroup q_load(uint row, uint g) {
  uint i = (row + g * QB) >> 2;  // 20-byte blocks are word-aligned
  vec2 dm = unpackHalf2x16(wword(i));
  return QGroup(uvec4(wword(i + 1u), wword(i + 2u), wword(i + 3u), wword(i + 4u)), dm.x, dm.y);
}
void q_decode8(QGroup q, uint c, out float w[8]) {
  [[unroll]] for (uint i = 0; i < 8; ++i) {
    uint e = 8u * c + i;
    w[i] = float((byte16(q.qs, e & 15u) >> ((e >> 4) * 4u)) & 15u) * q.d + q.m;
  }
}

#elif defined(W_INT4_B32)
// eaglevk's 4-bit integer blocks (shared_constants.h): f32 d and m, then the nibbles as Q4_1's;
// x = q * d + m, m = -zero * d. Made from f16/bf16 scales and 4-bit zeros, every product and the
// sum are exact in f32, so a fused multiply-add gives the same bits. Word-aligned blocks.
#define QK QKINT4_ELEMS
#define QB QKINT4_BYTES
struct QGroup { uvec4 qs; float d, m; };
QGroup q_load(uint row, uint g) {
  uint i = (row + g * QB) >> 2;
  return QGroup(uvec4(wword(i + 2u), wword(i + 3u), wword(i + 4u), wword(i + 5u)), uintBitsToFloat(wword(i)),
                uintBitsToFloat(wword(i + 1u)));
}
void q_decode8(QGroup q, uint c, out float w[8]) {
  [[unroll]] for (uint i = 0; i < 8; ++i) {
    uint e = 8u * c + i;
    w[i] = float((byte16(q.qs, e & 15u) >> ((e >> 4) * 4u)) & 15u) * q.d + q.m;
  }
}

#elif defined(W_Q5_0)
#define QK QK5_0_ELEMS
#define QB QK5_0_BYTES
struct QGroup { uvec4 qs; uint qh; float d; };
QGroup q_load(uint row, uint g) {
  uint a = row + g * QB;
  return QGroup(load_16(a + 6u), load_u16(a + 2u) | (load_u16(a + 4u) << 16), load_half(a));
}
// Bit e of qh is bit 4 of element e.
void q_decode8(QGroup q, uint c, out float w[8]) {
  [[unroll]] for (uint i = 0; i < 8; ++i) {
    uint e = 8u * c + i;
    uint v = ((byte16(q.qs, e & 15u) >> ((e >> 4) * 4u)) & 15u) | (((q.qh >> e) & 1u) << 4);
    w[i] = float(int(v) - 16) * q.d;
  }
}

#elif defined(W_Q5_1)
#define QK QK5_1_ELEMS
#define QB QK5_1_BYTES
struct QGroup { uvec4 qs; uint qh; float d, m; };
QGroup q_load(uint row, uint g) {
  uint i = (row + g * QB) >> 2;  // 24-byte blocks are word-aligned
  vec2 dm = unpackHalf2x16(wword(i));
  return QGroup(uvec4(wword(i + 2u), wword(i + 3u), wword(i + 4u), wword(i + 5u)), wword(i + 1u), dm.x,
                dm.y);
}
void q_decode8(QGroup q, uint c, out float w[8]) {
  [[unroll]] for (uint i = 0; i < 8; ++i) {
    uint e = 8u * c + i;
    uint v = ((byte16(q.qs, e & 15u) >> ((e >> 4) * 4u)) & 15u) | (((q.qh >> e) & 1u) << 4);
    w[i] = float(v) * q.d + q.m;
  }
}

#elif defined(W_Q8_0)
#define QK QK8_0_ELEMS
#define QB QK8_0_BYTES
struct QGroup { uvec4 lo, hi; float d; };
QGroup q_load(uint row, uint g) {
  uint a = row + g * QB;
  return QGroup(load_16(a + 2u), load_16(a + 18u), load_half(a));
}
void q_decode8(QGroup q, uint c, out float w[8]) {
  [[unroll]] for (uint i = 0; i < 8; ++i) w[i] = float(int8_at(byte32(q.lo, q.hi, 8u * c + i))) * q.d;
}

#elif defined(W_MXFP4)
// OCP's MXFP4 as ggml stores it: byte 0 the E8M0 exponent e, then element j < 16 in the low
// nibble of byte 1 + j, j + 16 in its high nibble. A code's low three bits pick one of the
// doubled E2M1 magnitudes 0, 1, 2, 3, 4, 6, 8, 12 (kept four to a word, picked by a select, as
// IQ4's levels), bit 3 its sign; x = level * 2^(e - 128), the scale built from its bits (e < 2:
// a subnormal). Blocks are 17 bytes, so they start on any byte: the 16 code bytes are read from
// the covering words with a funnel shift.
#define QK QKMXFP4_ELEMS
#define QB QKMXFP4_BYTES
float mxfp4_level(uint i) {
  int m = int(((i & 4u) != 0u ? 0x0c080604u : 0x03020100u) >> (8u * (i & 3u))) & 0xff;
  return float((i & 8u) != 0u ? -m : m);  // an int negated: code 8 is +0, as ggml's int8 0
}
uvec4 load_16_any(uint a) {  // bytes [a, a + 16) at any alignment
  uint i = a >> 2, s = 8u * (a & 3u);
  uvec4 w = uvec4(wword(i), wword(i + 1u), wword(i + 2u), wword(i + 3u));
  if (s == 0u) return w;
  return (w >> s) | (uvec4(w.yzw, wword(i + 4u)) << (32u - s));  // the fifth word only when needed
}
struct QGroup { uvec4 qs; float d; };
QGroup q_load(uint row, uint g) {
  uint a = row + g * QB, e = load_u8(a);
  return QGroup(load_16_any(a + 1u), uintBitsToFloat(e < 2u ? 0x00200000u << e : (e - 1u) << 23));
}
void q_decode8(QGroup q, uint c, out float w[8]) {
  [[unroll]] for (uint i = 0; i < 8; ++i) {
    uint e = 8u * c + i;
    w[i] = mxfp4_level((byte16(q.qs, e & 15u) >> ((e >> 4) * 4u)) & 15u) * q.d;
  }
}

#elif defined(W_FP8_B32)
// eaglevk's FP8 blocks (shared_constants.h): the f32 scale, then 32 E4M3 codes (OCP FP8: a
// sign bit, 4 exponent bits with bias 7, 3 mantissa bits; no infinities, and the loader refuses
// the NaN codes). x = value * scale, as loader/quant.cpp. A normal value is built from its bits
// (exponent + 120 under the f32 bias, the mantissa on top); a subnormal one (exponent 0) is
// m / 512 from an int, so that no device's denormal flushing can touch it. Word-aligned blocks.
#define QK QKFP8_ELEMS
#define QB QKFP8_BYTES
struct QGroup { uvec4 lo, hi; float d; };
QGroup q_load(uint row, uint g) {
  uint i = (row + g * QB) >> 2;
  return QGroup(uvec4(wword(i + 1u), wword(i + 2u), wword(i + 3u), wword(i + 4u)),
                uvec4(wword(i + 5u), wword(i + 6u), wword(i + 7u), wword(i + 8u)), uintBitsToFloat(wword(i)));
}
float e4m3_value(uint b) {
  float v = (b & 0x78u) == 0u ? float(b & 7u) * (1.0 / 512.0) : uintBitsToFloat(((b & 0x7Fu) << 20) + 0x3C000000u);
  return uintBitsToFloat(floatBitsToUint(v) | ((b & 0x80u) << 24));
}
void q_decode8(QGroup q, uint c, out float w[8]) {
  [[unroll]] for (uint i = 0; i < 8; ++i) w[i] = e4m3_value(byte32(q.lo, q.hi, 8u * c + i)) * q.d;
}

#elif defined(W_IQ4_NL) || defined(W_IQ4_XS)
// 4-bit indices into 16 fixed int8 levels (loader/quant.cpp): element j < 16 of a 32-element
// run in the low nibble of byte j, element j + 16 in its high nibble. IQ4_NL: a run is a block,
// d then 16 bytes. IQ4_XS: run r = g % 8 of super-block g / 8; bytes 0-7 hold d, the scales' top
// bits (bits 2r, 2r + 1 of the u16 at 2) and low nibbles (nibble r % 2 of byte 4 + r / 2); the
// run's 16 bytes start at 8 + 16 r; its scale is d * (6-bit value - 32).
// Level i of -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113: the int8
// levels four to a word, the word picked by selects, so that the lookup stays in registers (an
// array indexed per invocation becomes a gather from memory on some GPUs and on llvmpipe).
float iq4_level(uint i) {
  uint word = (i & 8u) != 0u ? ((i & 4u) != 0u ? 0x71594535u : 0x26190d01u)
                             : ((i & 4u) != 0u ? 0xf6eaddcfu : 0xbfad9881u);
  return float(int(word << (24u - 8u * (i & 3u))) >> 24);
}
#if defined(W_IQ4_NL)
#define QK QK4_NL_ELEMS
#define QB QK4_NL_BYTES
#else
#define QK QK_K_ELEMS
#define QB QK4_XS_BYTES
#endif
struct QGroup { uvec4 qs; float d; };
QGroup q_load(uint row, uint g) {
#if defined(W_IQ4_NL)
  uint a = row + g * QB;
  return QGroup(load_16(a + 2u), load_half(a));
#else
  uint a = row + (g >> 3) * QB, r = g & 7u;
  uint high = (load_u16(a + 2u) >> (2u * r)) & 3u, low = (load_u16(a + 4u + 2u * (r >> 2)) >> (4u * (r & 3u))) & 15u;
  return QGroup(load_16(a + 8u + 16u * r), load_half(a) * float(int(low | (high << 4)) - 32));
#endif
}
void q_decode8(QGroup q, uint c, out float w[8]) {
  [[unroll]] for (uint i = 0; i < 8; ++i) {
    uint e = 8u * c + i;
    w[i] = q.d * iq4_level((byte16(q.qs, e & 15u) >> ((e >> 4) * 4u)) & 15u);
  }
}

#elif defined(W_IQ1_S) || defined(W_IQ1_M) || defined(W_IQ2_XXS) || defined(W_IQ2_XS) || defined(W_IQ2_S) || \
    defined(W_IQ3_XXS) || defined(W_IQ3_S)
// The lattice formats (loader/quant.cpp has the layouts): group s = g % 8 of super-block g / 8
// is four runs of 8 elements; run l is one grid entry (IQ1, IQ2) or two of 4 (IQ3), with a sign
// per element (IQ2, IQ3; bit 8l + j of QGroup.signs) or a shift of +-1/8 (IQ1, bit l of
// QGroup.dneg set: -1/8). Runs 0-1 take scale s01, runs 2-3 s23. IQ3's two 9-bit indices of a
// run share a word (the second at bit 16).
#define QK QK_K_ELEMS
#if defined(W_IQ1_S)
#define QB QK1_S_BYTES
#elif defined(W_IQ1_M)
#define QB QK1_M_BYTES
#elif defined(W_IQ2_XXS)
#define QB QK2_XXS_BYTES
#elif defined(W_IQ2_XS)
#define QB QK2_XS_BYTES
#elif defined(W_IQ2_S)
#define QB QK2_S_BYTES
#elif defined(W_IQ3_XXS)
#define QB QK3_XXS_BYTES
#else
#define QB QK3_S_BYTES
#endif
// The format's grid (shaders/iq_grids.h), bound after the kernel's other buffers
// (runtime/ops/lattice_grids.h says why it is not a constant array); the kernel defines
// IQ_GRID_BINDING.
layout(binding = IQ_GRID_BINDING, std430) readonly buffer IqGrid { uint iq_grid[]; };
struct QGroup { uvec4 idx; uint signs, dneg; float s01, s23; };
// Four 7-bit sign sets (at bits 0, 7, 14, 21) made 8-bit with even parity, one per byte.
uint even_signs(uint bits) {
  uint out_signs = 0u;
  [[unroll]] for (uint l = 0; l < 4; ++l) {
    uint s = (bits >> (7u * l)) & 127u;
    out_signs |= (s | ((uint(bitCount(s)) & 1u) << 7)) << (8u * l);
  }
  return out_signs;
}
// d * (0.5 + s) * 0.25, the IQ2 scales' formula (IQ3_XXS: * 0.5).
float iq2_scale(float d, uint s) { return d * (0.5 + float(s)) * 0.25; }
QGroup q_load(uint row, uint g) {
  uint a = row + (g >> 3) * QB, s = g & 7u;
  QGroup q;
  q.dneg = 0u;
#if defined(W_IQ2_XXS)
  uint lo = load_u32(a + 2u + 8u * s), hi = load_u32(a + 6u + 8u * s);
  q.idx = uvec4(lo, lo >> 8, lo >> 16, lo >> 24) & 0xffu;
  q.signs = even_signs(hi);
  q.s01 = q.s23 = iq2_scale(load_half(a), hi >> 28);
#elif defined(W_IQ2_XS)
  uint lo = load_u32(a + 2u + 8u * s), hi = load_u32(a + 6u + 8u * s);
  uvec4 v = uvec4(lo, lo >> 16, hi, hi >> 16) & 0xffffu;
  q.idx = v & 511u;
  q.signs = even_signs((v.x >> 9) | ((v.y >> 9) << 7) | ((v.z >> 9) << 14) | ((v.w >> 9) << 21));
  uint sc = load_u8(a + 66u + s);
  float d = load_half(a);
  q.s01 = iq2_scale(d, sc & 15u);
  q.s23 = iq2_scale(d, sc >> 4);
#elif defined(W_IQ2_S)
  uint lo = load_u32(a + 2u + 4u * s), qh = load_u8(a + 66u + s), sc = load_u8(a + 74u + s);
  q.idx = (uvec4(lo, lo >> 8, lo >> 16, lo >> 24) & 0xffu) | ((uvec4(qh, qh >> 2, qh >> 4, qh >> 6) & 3u) << 8);
  q.signs = load_u32(a + 34u + 4u * s);
  float d = load_half(a);
  q.s01 = iq2_scale(d, sc & 15u);
  q.s23 = iq2_scale(d, sc >> 4);
#elif defined(W_IQ3_XXS)
  uint lo = load_u32(a + 2u + 8u * s), hi = load_u32(a + 6u + 8u * s), aux = load_u32(a + 66u + 4u * s);
  q.idx = (uvec4(lo, lo >> 16, hi, hi >> 16) & 0xffu) | (uvec4(lo >> 8, lo >> 24, hi >> 8, hi >> 24) & 0xffu) << 16;
  q.signs = even_signs(aux);
  q.s01 = q.s23 = load_half(a) * (0.5 + float(aux >> 28)) * 0.5;
#elif defined(W_IQ3_S)
  uint lo = load_u32(a + 2u + 8u * s), hi = load_u32(a + 6u + 8u * s), qh = load_u8(a + 66u + s);
  uvec4 first = uvec4(lo, lo >> 16, hi, hi >> 16) & 0xffu, second = uvec4(lo >> 8, lo >> 24, hi >> 8, hi >> 24) & 0xffu;
  first |= (uvec4(qh, qh >> 2, qh >> 4, qh >> 6) & 1u) << 8;
  second |= (uvec4(qh >> 1, qh >> 3, qh >> 5, qh >> 7) & 1u) << 8;
  q.idx = first | (second << 16);
  q.signs = load_u32(a + 74u + 4u * s);
  q.s01 = q.s23 = load_half(a) * float(1u + 2u * ((load_u8(a + 106u + (s >> 1)) >> (4u * (s & 1u))) & 15u));
#elif defined(W_IQ1_S)
  uint lo = load_u32(a + 2u + 4u * s), qh = load_u16(a + 34u + 2u * s);
  q.idx = (uvec4(lo, lo >> 8, lo >> 16, lo >> 24) & 0xffu) | ((uvec4(qh, qh >> 3, qh >> 6, qh >> 9) & 7u) << 8);
  q.dneg = (qh >> 15) != 0u ? 15u : 0u;
  q.s01 = q.s23 = load_half(a) * float(2u * ((qh >> 12) & 7u) + 1u);
#else  // IQ1_M: run l's top index bits and delta sign are nibble l of the group's u16 at 32 + 2s
  uint lo = load_u32(a + 4u * s), qh = load_u16(a + 32u + 2u * s);
  q.idx = (uvec4(lo, lo >> 8, lo >> 16, lo >> 24) & 0xffu) | ((uvec4(qh, qh >> 4, qh >> 8, qh >> 12) & 7u) << 8);
  q.dneg = ((qh >> 3) & 1u) | ((qh >> 6) & 2u) | ((qh >> 9) & 4u) | ((qh >> 12) & 8u);
  uint sc0 = load_u16(a + 48u), sc1 = load_u16(a + 50u), sc2 = load_u16(a + 52u), sc3 = load_u16(a + 54u);
  float d = unpackHalf2x16((sc0 >> 12) | ((sc1 >> 8) & 0xf0u) | ((sc2 >> 4) & 0xf00u) | (sc3 & 0xf000u)).x;
  uint sc = load_u16(a + 48u + 2u * (s >> 1)) >> (6u * (s & 1u));
  q.s01 = d * float(2u * (sc & 7u) + 1u);
  q.s23 = d * float(2u * ((sc >> 3) & 7u) + 1u);
#endif
  return q;
}
// Run c of the group.
void q_decode8(QGroup q, uint c, out float w[8]) {
  float scale = c < 2u ? q.s01 : q.s23;
  uint entry = q.idx[c];
#if defined(W_IQ3_XXS) || defined(W_IQ3_S)
  uint lo = iq_grid[entry & 0xffffu], hi = iq_grid[entry >> 16];
  [[unroll]] for (uint j = 0; j < 8; ++j) {
    float v = scale * float(((j < 4u ? lo : hi) >> (8u * (j & 3u))) & 0xffu);
    w[j] = ((q.signs >> (8u * c + j)) & 1u) != 0u ? -v : v;
  }
#else
  uint codes = iq_grid[entry >> 1] >> (16u * (entry & 1u));
  [[unroll]] for (uint j = 0; j < 8; ++j) {
    uint code = (codes >> (2u * j)) & 3u;
#if defined(W_IQ1_S) || defined(W_IQ1_M)
    w[j] = scale * (float(code) - 1.0 + (((q.dneg >> c) & 1u) != 0u ? -0.125 : 0.125));
#else
    float v = scale * float(8u + 17u * code + (code >> 1));  // codes 0, 1, 2: 8, 25, 43
    w[j] = ((q.signs >> (8u * c + j)) & 1u) != 0u ? -v : v;
#endif
  }
#endif
}

#elif defined(W_Q2_K) || defined(W_Q3_K)
#define QK QK_K_ELEMS
#if defined(W_Q2_K)
#define QB QK2_K_BYTES
#else
#define QB QK3_K_BYTES
#endif
// Sub-block s = 4h + j = g % 8 of super-block g / 8: element l of it is bits 2j, 2j + 1 of byte
// l of half h's 32 code bytes (all four sub-blocks of a half share them); its elements 0-15 and
// 16-31 have the scales of groups 2s and 2s + 1 (16 elements each). Q2_K: scales[16] from byte
// 0 (4-bit scale low, 4-bit min high), codes from byte 16, d and dmin at 80.
// Q3_K: hmask[32] from byte 0 (bit s of hmask[l] set: the code as is; clear: minus 4), codes
// from byte 32, scales[12] at 96 (group t's low nibble in byte t % 8, the low nibble for t < 8;
// its top two bits at bit 2 (t / 4) of byte 8 + t % 4; stored plus 32), d at 108.
#if defined(W_Q3_K)
// Group t's signed scale, from the super-block at byte a.
int q3k_scale(uint a, uint t) {
  uint low = (load_u8(a + 96u + (t & 7u)) >> (t < 8u ? 0u : 4u)) & 15u;
  uint high = (load_u8(a + 104u + (t & 3u)) >> (2u * (t >> 2))) & 3u;
  return int(low | (high << 4)) - 32;
}
#endif
struct QGroup {
  uvec4 qs0, qs1;
#if defined(W_Q3_K)
  uvec4 hm0, hm1;
#endif
  uint s;
  float d0, d1;  // d * scale of elements 0-15 and 16-31
#if defined(W_Q2_K)
  float m0, m1;  // dmin * min
#endif
};
QGroup q_load(uint row, uint g) {
  uint a = row + (g >> 3) * QB, s = g & 7u;
  QGroup q;
  q.s = s;
#if defined(W_Q2_K)
  q.qs0 = load_16(a + 16u + 32u * (s >> 2));
  q.qs1 = load_16(a + 32u + 32u * (s >> 2));
  uint sc = load_u16(a + 2u * s);
  float d = load_half(a + 80u), dmin = load_half(a + 82u);
  q.d0 = d * float(sc & 15u);
  q.m0 = dmin * float((sc >> 4) & 15u);
  q.d1 = d * float((sc >> 8) & 15u);
  q.m1 = dmin * float(sc >> 12);
#else
  q.hm0 = load_16(a);
  q.hm1 = load_16(a + 16u);
  q.qs0 = load_16(a + 32u + 32u * (s >> 2));
  q.qs1 = load_16(a + 48u + 32u * (s >> 2));
  float d = load_half(a + 108u);
  q.d0 = d * float(q3k_scale(a, 2u * s));
  q.d1 = d * float(q3k_scale(a, 2u * s + 1u));
#endif
  return q;
}
void q_decode8(QGroup q, uint c, out float w[8]) {
  uint shift = 2u * (q.s & 3u);
  [[unroll]] for (uint i = 0; i < 8; ++i) {
    uint e = 8u * c + i;
    uint v = (byte32(q.qs0, q.qs1, e) >> shift) & 3u;
#if defined(W_Q2_K)
    w[i] = (c < 2u ? q.d0 : q.d1) * float(v) - (c < 2u ? q.m0 : q.m1);
#else
    int code = int(v) - (((byte32(q.hm0, q.hm1, e) >> q.s) & 1u) != 0u ? 0 : 4);
    w[i] = (c < 2u ? q.d0 : q.d1) * float(code);
#endif
  }
}

#elif defined(W_Q4_K) || defined(W_Q5_K)
#define QK QK_K_ELEMS
#if defined(W_Q4_K)
#define QB QK4_K_BYTES
#else
#define QB QK5_K_BYTES
#endif
// Sub-block s = g % 8 of super-block g / 8. Bytes 0-15: d, dmin, 12 bytes of 6-bit scales and
// mins. Q4_K: qs[128] from byte 16; Q5_K: qh[32] from byte 16, qs[128] from byte 48. Sub-blocks
// 2j and 2j+1 are the low and high nibbles of qs[32j .. 32j + 31]; Q5_K's bit s of qh[l] is
// bit 4 of element l of sub-block s.
struct QGroup {
  uvec4 qs0, qs1;
#if defined(W_Q5_K)
  uvec4 qh0, qh1;
#endif
  uint s;
  float dsc, dm;  // d * scale and dmin * min of the sub-block
};
uint scale_byte(uvec4 head, uint j) { return (head[1u + (j >> 2)] >> (8u * (j & 3u))) & 0xffu; }
// d * scale and dmin * min of sub-block s, from the super-block's first 16 bytes.
vec2 k4_scale_min(uvec4 head, uint s) {
  vec2 d = vec2(unpackHalf2x16(head.x).x, unpackHalf2x16(head.x >> 16).x);
  uint sc, m;  // ggml's get_scale_min_k4
  if (s < 4u) {
    sc = scale_byte(head, s) & 63u;
    m = scale_byte(head, s + 4u) & 63u;
  } else {
    sc = (scale_byte(head, s + 4u) & 15u) | ((scale_byte(head, s - 4u) >> 6) << 4);
    m = (scale_byte(head, s + 4u) >> 4) | ((scale_byte(head, s) >> 6) << 4);
  }
  return vec2(d.x * float(sc), d.y * float(m));
}
QGroup q_load(uint row, uint g) {
  uint i = (row + (g >> 3) * QB) >> 4, s = g & 7u;
  uvec4 head = wquad(i);
  vec2 scale_min = k4_scale_min(head, s);
  QGroup q;
#if defined(W_Q4_K)
  uint qs = i + 1u + 2u * (s >> 1);
#else
  uint qs = i + 3u + 2u * (s >> 1);
  q.qh0 = wquad(i + 1u);
  q.qh1 = wquad(i + 2u);
#endif
  q.qs0 = wquad(qs);
  q.qs1 = wquad(qs + 1u);
  q.s = s;
  q.dsc = scale_min.x;
  q.dm = scale_min.y;
  return q;
}
void q_decode8(QGroup q, uint c, out float w[8]) {
  uint shift = (q.s & 1u) * 4u;
  [[unroll]] for (uint i = 0; i < 8; ++i) {
    uint e = 8u * c + i;
    uint v = (byte32(q.qs0, q.qs1, e) >> shift) & 15u;
#if defined(W_Q5_K)
    v |= ((byte32(q.qh0, q.qh1, e) >> q.s) & 1u) << 4;
#endif
    w[i] = q.dsc * float(v) - q.dm;
  }
}

#elif defined(W_Q6_K)
#define QK QK_K_ELEMS
#define QB QK6_K_BYTES
// ql[128], qh[64], int8 scales[16], d. Sub-block s = 4h + t of a super-block takes the low
// (t < 2) or high nibbles of ql[64h + 32(t & 1) + l] and bits 2t, 2t+1 of qh[32h + l]; its
// elements 0-15 and 16-31 have scales 8h + 2t and 8h + 2t + 1.
struct QGroup { uvec4 ql0, ql1, qh0, qh1; uint t; float ds0, ds1; };
QGroup q_load(uint row, uint g) {
  uint a = row + (g >> 3) * QB, s = g & 7u, h = s >> 2, t = s & 3u;
  uint ql = a + 64u * h + 32u * (t & 1u), qh = a + 128u + 32u * h;
  uint sc = load_u16(a + 192u + 8u * h + 2u * t);
  float d = load_half(a + 208u);
  return QGroup(load_16(ql), load_16(ql + 16u), load_16(qh), load_16(qh + 16u), t,
                d * float(int8_at(sc & 0xffu)), d * float(int8_at(sc >> 8)));
}
void q_decode8(QGroup q, uint c, out float w[8]) {
  uint lshift = (q.t >> 1) * 4u, hshift = 2u * q.t;
  [[unroll]] for (uint i = 0; i < 8; ++i) {
    uint e = 8u * c + i;
    uint v = ((byte32(q.ql0, q.ql1, e) >> lshift) & 15u) | (((byte32(q.qh0, q.qh1, e) >> hshift) & 3u) << 4);
    w[i] = (c < 2u ? q.ds0 : q.ds1) * float(int(v) - 32);
  }
}
#endif

#if defined(W_Q2_K) || defined(W_Q3_K) || defined(W_Q4_K) || defined(W_Q5_K) || defined(W_Q6_K)
// ---- Items: how matrix-vector kernels read the K-quants ----------------------------------
// The 32-element groups above suit a thread that decodes whole groups (gemm tiles, embedding
// rows); a matrix-vector product is cheaper per weight when it keeps the codes packed. Sixteen
// items make a super-block; an item is four runs of four consecutive elements whose codes
// are the four bytes of one 32-bit word once masked and shifted, and weight e of run k is
// scale[k] * byte e of codes[k] - minv[k]. So a dot product with x takes one convert and one
// fma per weight, and each run's scale and minimum are applied once, to sum(x * code) and
// sum(x). Consecutive items read consecutive bytes of the codes.
#define KQ_ITEMS 16u
struct KItem { uvec4 codes; vec4 scale, minv; };

#if defined(W_Q2_K) || defined(W_Q3_K) || defined(W_Q6_K)
// Item t = 8h + m: elements 128h + 32k + 4m + [0, 4) for run k = 0..3 (bytes 4m .. 4m + 3 of the
// half's 32-byte code rows); each run lies in one 16-element scale group, 8h + 2k + m / 4.
uint kq_run_start(uint t, uint k) { return 128u * (t >> 3) + 32u * k + 4u * (t & 7u); }
#endif

#if defined(W_Q2_K) || defined(W_Q3_K)
// Q2_K and Q3_K: run k's 2-bit codes are bits 2k, 2k + 1 of the item's code word (qs[32h + 4m
// ..]); Q3_K's third bits are bit 4h + k of the hmask word at 4m, and a run's weights are
// d * sc * (code - 4), so minv is 4 scale (exact). Q2_K's runs take their group's scale and min.
KItem kq_load(uint row, uint item) {
  uint a = row + (item / KQ_ITEMS) * QB, t = item % KQ_ITEMS, h = t >> 3, m = t & 7u;
  KItem w;
#if defined(W_Q2_K)
  uint q = load_u32(a + 16u + 32u * h + 4u * m);
  w.codes = uvec4(q, q >> 2, q >> 4, q >> 6) & 0x03030303u;
  float d = load_half(a + 80u), dmin = load_half(a + 82u);
  [[unroll]] for (uint k = 0; k < 4; ++k) {
    uint sc = load_u8(a + 8u * h + 2u * k + (m >> 2));
    w.scale[k] = d * float(sc & 15u);
    w.minv[k] = dmin * float(sc >> 4);
  }
#else
  uint q = load_u32(a + 32u + 32u * h + 4u * m), hm = load_u32(a + 4u * m) >> (4u * h);
  w.codes = (uvec4(q, q >> 2, q >> 4, q >> 6) & 0x03030303u) | ((uvec4(hm, hm >> 1, hm >> 2, hm >> 3) & 0x01010101u) << 2);
  float d = load_half(a + 108u);
  [[unroll]] for (uint k = 0; k < 4; ++k) w.scale[k] = d * float(q3k_scale(a, 8u * h + 2u * k + (m >> 2)));
  w.minv = 4.0 * w.scale;
#endif
  return w;
}
#elif defined(W_Q6_K)
// Q6_K: bytes 4m..4m+3 of the 32-byte rows l of ggml's dequantize_row_q6_K: ql[64h + l] (k = 0,
// 2 low/high nibble), ql[64h + 32 + l] (k = 1, 3), bits 2k, 2k+1 of qh[32h + l]; scale index
// 8h + m/4 + 2k.
KItem kq_load(uint row, uint item) {
  uint a = row + (item / KQ_ITEMS) * QB, t = item % KQ_ITEMS, h = t >> 3, m = t & 7u;
  uint lo = load_u32(a + 64u * h + 4u * m), hi = load_u32(a + 64u * h + 32u + 4u * m);
  uint qh = load_u32(a + 128u + 32u * h + 4u * m);
  KItem w;
  w.codes = uvec4((lo & 0x0f0f0f0fu) | ((qh << 4) & 0x30303030u),
                  (hi & 0x0f0f0f0fu) | ((qh << 2) & 0x30303030u),
                  ((lo >> 4) & 0x0f0f0f0fu) | (qh & 0x30303030u),
                  ((hi >> 4) & 0x0f0f0f0fu) | ((qh >> 2) & 0x30303030u));
  float d = load_half(a + 208u);
  uint sc = a + 192u + 8u * h + (m >> 2);
  [[unroll]] for (uint k = 0; k < 4; ++k) w.scale[k] = d * float(int8_at(load_u8(sc + 2u * k)));
  w.minv = 32.0 * w.scale;  // codes are offset by 32; exact (a power of two)
  return w;
}
#else
// Item t = 4j + m: bytes 8m..8m+7 of qs[32j ..], whose low nibbles are elements 8m + [0, 8) of
// sub-block 2j (runs 0, 1) and high nibbles those of sub-block 2j + 1 (runs 2, 3). Q5_K's fifth
// bits are bits 2j and 2j + 1 of qh[8m ..].
uint kq_run_start(uint t, uint k) { return 64u * (t >> 2) + 32u * (k >> 1) + 8u * (t & 3u) + 4u * (k & 1u); }
KItem kq_load(uint row, uint item) {
  uint i = (row + (item / KQ_ITEMS) * QB) >> 4, t = item % KQ_ITEMS, j = t >> 2, m = t & 3u;
  uvec4 head = wquad(i);
#if defined(W_Q4_K)
  uvec4 qs = wquad(i + 1u + 2u * j + (m >> 1));  // qs from byte 16
#else
  uvec4 qs = wquad(i + 3u + 2u * j + (m >> 1));  // qh[32] from byte 16, qs from byte 48
#endif
  uvec2 q = (m & 1u) == 0u ? qs.xy : qs.zw;
  KItem w;
  w.codes = uvec4(q & 0x0f0f0f0fu, (q >> 4) & 0x0f0f0f0fu);
#if defined(W_Q5_K)
  uvec4 qh = wquad(i + 1u + (m >> 1));
  uvec2 h = (m & 1u) == 0u ? qh.xy : qh.zw;
  w.codes |= uvec4(((h >> (2u * j)) & 0x01010101u) << 4, ((h >> (2u * j + 1u)) & 0x01010101u) << 4);
#endif
  // get_scale_min_k4 for four sub-blocks at once: the 6-bit scales (x) and mins (y) of
  // sub-blocks 0-3 or 4-7 as the four bytes of a word; this item needs bytes 2j % 4, + 1.
  uvec2 sm = j < 2u ? uvec2(head.y, head.z) & 0x3f3f3f3fu
                    : uvec2((head.w & 0x0f0f0f0fu) | ((head.y >> 2) & 0x30303030u),
                            ((head.w >> 4) & 0x0f0f0f0fu) | ((head.z >> 2) & 0x30303030u));
  sm >>= 16u * (j & 1u);
  vec2 d = vec2(unpackHalf2x16(head.x).x, unpackHalf2x16(head.x >> 16).x);
  vec2 lo = d * vec2(sm & 0xffu), hi = d * vec2((sm >> 8) & 0xffu);
  w.scale = vec4(lo.x, lo.x, hi.x, hi.x);
  w.minv = vec4(lo.y, lo.y, hi.y, hi.y);
  return w;
}
#endif
// The four codes of one run as floats.
vec4 kq_codes(uint c) { return vec4(uvec4(c, c >> 8, c >> 16, c >> 24) & 0xffu); }
// acc plus the dot product of item w with the activations x of its runs (sums xsum), each
// run's sum(x * code) and sum(x) taken in a fixed order, then its scale and minimum applied.
float kq_dot(KItem w, vec4 x[4], float xsum[4], float acc) {
  [[unroll]] for (uint k = 0; k < 4; ++k) {
    vec4 c = kq_codes(w.codes[k]);
    float dot4 = fma(x[k].w, c.w, fma(x[k].z, c.z, fma(x[k].y, c.y, x[k].x * c.x)));
    acc = fma(w.scale[k], dot4, acc);
    acc = fma(-w.minv[k], xsum[k], acc);
  }
  return acc;
}
#if defined(X_BINDING)
// The activations of item t's runs, the super-block's first element at x index xi, and sums.
void kq_load_x(uint xi, uint t, out vec4 x[4], out float xsum[4]) {
  [[unroll]] for (uint k = 0; k < 4; ++k) {
    x[k] = xload4(xi + kq_run_start(t, k));
    xsum[k] = (x[k].x + x[k].y) + (x[k].z + x[k].w);
  }
}
#endif
#endif

// Bytes of a row of K elements (K a multiple of QK).
uint q_row_bytes(uint K) { return K / QK * QB; }
