#pragma once
// llama.cpp's (ggml's) block-quantized weight formats on the host: their geometry, a plain
// dequantizer (the reference the GPU kernels are tested against, and what `to_f32` uses for
// small tensors). The quantizer that writes the same blocks is test data's and lives with the
// tests (tests/support/quantize.h).
//
// Block layouts (little-endian, f16 = IEEE half); x = the dequantized value:
//   Q4_0  32 elems, 18 B: d; qs[16]                 x[j] = d * (lo(qs[j]) - 8), x[j+16] = d * (hi(qs[j]) - 8)
//   Q4_1  32 elems, 20 B: d, m; qs[16]              x = d * q + m
//   Q5_0  32 elems, 22 B: d; qh[4]; qs[16]          q = nibble | bit(qh, j) << 4; x = d * (q - 16)
//   Q5_1  32 elems, 24 B: d, m; qh[4]; qs[16]       x = d * q + m
//   Q8_0  32 elems, 34 B: d; int8 qs[32]            x = d * q
//   Q4_K 256 elems, 144 B: d, dmin; scales[12]; qs[128]   8 sub-blocks of 32 with 6-bit scale
//                         and min: x = d * sc * q - dmin * m
//   Q5_K 256 elems, 176 B: d, dmin; scales[12]; qh[32]; qs[128]
//   Q2_K 256 elems, 84 B: scales[16] (4-bit scale, 4-bit min); qs[64]; d, dmin   16 groups of 16:
//                         x = d * sc * q - dmin * m, q in [0, 3]
//   Q3_K 256 elems, 110 B: hmask[32]; qs[64]; scales[12] (6-bit); d    x = d * (sc - 32) * q, q in [-4, 3]
//   Q6_K 256 elems, 210 B: ql[128]; qh[64]; int8 scales[16]; d    x = d * sc * (q - 32)
//   IQ4_NL 32 elems, 18 B: d; qs[16] (as Q4_0)      x = d * level[q], 16 fixed int8 levels (-127 .. 113)
//   IQ4_XS 256 elems, 136 B: d; scales_h (u16); scales_l[4]; qs[128]   8 runs of 32 with 6-bit
//                         scales: x = d * (sc - 32) * level[q]
//   IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S  256 elems, 50/56/66/74/82/98/110 B: eight
//                         groups of 32 with a scale each; runs of 8 (4 for IQ3) elements take the
//                         magnitudes of a lattice grid entry (shaders/iq_grids.h) by index, with
//                         per-element signs (IQ2, IQ3) or a +-1/8 shift (IQ1). Fields: quant.cpp.
//   MXFP4 32 elems, 17 B: e (E8M0); qs[16] (as Q4_0)   x = level[q] * 2^(e - 128), levels 0, +-1, +-2,
//                         +-3, +-4, +-6, +-8, +-12 (twice the E2M1 values)
//   FP8_B32 32 elems, 36 B: f32 d; codes[32]   x = d * e4m3(code); eaglevk's own, made at upload
//                         from FP8 checkpoints (loader/fp8.h), never in a file
//   INT4_B32 32 elems, 24 B: f32 d, f32 m; qs[16] (as Q4_1)   x = d * q + m; eaglevk's own, made at
//                         upload from GPTQ, AWQ and compressed-tensors W4A16 checkpoints (loader/int4.h)
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "loader/safetensors.h"

namespace eaglevk::loader {

bool is_quantized(DType dtype);
// Elements per block and bytes per block: (1, dtype_size) for the plain types.
uint32_t block_elements(DType dtype);
uint32_t block_bytes(DType dtype);

// Bytes of a tensor whose innermost (contiguous) dimension is `row_length`; nullopt when
// row_length is not a whole number of blocks or the size overflows 64 bits.
std::optional<uint64_t> quantized_bytes(DType dtype, uint64_t row_length, uint64_t rows);

// Bytes a weight takes once uploaded: as stored, except FP8 and packed 4-bit weights, which go
// up as FP8_B32 and INT4_B32 blocks (loader/fp8.h, loader/int4.h).
uint64_t upload_bytes(const TensorView& weight);

// Decodes `out.size()` elements (a multiple of the block) from their blocks at `blocks`.
// Works for the plain float types too (F32, F16, BF16).
void dequantize(DType dtype, const std::byte* blocks, std::span<float> out);

}  // namespace eaglevk::loader
