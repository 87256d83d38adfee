// Constants that C++ and GLSL must agree on. Included by both.
#ifndef EAGLEVK_SHARED_CONSTANTS_H
#define EAGLEVK_SHARED_CONSTANTS_H

// The matrix-vector kernel keeps one accumulator per activation row in registers.
#define MATVEC_MAX_ROWS 8
// ...and one per output it computes, at most this many outputs per workgroup.
#define MATVEC_MAX_OUTS 8
// Largest head_dim the attention kernel keeps in shared memory.
#define ATTENTION_MAX_HEAD_DIM 256
// The attention workgroup kernel serves up to this many rows, and this many (row, head) pairs.
#define ATTENTION_MAX_ROWS 8
#define ATTENTION_MAX_PAIRS 16
// The GEMM's cooperative-matrix kernel: a 64 x 64 block of outputs a workgroup, k staged 32 at a
// time as f16 rows of GEMM_COOPMAT_STRIDE (8 of padding), hi and lo halves of x and W, plus a
// 16 x 16 f32 staging matrix for each of its four subgroups.
#define GEMM_COOPMAT_TILE 64
#define GEMM_COOPMAT_TILE_K 32
#define GEMM_COOPMAT_STRIDE 40
#define GEMM_COOPMAT_SHARED_BYTES (4 * GEMM_COOPMAT_TILE * GEMM_COOPMAT_STRIDE * 2 + 4 * 256 * 4)
// Its BLOCK128 variant (profile key gemm.block=128): eight subgroups, a block of 8 x 8 of the
// device's matrices (128 x 128 of 16 x 16), shared arrays sized from them (ops::coopmat_shared_bytes).
#define GEMM_COOPMAT128_SUBGROUPS 8
// The token id the argmax and sampling kernels write for a logits row holding a NaN or an
// infinity: no token, so that the host stops with an error naming the position instead of
// emitting the id the comparisons happened to leave (all-NaN rows made token 0 forever).
#define NON_FINITE_ROW_ID (-1)
// A row's sampling settings as the sampling kernel reads them from a device buffer (ops::sample
// with per-row settings): 32-bit words, floats by their bits.
#define SAMPLE_ROW_INV_TEMP 0  // float 1 / temperature; 0: greedy
#define SAMPLE_ROW_TOP_K 1     // 0: off
#define SAMPLE_ROW_TOP_P 2     // float; 1: off
#define SAMPLE_ROW_SEED_LO 3
#define SAMPLE_ROW_SEED_HI 4
#define SAMPLE_ROW_WORDS 5
// Most rows of one vision tile the vision attention keeps scores for in shared memory (Scout:
// 24 x 24 patches + the class token = 577).
#define VISION_MAX_SEQ 2048

// Quantized weight blocks as llama.cpp's ggml lays them out: elements per block and bytes per
// block. A row of a quantized matrix is a whole number of blocks.
#define QK4_0_ELEMS 32
#define QK4_0_BYTES 18   // f16 d, 16 bytes of nibbles
#define QK4_1_ELEMS 32
#define QK4_1_BYTES 20   // f16 d, f16 m, 16 bytes of nibbles
#define QK5_0_ELEMS 32
#define QK5_0_BYTES 22   // f16 d, 4 bytes of high bits, 16 bytes of nibbles
#define QK5_1_ELEMS 32
#define QK5_1_BYTES 24   // f16 d, f16 m, 4 bytes of high bits, 16 bytes of nibbles
#define QK8_0_ELEMS 32
#define QK8_0_BYTES 34   // f16 d, 32 int8
#define QK4_NL_ELEMS 32
#define QK4_NL_BYTES 18  // f16 d, 16 bytes of nibbles indexing the non-linear table
#define QK_K_ELEMS 256   // the K-quants' super-block
#define QK2_K_BYTES 84   // 16 bytes of 4-bit scale|min pairs, 64 bytes of 2-bit codes, f16 d, f16 dmin
#define QK3_K_BYTES 110  // 32 bytes of high bits, 64 bytes of 2-bit codes, 12 bytes of 6-bit scales, f16 d
#define QK4_XS_BYTES 136 // f16 d, u16 scale high bits, 4 bytes of scale low nibbles, 128 bytes of nibbles
// ggml's IQ formats (256-element super-blocks of 32-element groups; grids in iq_grids.h):
#define QK1_S_BYTES 50   // f16 d, 32 bytes of grid index low bits, 8 u16 of index high bits, scale, delta sign
#define QK1_M_BYTES 56   // 32 bytes of index low bits, 16 bytes of high bits and delta signs, 4 u16 of scales (d in their top nibbles)
#define QK2_XXS_BYTES 66 // f16 d, 8 bytes a group: 4 grid indices, 4 x 7 sign bits and a 4-bit scale
#define QK2_XS_BYTES 74  // f16 d, 32 u16 (9-bit grid index, 7 sign bits), 8 bytes of two 4-bit scales
#define QK2_S_BYTES 82   // f16 d, 32 bytes of index low bits, 32 bytes of signs, 8 bytes of high bits, 8 of scales
#define QK3_XXS_BYTES 98 // f16 d, 64 bytes of grid indices, 8 u32 of 4 x 7 sign bits and a 4-bit scale
#define QK3_S_BYTES 110  // f16 d, 64 bytes of index low bits, 8 of high bits, 32 of signs, 4 of scales
// OCP's MXFP4 (ggml's layout): 32 elements, an E8M0 exponent byte then 16 bytes of 4-bit
// E2M1 codes. 17-byte blocks: they start on any byte.
#define QKMXFP4_ELEMS 32
#define QKMXFP4_BYTES 17
// eaglevk's FP8 blocks, made at load from FP8 checkpoints (loader/fp8.h): the f32 scale the file
// gives these 32 elements, then their 32 E4M3 codes. 36-byte blocks: word-aligned.
#define QKFP8_ELEMS 32
#define QKFP8_BYTES 36
// eaglevk's 4-bit integer blocks, made at load from GPTQ, AWQ and compressed-tensors W4A16
// checkpoints (loader/int4.h): f32 d, f32 m, then 16 bytes of nibbles as Q4_1 (x = q * d + m).
#define QKINT4_ELEMS 32
#define QKINT4_BYTES 24
#define QK4_K_BYTES 144  // f16 d, f16 dmin, 12 bytes of 6-bit scales/mins, 128 bytes of nibbles
#define QK5_K_BYTES 176  // f16 d, f16 dmin, 12 scale bytes, 32 bytes of high bits, 128 of nibbles
#define QK6_K_BYTES 210  // 128 bytes low nibbles, 64 bytes high 2-bit pairs, 16 int8 scales, f16 d

#endif
