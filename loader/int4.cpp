#include "loader/int4.h"

#include <cmath>
#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <eaglevk/error.h>

namespace eaglevk::loader {
namespace {

using Layout = Int4Parts::Layout;

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

const TensorView& need(const Checkpoint& ckpt, const std::string& name, const std::string& weight) {
  const TensorView* t = ckpt.find(name);
  if (!t) fail("4-bit weight '{}' in {} has no '{}'", weight, ckpt.path.string(), name);
  return *t;
}

void expect(const TensorView& t, std::initializer_list<DType> dtypes, std::vector<int64_t> shape) {
  bool dtype_ok = false;
  for (DType d : dtypes) dtype_ok |= t.dtype == d;
  if (!dtype_ok || t.shape != shape)
    fail("tensor '{}' in {} is {} [{}], expected [{}] of {}", t.name, t.file, dtype_name(t.dtype),
         fmt::join(t.shape, ", "), fmt::join(shape, ", "),
         fmt::join([&] {
           std::vector<std::string_view> names;
           for (DType d : dtypes) names.push_back(dtype_name(d));
           return names;
         }(), " or "));
}

constexpr std::initializer_list<DType> kScaleTypes = {DType::F16, DType::BF16, DType::F32};

// An act-order group index is refused unless it is the plain c / group.
void expect_plain_groups(const TensorView& g_idx, int64_t in, int64_t group) {
  const std::vector<int64_t> v = to_i64(g_idx);
  if (int64_t(v.size()) != in) fail("tensor '{}' in {} holds {} group indices for {} inputs", g_idx.name, g_idx.file, v.size(), in);
  for (int64_t c = 0; c < in; ++c)
    if (v[size_t(c)] != c / group)
      fail("tensor '{}' in {} reorders the groups (act-order: input {} in group {}); eaglevk reads 4-bit weights "
           "whose groups are runs of {} inputs",
           g_idx.name, g_idx.file, c, v[size_t(c)], group);
}

bool all_zero(const TensorView& t) {
  for (size_t i = 0; i < t.bytes; ++i)
    if (t.data[i] != std::byte{0}) {
      // -0.0 is zero too: only the sign bit set in an element
      const size_t e = dtype_size(t.dtype);
      if (e == 0 || (i % e) != e - 1 || t.data[i] != std::byte{0x80}) return false;
    }
  return true;
}

// AWQ's GEMM packing: output 8 w + j of a word sits in nibble kAwqNibble[j].
constexpr int kAwqNibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};

uint32_t word_at(const TensorPart& t, int64_t index) {
  uint32_t w;
  std::memcpy(&w, t.data + 4 * index, 4);
  return w;
}


}  // namespace

void attach_int4_weights(Checkpoint& ckpt, const QuantScheme& s, const std::string& source,
                         std::vector<std::string>& notes) {
  const bool ct = s.method == "compressed-tensors";
  const std::string marker = ct ? ".weight_packed" : ".qweight";
  std::vector<std::string> consumed;
  std::vector<TensorView> made;
  size_t zero_biases = 0;
  for (const auto& [name, t] : ckpt.tensors) {
    if (!ends_with(name, marker)) continue;
    const std::string base = name.substr(0, name.size() - marker.size()), weight = base + ".weight";
    Int4Parts p;
    int64_t out = 0, in = 0;
    if (t.dtype != DType::I32 || t.shape.size() != 2 || t.shape[0] <= 0 || t.shape[1] <= 0)
      fail("tensor '{}' in {} is {} [{}], expected 2-D I32 packed 4-bit codes", name, t.file, dtype_name(t.dtype),
           fmt::join(t.shape, ", "));
    if (ct) {
      p.layout = Layout::CompressedTensors;
      const TensorView& shape = need(ckpt, base + ".weight_shape", weight);
      const std::vector<int64_t> dims = to_i64(shape);
      if (dims.size() != 2 || dims[0] <= 0 || dims[1] <= 0 || dims[1] % 8 != 0)
        fail("tensor '{}' in {} gives shape [{}]; expected [out, in] with in a multiple of 8", shape.name, shape.file,
             fmt::join(dims, ", "));
      out = dims[0], in = dims[1];
      expect(t, {DType::I32}, {out, in / 8});
      consumed.push_back(shape.name);
    } else if (s.method == "gptq") {
      p.layout = Layout::Gptq;
      in = t.shape[0] * 8, out = t.shape[1];
    } else {
      p.layout = Layout::Awq;
      in = t.shape[0], out = t.shape[1] * 8;
    }
    p.group = s.group_size ? s.group_size : in;
    if (in % 32 != 0 || p.group % 32 != 0)
      fail("4-bit weight '{}' in {}: {} inputs in groups of {}; eaglevk reads them in blocks of 32", weight, t.file,
           in, p.group);
    const int64_t groups = ceil_div(in, p.group);
    p.packed = t.part();
    consumed.push_back(name);
    if (ct) {
      const TensorView& scales = need(ckpt, base + ".weight_scale", weight);
      expect(scales, kScaleTypes, {out, groups});
      p.scales = scales.part();
      consumed.push_back(scales.name);
      if (const TensorView* zp = ckpt.find(base + ".weight_zero_point")) {
        expect(*zp, {DType::I32}, {ceil_div(out, 8), groups});
        p.zeros = zp->part();
        consumed.push_back(zp->name);
      }
      if (const TensorView* g = ckpt.find(base + ".weight_g_idx")) {
        expect_plain_groups(*g, in, p.group);
        consumed.push_back(g->name);
      }
    } else {
      if (out % 8 != 0) fail("4-bit weight '{}' in {} has {} outputs, not a multiple of 8", weight, t.file, out);
      const TensorView& scales = need(ckpt, base + ".scales", weight);
      const TensorView& zeros = need(ckpt, base + ".qzeros", weight);
      expect(scales, kScaleTypes, {groups, out});
      expect(zeros, {DType::I32}, {groups, out / 8});
      p.scales = scales.part();
      p.zeros = zeros.part();
      p.zero_offset = s.zero_offset;
      consumed.push_back(scales.name);
      consumed.push_back(zeros.name);
      if (const TensorView* g = ckpt.find(base + ".g_idx")) {
        expect_plain_groups(*g, in, p.group);
        consumed.push_back(g->name);
      }
      // Some exporters write a bias for every packed layer; Llama's layers have none.
      if (const TensorView* bias = ckpt.find(base + ".bias")) {
        if (!all_zero(*bias)) fail("4-bit weight '{}' in {} has a non-zero bias; Llama layers have none", weight, t.file);
        consumed.push_back(bias->name);
        ++zero_biases;
      }
    }
    if (ckpt.find(weight)) fail("{} holds both '{}' and its packed 4-bit parts", t.file, weight);
    TensorView v;
    v.name = weight;
    v.dtype = DType::INT4_PACKED;
    v.shape = {out, in};
    v.data = t.data;
    v.bytes = t.bytes;
    v.file = t.file;
    v.int4 = std::move(p);
    made.push_back(std::move(v));
  }
  if (made.empty()) fail("{}: quantization_config names 4-bit {} weights but no tensor ends in {}", source, s.method, marker);
  for (const std::string& name : consumed) ckpt.tensors.erase(name);
  for (TensorView& v : made) ckpt.tensors[v.name] = std::move(v);
  notes.push_back(fmt::format("4-bit weights ({}, groups of {}): {} tensors, dequantized on the fly with f32 "
                              "activations{}",
                              s.method, s.group_size ? fmt::to_string(s.group_size) : "a row", made.size(),
                              zero_biases ? fmt::format("; {} all-zero biases dropped", zero_biases) : ""));
}

