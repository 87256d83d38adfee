#pragma once
// How ops see their operands: f32 activation rows inside a buffer range, and weight matrices
// in one of three precisions.
#include <cstdint>

#include "runtime/vk/buffer.h"
#include "runtime/vk/recorder.h"

namespace eaglevk::ops {

enum class WeightType { F32, F16, BF16 };
const char* weight_type_name(WeightType t);
uint32_t weight_type_bytes(WeightType t);

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

  uint64_t row_bytes() const { return uint64_t(cols) * weight_type_bytes(type); }
  // Row chunks of at most `max_rows` rows; f16/bf16 rows are read as uint pairs, so a chunk
  // boundary must fall on a whole word and the binding offset alignment.
  uint32_t chunk_rows(uint64_t max_binding, uint64_t offset_alignment) const;
  // The binding for rows [first, first + count): rounded up to whole 32-bit words (inside
  // the buffer) because f16/bf16 rows are read as uint pairs.
  vk::BufferRange rows_range(uint32_t first, uint32_t count) const;
};

}  // namespace eaglevk::ops
