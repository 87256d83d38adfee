#include "loader/fp8.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <eaglevk/error.h>


namespace eaglevk::loader {

float e4m3_to_f32(uint8_t code) {
  const int e = (code >> 3) & 15, m = code & 7;
  if (e == 15 && m == 7) return std::nanf("");
  // Exponent 0 is subnormal: m * 2^-9; otherwise (8 + m) * 2^(e - 10). Both exact in f32.
  const float magnitude = e == 0 ? std::ldexp(float(m), -9) : std::ldexp(float(8 + m), e - 10);
  return (code & 0x80) ? -magnitude : magnitude;
}

uint8_t f32_to_e4m3(float value) {
  const uint8_t sign = std::signbit(value) ? 0x80 : 0;
  if (std::isnan(value)) return 0x7F;
  const float a = std::min(std::fabs(value), kE4M3Max);
  // The spacing of representable values at a's binade: 2^-9 below 2^-6 (subnormals), else
  // 2^(floor(log2 a) - 3). a / spacing rounded to nearest even is then the code's integer
  // significand, exact because the division is by a power of two.
  int exp2 = 0;
  std::frexp(a, &exp2);  // a = f * 2^exp2, f in [0.5, 1)
  const int step = std::max(exp2 - 1, -6) - 3;
  const float q = std::nearbyint(std::ldexp(a, -step));  // default rounding: nearest even
  if (q == 0) return sign;
  // q in [8, 16] for normals (16: rounded up into the next binade), [1, 8] for subnormals.
  int e = step + 10, m = int(q);
  if (m >= 16) { m /= 2; ++e; }
  if (m < 8) return uint8_t(sign | m);  // subnormal (e would be 0); m == 8 is the smallest normal below
  return uint8_t(sign | (e << 3) | (m - 8));
}

namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The activation and KV-cache scales of W8A8 files: not used (the header says why).
bool is_activation_scale(std::string_view name) {
  for (std::string_view s : {".input_scale", ".k_scale", ".v_scale", ".kv_scale", ".activation_scale"})
    if (ends_with(name, s)) return true;
  return false;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The scale block of `scale` for an [R, C] weight: per tensor, per row, or the scheme's blocks.
void resolve_layout(WeightScale& s, const TensorView& w, const std::optional<QuantScheme>& scheme) {
  const int64_t R = w.shape[0], C = w.shape[1];
  int64_t n = 1;
  const std::vector<int64_t>& shape = s.tensor.shape;
  for (int64_t d : shape) n *= d;
  const bool per_row = (shape.size() == 2 && shape[0] == R && shape[1] == 1) ||
                       (shape.size() == 1 && shape[0] == R && R > 1);
  if (n == 1 && shape.size() <= 2) {
    s.block_rows = R, s.block_cols = C;
  } else if (per_row) {
    s.block_rows = 1, s.block_cols = C;
  } else if (scheme && scheme->group_size > 0 && shape.size() == 2 && shape[0] == R &&
             shape[1] == ceil_div(C, scheme->group_size)) {
    s.block_rows = 1, s.block_cols = scheme->group_size;
  } else {
    // 2-D blocks: the scheme's size, or DeepSeek's 128 x 128 for the fp8 method without one.
    int64_t br = scheme ? scheme->block_rows : 0, bc = scheme ? scheme->block_cols : 0;
    if (br == 0 && scheme && scheme->method == "fp8") br = bc = 128;
    if (br == 0 || shape.size() != 2 || shape[0] != ceil_div(R, br) || shape[1] != ceil_div(C, bc))
      fail("scale '{}' has shape [{}], which fits none of the layouts of its [{}, {}] weight '{}' in {} (one scale, "
           "one a row [{}, 1]{})",
           s.tensor.name, fmt::join(shape, ", "), R, C, w.name, w.file, R,
           br ? fmt::format(", or one per {} x {} block [{}, {}]", br, bc, ceil_div(R, br), ceil_div(C, bc)) : "");
    s.block_rows = br, s.block_cols = bc;
  }
  if (C % 32 != 0)
    fail("FP8 weight '{}' in {} has rows of {} elements; eaglevk reads FP8 in blocks of 32", w.name, w.file, C);
  if (s.block_cols < C && s.block_cols % 32 != 0)
    fail("FP8 weight '{}' in {}: scale blocks of {} columns; eaglevk's FP8 blocks need multiples of 32", w.name,
         w.file, s.block_cols);
}

}  // namespace

void attach_fp8_scales(Checkpoint& ckpt, const std::optional<QuantScheme>& scheme, const std::string& source,
                       std::vector<std::string>& notes) {
  std::vector<std::string> scales_used, activation_scales;
  bool any_fp8 = false;
  for (auto& [name, t] : ckpt.tensors) {
    if (t.dtype != DType::F8_E4M3) continue;
    any_fp8 = true;
    if (!scheme)
      fail("{}: tensor '{}' is FP8 (F8_E4M3) but config.json has no quantization_config saying how to scale it",
           source, name);
    if (t.shape.size() != 2 || t.shape[0] <= 0 || t.shape[1] <= 0)
      fail("FP8 tensor '{}' in {} has shape [{}]; eaglevk reads 2-D FP8 weights (one matrix per expert)", name,
           t.file, fmt::join(t.shape, ", "));
    const TensorView* s = nullptr;
    for (const char* suffix : {"_scale", "_scale_inv"}) {
      const TensorView* found = ckpt.find(name + suffix);
      if (!found) continue;
      if (s) fail("FP8 weight '{}' in {} has both {}_scale and {}_scale_inv", name, t.file, name, name);
      s = found;
    }
    if (!s) fail("FP8 weight '{}' in {} has no scale ({}_scale or {}_scale_inv)", name, t.file, name, name);
    if (s->dtype != DType::F32 && s->dtype != DType::BF16 && s->dtype != DType::F16)
      fail("scale '{}' in {} is {}; scales must be F32, BF16 or F16", s->name, s->file, dtype_name(s->dtype));
    WeightScale ws{s->part()};
    resolve_layout(ws, t, scheme);
    t.scale = std::move(ws);
    scales_used.push_back(s->name);
  }
  if (scheme && !any_fp8)
    fail("{}: quantization_config names {} but no tensor is FP8 (F8_E4M3)", source, scheme->method);
  for (const auto& [name, t] : ckpt.tensors) {
    if (is_activation_scale(name)) {
      activation_scales.push_back(name);
    } else if ((ends_with(name, "_scale") || ends_with(name, "_scale_inv")) && scheme &&
               std::find(scales_used.begin(), scales_used.end(), name) == scales_used.end()) {
      fail("tensor '{}' in {} looks like a weight scale but scales no FP8 weight", name, t.file);
    }
  }
  // The views point into the mappings, which stay: only the map entries go.
  for (const std::string& name : scales_used) ckpt.tensors.erase(name);
  for (const std::string& name : activation_scales) ckpt.tensors.erase(name);
  if (scheme)
    notes.push_back(fmt::format("FP8 weights ({}): {} tensors, dequantized on the fly with f32 activations{}",
                                scheme->method, scales_used.size(),
                                activation_scales.empty()
                                    ? std::string()
                                    : fmt::format("; {} activation/KV-cache scales not used", activation_scales.size())));
}

uint64_t fp8_block_bytes(const TensorView& w) {
  return uint64_t(w.numel()) / 32 * 36;
}

void fp8_rows_to_blocks(const TensorView& w, int64_t first, int64_t count, std::vector<std::byte>& out) {
  if (w.dtype != DType::F8_E4M3 || !w.scale || w.shape.size() != 2)
    fail("tensor '{}' in {} is not a 2-D FP8 weight with a scale", w.name, w.file);
  const WeightScale& s = *w.scale;
  const int64_t R = w.shape[0], C = w.shape[1];
  if (C % 32 != 0 || first < 0 || count < 0 || first + count > R)
    fail("FP8 weight '{}': rows [{}, {}) of a [{}, {}] matrix in blocks of 32", w.name, first, first + count, R, C);
  const int64_t scale_cols = ceil_div(C, s.block_cols);
  size_t at = out.size();
  out.resize(at + size_t(count) * size_t(C / 32) * 36);
  for (int64_t r = first; r < first + count; ++r) {
    const auto* codes = reinterpret_cast<const uint8_t*>(w.data) + r * C;
    for (int64_t b = 0; b < C / 32; ++b, at += 36) {
      const float scale = float_at(s.tensor, (r / s.block_rows) * scale_cols + (b * 32) / s.block_cols);
      if (!std::isfinite(scale)) fail("FP8 weight '{}' in {}: scale of row {} is {}", w.name, w.file, r, scale);
      for (int j = 0; j < 32; ++j)
        if ((codes[b * 32 + j] & 0x7F) == 0x7F)
          fail("FP8 weight '{}' in {} holds a NaN code in row {}, column {}", w.name, w.file, r, b * 32 + j);
      std::memcpy(out.data() + at, &scale, 4);
      std::memcpy(out.data() + at + 4, codes + b * 32, 32);
    }
  }
}

}  // namespace eaglevk::loader
