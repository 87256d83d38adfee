#pragma once
// What the block formats' decoders (loader/quant.cpp) and the test quantizer
// (tests/support/quantize.cpp) share: f16 fields and the level tables of MXFP4 and IQ4.
#include <cstdint>
#include <cstring>

#include "loader/safetensors.h"

namespace eaglevk::loader::blocks {

inline float load_half(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return f16_to_f32(bits);
}

// ---- MXFP4: 4-bit floats (E2M1) with a shared power-of-two scale (E8M0) -------------------------
// e; qs[16]: element j < 16 in the low nibble of qs[j], j + 16 in its high nibble, as Q4_0. A
// code's low three bits pick a magnitude 0, 0.5, 1, 1.5, 2, 3, 4, 6 and bit 3 its sign; ggml keeps
// the magnitudes doubled as int8 levels (0 .. 12) and halves the scale instead: x = level *
// 2^(e - 128), the scale built from its bits (e < 2 gives a subnormal float).
inline constexpr int8_t kMxfp4Levels[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

inline float mxfp4_half_scale(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : uint32_t(e - 1) << 23;
  float d;
  std::memcpy(&d, &bits, 4);
  return d;
}

// ---- IQ4_NL and IQ4_XS: 4-bit indices into a fixed non-linear table -------------------------
// Each nibble selects one of 16 int8 levels, spaced more closely near zero. A 32-element run
// keeps element j (j < 16) in the low nibble of byte j and element j + 16 in its high nibble,
// as Q4_0 does. IQ4_NL: d; qs[16]: x = d * level. IQ4_XS: d; scales_h (u16); scales_l[4];
// qs[128]: eight runs of 32, run r with the 6-bit scale (low nibble r % 2 of scales_l[r / 2],
// top bits 2r, 2r + 1 of scales_h) minus 32: x = (d * (ls - 32)) * level.
inline constexpr int8_t kIq4Levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// Q3_K's sixteen 6-bit scales (stored plus 32) in 12 bytes: the low nibble of group g in byte g
// (g < 8) or in the high nibble of byte g - 8, its top two bits in bits 2 (g / 4), +1 of byte
// 8 + g % 4.
inline int q3_scale(const uint8_t* s, int g) {
  const int low = g < 8 ? s[g] & 0xF : s[g - 8] >> 4;
  return (low | ((s[8 + g % 4] >> (2 * (g / 4))) & 3) << 4) - 32;
}

// Q4_K/Q5_K: 8 six-bit sub-block scales and 8 six-bit mins in 12 bytes. Sub-blocks 0-3 keep
// their scale in the low 6 bits of byte j and their min in byte j + 4. Sub-blocks 4-7 keep the
// low nibbles of scale and min in byte j + 4 (scale low, min high) and their top two bits in the
// spare top bits of byte j - 4 (scale) and byte j (min).
inline void unpack_scale_min(const uint8_t* s, int j, int& scale, int& min) {
  if (j < 4) {
    scale = s[j] & 63;
    min = s[j + 4] & 63;
  } else {
    scale = (s[j + 4] & 0xF) | (s[j - 4] >> 6) << 4;
    min = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
  }
}

}  // namespace eaglevk::loader::blocks
