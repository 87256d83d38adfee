#include "runtime/ops/tensor.h"

#include <numeric>

#include <eaglevk/error.h>

#include "shaders/shared_constants.h"

namespace eaglevk::ops {

namespace {
struct WeightTypeInfo {
  WeightType type;
  const char* name;
  uint32_t block_elements, block_bytes;
};
constexpr WeightTypeInfo kWeightTypes[] = {
    {WeightType::F32, "f32", 1, 4},
    {WeightType::F16, "f16", 1, 2},
    {WeightType::BF16, "bf16", 1, 2},
    {WeightType::Q4_0, "q4_0", QK4_0_ELEMS, QK4_0_BYTES},
    {WeightType::Q4_1, "q4_1", QK4_1_ELEMS, QK4_1_BYTES},
    {WeightType::Q5_0, "q5_0", QK5_0_ELEMS, QK5_0_BYTES},
    {WeightType::Q5_1, "q5_1", QK5_1_ELEMS, QK5_1_BYTES},
    {WeightType::Q8_0, "q8_0", QK8_0_ELEMS, QK8_0_BYTES},
    {WeightType::Q2_K, "q2_k", QK_K_ELEMS, QK2_K_BYTES},
    {WeightType::Q3_K, "q3_k", QK_K_ELEMS, QK3_K_BYTES},
    {WeightType::Q4_K, "q4_k", QK_K_ELEMS, QK4_K_BYTES},
    {WeightType::Q5_K, "q5_k", QK_K_ELEMS, QK5_K_BYTES},
    {WeightType::Q6_K, "q6_k", QK_K_ELEMS, QK6_K_BYTES},
    {WeightType::IQ4_NL, "iq4_nl", QK4_NL_ELEMS, QK4_NL_BYTES},
    {WeightType::IQ4_XS, "iq4_xs", QK_K_ELEMS, QK4_XS_BYTES},
    {WeightType::IQ1_S, "iq1_s", QK_K_ELEMS, QK1_S_BYTES},
    {WeightType::IQ1_M, "iq1_m", QK_K_ELEMS, QK1_M_BYTES},
    {WeightType::IQ2_XXS, "iq2_xxs", QK_K_ELEMS, QK2_XXS_BYTES},
    {WeightType::IQ2_XS, "iq2_xs", QK_K_ELEMS, QK2_XS_BYTES},
    {WeightType::IQ2_S, "iq2_s", QK_K_ELEMS, QK2_S_BYTES},
    {WeightType::IQ3_XXS, "iq3_xxs", QK_K_ELEMS, QK3_XXS_BYTES},
    {WeightType::IQ3_S, "iq3_s", QK_K_ELEMS, QK3_S_BYTES},
    {WeightType::MXFP4, "mxfp4", QKMXFP4_ELEMS, QKMXFP4_BYTES},
    {WeightType::FP8_B32, "fp8_b32", QKFP8_ELEMS, QKFP8_BYTES},
    {WeightType::INT4_B32, "int4_b32", QKINT4_ELEMS, QKINT4_BYTES},
};
const WeightTypeInfo& info(WeightType t) {
  for (const auto& e : kWeightTypes)
    if (e.type == t) return e;
  fail("invalid WeightType {}", int(t));
}
}  // namespace

const char* weight_type_name(WeightType t) { return info(t).name; }
bool weight_type_quantized(WeightType t) { return info(t).block_elements > 1; }
uint32_t weight_type_block_elements(WeightType t) { return info(t).block_elements; }
uint32_t weight_type_block_bytes(WeightType t) { return info(t).block_bytes; }
uint64_t weight_row_bytes(WeightType t, uint64_t cols) {
  return cols / info(t).block_elements * info(t).block_bytes;
}

void check_whole_blocks(WeightType t, uint32_t cols, const char* op) {
  uint32_t block = info(t).block_elements;
  if (cols % block != 0)
    fail("{}: {} weight rows of {} columns are not a whole number of {}-element blocks", op, info(t).name, cols,
         block);
}

namespace {
vk::Access row_access(const Act& a, uint32_t rows, uint32_t width, bool read, bool write) {
  return vk::Access{a.range.buffer, a.range.offset + uint64_t(a.offset) * 4, uint64_t(width) * 4,
                    uint64_t(a.stride) * 4, rows, read, write};
}
}  // namespace

bool Act::texel_aligned() const {
  return offset % 4 == 0 && stride % 4 == 0 && vk::texel_view_possible(range, VK_FORMAT_R32G32B32A32_SFLOAT);
}

VkFormat weight_texel_format(WeightType t) {
  const bool quads = !weight_type_quantized(t) || t == WeightType::Q4_K || t == WeightType::Q5_K;
  return quads ? VK_FORMAT_R32G32B32A32_UINT : VK_FORMAT_R32_UINT;
}

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