uint64_t int4_block_bytes(const TensorView& w) { return uint64_t(w.numel()) / 32 * 24; }

void int4_rows_to_blocks(const TensorView& w, int64_t first, int64_t count, std::vector<std::byte>& out) {
  if (w.dtype != DType::INT4_PACKED || !w.int4 || w.shape.size() != 2)
    fail("tensor '{}' in {} is not a 4-bit weight with its parts", w.name, w.file);
  const Int4Parts& p = *w.int4;
  const int64_t R = w.shape[0], C = w.shape[1], G = ceil_div(C, p.group);
  if (first < 0 || count < 0 || first + count > R) fail("4-bit weight '{}': rows [{}, {}) of {}", w.name, first, first + count, R);
  // The 32 codes of row r, inputs [32 b, 32 b + 32): whole words where the layout packs along
  // the inputs (4 words), AWQ's one nibble of each of 32 words.
  auto codes = [&](int64_t r, int64_t b, uint8_t* q) {
    if (p.layout == Layout::Awq) {
      const int shift = 4 * kAwqNibble[r % 8];
      for (int64_t j = 0; j < 32; ++j) q[j] = uint8_t((word_at(p.packed, (b * 32 + j) * (R / 8) + r / 8) >> shift) & 15);
      return;
    }
    for (int64_t k = 0; k < 4; ++k) {
      const uint32_t word = word_at(p.packed, p.layout == Layout::Gptq ? (b * 4 + k) * R + r : r * (C / 8) + b * 4 + k);
      for (int n = 0; n < 8; ++n) q[8 * k + n] = uint8_t((word >> (4 * n)) & 15);
    }
  };
  auto zero = [&](int64_t r, int64_t g) -> int {
    if (!p.zeros) return 8;
    switch (p.layout) {
      case Layout::CompressedTensors: return int((word_at(*p.zeros, (r / 8) * G + g) >> (4 * (r % 8))) & 15);
      case Layout::Gptq: return int((word_at(*p.zeros, g * (R / 8) + r / 8) >> (4 * (r % 8))) & 15) + p.zero_offset;
      case Layout::Awq: return int((word_at(*p.zeros, g * (R / 8) + r / 8) >> (4 * kAwqNibble[r % 8])) & 15);
    }
    return 8;
  };
  const int64_t blocks = C / 32;
  const size_t start = out.size();
  out.resize(start + size_t(count * blocks) * 24);
  auto put_block = [&](int64_t r, int64_t b) {
    const int64_t g = b * 32 / p.group;
    const float d = float_at(p.scales, p.layout == Layout::CompressedTensors ? r * G + g : g * R + r);
    if (!std::isfinite(d)) fail("4-bit weight '{}' in {}: scale of row {}, group {} is {}", w.name, w.file, r, g, d);
    const float m = -float(zero(r, g)) * d;
    std::byte* dst = out.data() + start + size_t((r - first) * blocks + b) * 24;
    uint8_t q[32];
    codes(r, b, q);
    std::memcpy(dst, &d, 4);
    std::memcpy(dst + 4, &m, 4);
    for (int j = 0; j < 16; ++j) dst[8 + j] = std::byte(q[j] | (q[j + 16] << 4));
  };
  // Reads in file order: GPTQ and AWQ keep a word's neighbours in the next rows, compressed-tensors
  // in the same row.
  if (p.layout == Layout::CompressedTensors) {
    for (int64_t r = first; r < first + count; ++r)
      for (int64_t b = 0; b < blocks; ++b) put_block(r, b);
  } else {
    for (int64_t b = 0; b < blocks; ++b)
      for (int64_t r = first; r < first + count; ++r) put_block(r, b);
  }
}

}  // namespace eaglevk::loader
