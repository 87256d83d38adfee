#include "runtime/ops/tensor.h"

#include <numeric>

#include <eaglevk/error.h>

namespace eaglevk::ops {

const char* weight_type_name(WeightType t) {
  switch (t) {
    case WeightType::F32: return "f32";
    case WeightType::F16: return "f16";
    case WeightType::BF16: return "bf16";
  }
  return "?";
}

uint32_t weight_type_bytes(WeightType t) { return t == WeightType::F32 ? 4 : 2; }

namespace {
vk::Access row_access(const Act& a, uint32_t rows, uint32_t width, bool read, bool write) {
  return vk::Access{a.range.buffer, a.range.offset + uint64_t(a.offset) * 4, uint64_t(width) * 4,
                    uint64_t(a.stride) * 4, rows, read, write};
}
}  // namespace

vk::Arg Act::reads(uint32_t rows, uint32_t width) const { return {range, row_access(*this, rows, width, true, false)}; }
vk::Arg Act::writes(uint32_t rows, uint32_t width) const { return {range, row_access(*this, rows, width, false, true)}; }
vk::Arg Act::updates(uint32_t rows, uint32_t width) const { return {range, row_access(*this, rows, width, true, true)}; }

vk::BufferRange WeightMatrix::rows_range(uint32_t first, uint32_t count) const {
  uint64_t begin = uint64_t(first) * row_bytes();
  uint64_t bytes = (uint64_t(count) * row_bytes() + 3) / 4 * 4;
  if (data.offset + begin + bytes > data.buffer->bytes)
    fail("weight rows [{}, {}) of '{}' lie outside its buffer (sizes must round up to 4 bytes)", first, first + count,
         data.buffer->name);
  return data.sub(begin, bytes);
}

uint32_t WeightMatrix::chunk_rows(uint64_t max_binding, uint64_t offset_alignment) const {
  uint64_t bytes = row_bytes();
  if (bytes > max_binding) fail("a weight row of {} bytes exceeds the binding limit {}", bytes, max_binding);
  uint64_t fit = (max_binding - 4) / bytes;  // room for the word-rounding of rows_range
  if (fit >= rows) return rows;
  // A chunk of n rows starts at n * bytes: keep that a multiple of the offset alignment and 4.
  uint64_t align = std::lcm<uint64_t>(std::max<uint64_t>(offset_alignment, 4), 4);
  uint64_t step = align / std::gcd(bytes, align);
  uint64_t n = fit / step * step;
  if (n == 0) fail("cannot split a {}x{} weight into aligned chunks under {} bytes", rows, cols, max_binding);
  return uint32_t(n);
}

}  // namespace eaglevk::ops
