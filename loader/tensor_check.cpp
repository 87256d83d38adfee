#include "loader/tensor_check.h"

#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <eaglevk/error.h>

#include "loader/quant.h"

namespace eaglevk::loader {
namespace {

uint16_t u16_at(const std::byte* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// Sign and exponent bits say it all: the exponent field all ones is an infinity (zero
// mantissa) or a NaN.
std::string f32_name(uint32_t bits) {
  if (bits & 0x007fffffu) return "nan";
  return bits & 0x80000000u ? "-inf" : "inf";
}
std::string f16_name(uint16_t bits) {
  if (bits & 0x03ffu) return "nan";
  return bits & 0x8000u ? "-inf" : "inf";
}
bool f16_non_finite(uint16_t bits) { return (bits & 0x7c00u) == 0x7c00u; }

// The f16 fields of one ggml block that scale its codes: (byte offset, name). IQ1_M spreads its
// d over four u16s and is read apart; MXFP4's E8M0 exponent too.
struct HalfField {
  uint32_t offset;
  const char* name;
};
std::vector<HalfField> half_fields(DType dtype) {
  switch (dtype) {
    case DType::Q4_0: case DType::Q5_0: case DType::Q8_0: case DType::IQ4_NL: case DType::IQ4_XS:
    case DType::IQ1_S: case DType::IQ2_XXS: case DType::IQ2_XS: case DType::IQ2_S: case DType::IQ3_XXS:
    case DType::IQ3_S:
      return {{0, "block scale d"}};
    case DType::Q4_1: case DType::Q5_1:
      return {{0, "block scale d"}, {2, "block minimum m"}};
    case DType::Q4_K: case DType::Q5_K:
      return {{0, "block scale d"}, {2, "block minimum scale dmin"}};
    case DType::Q2_K:
      return {{80, "block scale d"}, {82, "block minimum scale dmin"}};
    case DType::Q3_K:
      return {{108, "block scale d"}};
    case DType::Q6_K:
      return {{208, "block scale d"}};
    default:
      return {};
  }
}

std::optional<NonFiniteElement> scan_floats(DType dtype, const std::byte* data, uint64_t n) {
  switch (dtype) {
    case DType::F32:
      for (uint64_t i = 0; i < n; ++i) {
        uint32_t bits;
        std::memcpy(&bits, data + 4 * i, 4);
        if ((bits & 0x7f800000u) == 0x7f800000u) return NonFiniteElement{i, "element", f32_name(bits)};
      }
      return std::nullopt;
    case DType::F64:
      for (uint64_t i = 0; i < n; ++i) {
        uint64_t bits;
        std::memcpy(&bits, data + 8 * i, 8);
        if ((bits & 0x7ff0000000000000ull) == 0x7ff0000000000000ull)
          return NonFiniteElement{i, "element", bits & 0x000fffffffffffffull ? "nan" : bits >> 63 ? "-inf" : "inf"};
      }
      return std::nullopt;
    case DType::BF16:  // the top half of an f32
      for (uint64_t i = 0; i < n; ++i) {
        const uint16_t bits = u16_at(data + 2 * i);
        if ((bits & 0x7f80u) == 0x7f80u) return NonFiniteElement{i, "element", f32_name(uint32_t(bits) << 16)};
      }
      return std::nullopt;
    case DType::F16:
      for (uint64_t i = 0; i < n; ++i) {
        const uint16_t bits = u16_at(data + 2 * i);
        if (f16_non_finite(bits)) return NonFiniteElement{i, "element", f16_name(bits)};
      }
      return std::nullopt;
    case DType::F8_E4M3:  // no infinity; S.1111.111 is NaN
      for (uint64_t i = 0; i < n; ++i)
        if ((uint8_t(data[i]) & 0x7f) == 0x7f) return NonFiniteElement{i, "element", "nan"};
      return std::nullopt;
    case DType::F8_E5M2:  // IEEE-like: exponent 11111 is an infinity or a NaN
      for (uint64_t i = 0; i < n; ++i) {
        const uint8_t b = uint8_t(data[i]);
        if ((b & 0x7c) == 0x7c) return NonFiniteElement{i, "element", b & 3 ? "nan" : b & 0x80 ? "-inf" : "inf"};
      }
      return std::nullopt;
    default:
      return std::nullopt;  // integers
  }
}

std::optional<NonFiniteElement> scan_blocks(DType dtype, const std::byte* data, uint64_t bytes) {
  const uint32_t block = block_bytes(dtype), elems = block_elements(dtype);
  const uint64_t blocks = bytes / block;
  const std::vector<HalfField> fields = half_fields(dtype);
  for (uint64_t b = 0; b < blocks; ++b) {
    const std::byte* p = data + b * block;
    for (const HalfField& f : fields)
      if (const uint16_t bits = u16_at(p + f.offset); f16_non_finite(bits))
        return NonFiniteElement{b * elems, f.name, f16_name(bits)};
    if (dtype == DType::IQ1_M) {  // d: the top nibbles of the four u16 scales at byte 48
      uint16_t d = 0;
      for (int i = 0; i < 4; ++i) d |= uint16_t((u16_at(p + 48 + 2 * i) >> 12) << (4 * i));
      if (f16_non_finite(d)) return NonFiniteElement{b * elems, "block scale d", f16_name(d)};
    }
    if (dtype == DType::MXFP4 && uint8_t(p[0]) == 0xff)  // E8M0: 0xff is its NaN
      return NonFiniteElement{b * elems, "block exponent e", "nan"};
  }
  return std::nullopt;
}

std::optional<NonFiniteElement> scan_part(DType dtype, const std::byte* data, size_t bytes) {
  if (is_quantized(dtype)) return scan_blocks(dtype, data, bytes);
  const size_t size = dtype_size(dtype);
  return size ? scan_floats(dtype, data, bytes / size) : std::nullopt;
}

std::string where(const NonFiniteElement& e, const TensorPart& part) {
  return fmt::format("{} {} of '{}' ({} [{}]) is {}", e.what, e.index, part.name, dtype_name(part.dtype),
                     fmt::join(part.shape, ", "), e.value);
}

}  // namespace

bool should_check_tensors(std::optional<bool> requested, uint64_t checkpoint_bytes) {
  return requested.value_or(checkpoint_bytes <= kAutoTensorCheckBytes);
}

std::optional<NonFiniteElement> first_non_finite(const TensorView& t) {
  if (t.dtype == DType::INT4_PACKED) return std::nullopt;  // codes; its scales are checked apart
  return scan_part(t.dtype, t.data, t.bytes);
}

void check_tensors_finite(const Checkpoint& ckpt, const std::string& label) {
  for (const auto& [name, t] : ckpt.tensors) {
    // A weight's scales (FP8, 4-bit integer) left the tensor map when they were attached to it.
    std::vector<TensorPart> parts;
    if (t.dtype != DType::INT4_PACKED) parts.push_back(t.part());
    if (t.scale) parts.push_back(t.scale->tensor);
    if (t.int4) parts.push_back(t.int4->scales);
    for (const TensorPart& part : parts)
      if (auto bad = scan_part(part.dtype, part.data, part.bytes))
        fail("{}: {} (in {}); refusing NaN or infinite weights (the tensor check at load)", label, where(*bad, part),
             t.file);
    ckpt.release_pages(t);
  }
}

}  // namespace eaglevk::loader
