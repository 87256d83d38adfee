#pragma once
// How ops see their operands: f32 activation rows inside a buffer range, and weight matrices
// in a float precision or one of llama.cpp's quantized block formats.
#include <cstdint>

#include "runtime/vk/buffer.h"
#include "runtime/vk/recorder.h"

namespace eaglevk::ops {

// Float element types, then ggml's block formats (layouts in shaders/shared_constants.h), then
// eaglevk's FP8 blocks (FP8_B32: the codes of an FP8 checkpoint with their scale, loader/fp8.h)
// and 4-bit integer blocks (INT4_B32: GPTQ, AWQ, compressed-tensors W4A16, loader/int4.h).
// A ggml-quantized matrix keeps its blocks as stored in the file; kernels decode them on the fly.
enum class WeightType { F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS,
                        IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, MXFP4, FP8_B32, INT4_B32 };
const char* weight_type_name(WeightType t);  // "f32", "q4_k", ...: also the shader variant suffix
bool weight_type_quantized(WeightType t);
// Elements per block (1 for the float types) and bytes per block (the element size for them).
uint32_t weight_type_block_elements(WeightType t);
uint32_t weight_type_block_bytes(WeightType t);
// Bytes of a row of `cols` elements; cols must be a multiple of the block (checked by loaders).
uint64_t weight_row_bytes(WeightType t, uint64_t cols);
// Fails with a message naming `op` unless a row of `cols` elements is a whole number of blocks
// (the kernels decode whole blocks and assume rows start on block boundaries).
void check_whole_blocks(WeightType t, uint32_t cols, const char* op);

// The texel format texel-load kernel variants read weights of type t through: 16-byte quads
// for the float types and the 16-byte-aligned K-quant super-blocks (Q4_K, Q5_K), 4-byte words
// for the other block formats (18- to 136-byte blocks, 210 for Q6_K).
VkFormat weight_texel_format(WeightType t);

// f32 rows: element (r, c) sits at offset + r * stride + c of the bound range.
struct Act {
  vk::BufferRange range;
  uint32_t offset = 0;  // elements
  uint32_t stride = 0;  // elements between rows

  Act() = default;
  Act(vk::BufferRange r, uint32_t stride_elements, uint32_t offset_elements = 0)
      : range(r), offset(offset_elements), stride(stride_elements) {}
  Act cols(uint32_t first_col) const { return Act(range, stride, offset + first_col); }
  Act row(uint32_t r) const { return Act(range, stride, offset + r * stride); }

  // Whether texel-load kernel variants can read these rows as 16-byte texels: every row starts
  // on 4 elements and the range can be viewed so.
  bool texel_aligned() const;

  // The bytes of `rows` rows of `width` columns, as a hazard declaration.
  vk::Arg reads(uint32_t rows, uint32_t width) const;
  vk::Arg writes(uint32_t rows, uint32_t width) const;
  vk::Arg updates(uint32_t rows, uint32_t width) const;
};

// A row-major [rows, cols] weight matrix (HF nn.Linear layout [out, in]). It may exceed
// maxStorageBufferRange; ops then bind it in row chunks.
struct WeightMatrix {
  vk::BufferRange data;
  WeightType type = WeightType::F32;
  uint32_t rows = 0;
  uint32_t cols = 0;

  uint64_t row_bytes() const { return weight_row_bytes(type, cols); }
  // Row chunks of at most `max_rows` rows; f16/bf16 rows are read as uint pairs, so a chunk
  // boundary must fall on a whole word and the binding offset alignment.
  uint32_t chunk_rows(uint64_t max_binding, uint64_t offset_alignment) const;
  // The binding for rows [first, first + count): rounded up to whole 32-bit words (inside
  // the buffer) because f16/bf16 rows are read as uint pairs.
  vk::BufferRange rows_range(uint32_t first, uint32_t count) const;
};

}  // namespace eaglevk::ops
