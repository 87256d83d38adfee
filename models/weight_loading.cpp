#include "models/weight_loading.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <eaglevk/error.h>

#include "loader/fp8.h"
#include "loader/int4.h"
#include "loader/quant.h"

namespace eaglevk::models {

void expect_shape(const loader::TensorView& t, std::initializer_list<int64_t> shape) {
  if (!std::equal(t.shape.begin(), t.shape.end(), shape.begin(), shape.end()))
    fail("tensor '{}' in {} has shape [{}], expected [{}]", t.name, t.file, fmt::join(t.shape, ", "),
         fmt::join(shape, ", "));
}

ops::WeightType weight_type_of(const loader::TensorView& t) {
  using loader::DType;
  using ops::WeightType;
  switch (t.dtype) {
    case DType::F32: return WeightType::F32;
    case DType::F16: return WeightType::F16;
    case DType::BF16: return WeightType::BF16;
    case DType::Q4_0: return WeightType::Q4_0;
    case DType::Q4_1: return WeightType::Q4_1;
    case DType::Q5_0: return WeightType::Q5_0;
    case DType::Q5_1: return WeightType::Q5_1;
    case DType::Q8_0: return WeightType::Q8_0;
    case DType::Q2_K: return WeightType::Q2_K;
    case DType::Q3_K: return WeightType::Q3_K;
    case DType::Q4_K: return WeightType::Q4_K;
    case DType::Q5_K: return WeightType::Q5_K;
    case DType::Q6_K: return WeightType::Q6_K;
    case DType::IQ4_NL: return WeightType::IQ4_NL;
    case DType::IQ4_XS: return WeightType::IQ4_XS;
    case DType::IQ1_S: return WeightType::IQ1_S;
    case DType::IQ1_M: return WeightType::IQ1_M;
    case DType::IQ2_XXS: return WeightType::IQ2_XXS;
    case DType::IQ2_XS: return WeightType::IQ2_XS;
    case DType::IQ2_S: return WeightType::IQ2_S;
    case DType::IQ3_XXS: return WeightType::IQ3_XXS;
    case DType::IQ3_S: return WeightType::IQ3_S;
    case DType::MXFP4: return WeightType::MXFP4;
    case DType::F8_E4M3:
      if (!t.scale) fail("FP8 tensor '{}' in {} has no scale attached (loader/fp8.h)", t.name, t.file);
      return WeightType::FP8_B32;  // codes and scale go up as eaglevk's FP8 blocks
    case DType::INT4_PACKED:
      if (!t.int4) fail("4-bit tensor '{}' in {} has no parts attached (loader/int4.h)", t.name, t.file);
      return WeightType::INT4_B32;
    default:
      fail("tensor '{}' in {} has dtype {}; weights must be F32, F16, BF16 or one of Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, "
           "Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ4_NL, IQ4_XS, MXFP4, "
           "FP8 E4M3 with a scale or packed 4-bit integers",
           t.name, t.file, loader::dtype_name(t.dtype));
  }
}

ops::WeightMatrix DeviceMatrix::part(size_t i) const {
  const Part& p = parts.at(i);
  return {vk::BufferRange(buffer, p.offset, (p.bytes + 3) / 4 * 4), p.type, p.rows, cols};
}

ops::WeightMatrix DeviceMatrix::matrix() const {
  if (parts.size() != 1) fail("weight '{}' is stored in {} parts of different types; use linear()", buffer.name, parts.size());
  return part(0);
}

void linear(ops::OpContext& oc, ops::Act x, const DeviceMatrix& w, ops::Act y, uint32_t rows, bool accumulate,
            ops::MatmulPath path, const char* name) {
  for (size_t i = 0; i < w.parts.size(); ++i)
    ops::matmul(oc, x, w.part(i), y.cols(w.parts[i].first_row), rows, accumulate, path, name);
}

void linear_swiglu(ops::OpContext& oc, ops::Act x, const DeviceMatrix& gate_up, ops::Act gu, ops::Act out,
                   uint32_t rows, uint32_t width, ops::MatmulPath path, const char* name) {
  if (gate_up.parts.size() == 1) {
    ops::matmul_swiglu(oc, x, gate_up.part(0), gu, out, rows, path, name);
    return;
  }
  linear(oc, x, gate_up, gu, rows, false, path, name);
  ops::swiglu(oc, gu, gu.cols(width), out, rows, width);
}

namespace {

bool folds_into_every_part(const ops::Gpu& gpu, const DeviceMatrix& w, uint32_t rows, ops::MatmulPath path) {
  for (size_t i = 0; i < w.parts.size(); ++i)
    if (!ops::norm_folds(gpu, w.part(i), rows, path)) return false;
  return true;
}

}  // namespace

void norm_matmul(ops::OpContext& oc, const NormedInput& in, const ops::WeightMatrix& w, ops::Act y, uint32_t rows,
                 ops::MatmulPath path, const char* name) {
  if (!ops::norm_folds(oc.gpu, w, rows, path)) {
    ops::rms_norm(oc, in.x, &in.weight, in.normed, rows, w.cols, in.eps, in.name);
    ops::matmul(oc, in.normed, w, y, rows, false, path, name);
    return;
  }
  const ops::NormFold fold{in.weight, in.eps};
  ops::matmul(oc, in.x, w, y, rows, false, path, name, &fold);
}

void norm_linear(ops::OpContext& oc, const NormedInput& in, const DeviceMatrix& w, ops::Act y, uint32_t rows,
                 ops::MatmulPath path, const char* name) {
  if (!folds_into_every_part(oc.gpu, w, rows, path)) {
    ops::rms_norm(oc, in.x, &in.weight, in.normed, rows, w.cols, in.eps, in.name);
    linear(oc, in.normed, w, y, rows, false, path, name);
    return;
  }
  const ops::NormFold fold{in.weight, in.eps};
  for (size_t i = 0; i < w.parts.size(); ++i)
    ops::matmul(oc, in.x, w.part(i), y.cols(w.parts[i].first_row), rows, false, path, name, &fold);
}

void norm_linear_swiglu(ops::OpContext& oc, const NormedInput& in, const DeviceMatrix& gate_up, ops::Act gu,
                        ops::Act out, uint32_t rows, uint32_t width, ops::MatmulPath path, const char* name) {
  if (gate_up.parts.size() != 1 || !folds_into_every_part(oc.gpu, gate_up, rows, path)) {
    ops::rms_norm(oc, in.x, &in.weight, in.normed, rows, gate_up.cols, in.eps, in.name);
    linear_swiglu(oc, in.normed, gate_up, gu, out, rows, width, path, name);
    return;
  }
  const ops::NormFold fold{in.weight, in.eps};
  ops::matmul_swiglu(oc, in.x, gate_up.part(0), gu, out, rows, path, name, &fold);
}

namespace {

bool rope_folds_into_every_part(const ops::Gpu& gpu, const DeviceMatrix& w, uint32_t rows, ops::MatmulPath path,
                                const ops::RopeKv& rope) {
  for (size_t i = 0; i < w.parts.size(); ++i)
    if (!ops::rope_folds(gpu, w.part(i), w.parts[i].first_row, rows, path, rope)) return false;
  return true;
}

// The parts' products with the rotation and cache write folded in, x normed on the way where
// `norm` is given.
void matmul_rope_kv_parts(ops::OpContext& oc, ops::Act x, const DeviceMatrix& w, ops::Act qkv, uint32_t rows,
                          ops::MatmulPath path, const char* name, const ops::RopeKv& rope,
                          const ops::NormFold* norm) {
  for (size_t i = 0; i < w.parts.size(); ++i)
    ops::matmul_rope_kv(oc, x, w.part(i), w.parts[i].first_row, qkv, rows, path, name, rope, norm);
}

}  // namespace

void linear_rope_kv(ops::OpContext& oc, ops::Act x, const DeviceMatrix& qkv_w, ops::Act qkv, uint32_t rows,
                    ops::MatmulPath path, const char* name, const ops::RopeKv& rope) {
  if (!rope_folds_into_every_part(oc.gpu, qkv_w, rows, path, rope)) {
    linear(oc, x, qkv_w, qkv, rows, false, path, name);
    ops::rope_kv_write(oc, qkv, rows, rope);
    return;
  }
  matmul_rope_kv_parts(oc, x, qkv_w, qkv, rows, path, name, rope, nullptr);
}

void norm_linear_rope_kv(ops::OpContext& oc, const NormedInput& in, const DeviceMatrix& qkv_w, ops::Act qkv,
                         uint32_t rows, ops::MatmulPath path, const char* name, const ops::RopeKv& rope) {
  if (!rope_folds_into_every_part(oc.gpu, qkv_w, rows, path, rope)) {
    norm_linear(oc, in, qkv_w, qkv, rows, path, name);
    ops::rope_kv_write(oc, qkv, rows, rope);
    return;
  }
  if (!folds_into_every_part(oc.gpu, qkv_w, rows, path)) {
    ops::rms_norm(oc, in.x, &in.weight, in.normed, rows, qkv_w.cols, in.eps, in.name);
    matmul_rope_kv_parts(oc, in.normed, qkv_w, qkv, rows, path, name, rope, nullptr);
    return;
  }
  const ops::NormFold fold{in.weight, in.eps};
  matmul_rope_kv_parts(oc, in.x, qkv_w, qkv, rows, path, name, rope, &fold);
}

namespace {

// FP8 and packed 4-bit weights go up as FP8_B32 and INT4_B32 blocks, made on the host a few MiB
// of rows at a time.
void put_block_rows(vk::Uploader& up, const vk::Buffer& dst, uint64_t offset, const loader::TensorView& t) {
  const int64_t rows = t.shape[0], row_bytes = int64_t(loader::upload_bytes(t)) / rows;
  const int64_t chunk = std::max<int64_t>(1, (int64_t(8) << 20) / row_bytes);
  std::vector<std::byte> blocks;
  for (int64_t r = 0; r < rows; r += chunk) {
    const int64_t n = std::min(chunk, rows - r);
    blocks.clear();
    if (t.scale)
      loader::fp8_rows_to_blocks(t, r, n, blocks);
    else
      loader::int4_rows_to_blocks(t, r, n, blocks);
    // put() copies into staging before it returns, so `blocks` can be refilled at once.
    up.put(vk::BufferRange(dst, offset + uint64_t(r * row_bytes), blocks.size()), blocks.data(), blocks.size());
  }
}

// Puts one checkpoint tensor's rows at `offset`; see upload_matrix for the rope reordering.
void put_rows(vk::Uploader& up, const vk::Buffer& dst, uint64_t offset, const loader::TensorView& t) {
  if (t.scale || t.int4) {
    if (t.rope_permuted_heads) fail("tensor '{}': FP8 or 4-bit rows in llama.cpp's rope order", t.name);
    put_block_rows(up, dst, offset, t);
    return;
  }
  const uint32_t heads = t.rope_permuted_heads;
  if (heads == 0) {
    up.put(vk::BufferRange(dst, offset, t.bytes), t.data, t.bytes);
    return;
  }
  const int64_t rows = t.shape[0];
  if (rows % (2 * heads) != 0) fail("tensor '{}' has {} rows, not a whole number of {} heads", t.name, rows, heads);
  const uint64_t row_bytes = t.bytes / uint64_t(rows);
  const int64_t hd = rows / heads, half = hd / 2;
  // llama.cpp stores row h*hd + 2i + a for Hugging Face row h*hd + a*half + i.
  for (int64_t r = 0; r < rows; ++r) {
    int64_t h = r / hd, a = (r % hd) / half, i = (r % hd) % half;
    int64_t src = h * hd + 2 * i + a;
    up.put(vk::BufferRange(dst, offset + uint64_t(r) * row_bytes, row_bytes), t.data + uint64_t(src) * row_bytes,
           row_bytes);
  }
}

}  // namespace

void put_tensor(vk::Uploader& up, vk::BufferRange dst, const loader::TensorView& t) {
  if (loader::upload_bytes(t) > dst.bytes)
    fail("tensor '{}' takes {} bytes on the device, more than the {} of its place in '{}'", t.name, loader::upload_bytes(t),
         dst.bytes, dst.buffer->name);
  if (dst.buffer->dry()) return;  // a dry load (memory planning) reads no weight
  put_rows(up, *dst.buffer, dst.offset, t);
}

namespace {

// Offsets of separately bound parts: 256 bytes is the largest minStorageBufferOffsetAlignment
// the Vulkan spec allows.
constexpr uint64_t kPartAlignment = 256;

}  // namespace

DeviceMatrix upload_matrix(const vk::Context& ctx, vk::Uploader& up, const std::vector<const loader::TensorView*>& blocks,
                           const std::string& name) {
  const loader::TensorView& first = *blocks.front();
  if (first.shape.size() != 2) fail("tensor '{}' must be 2-D", first.name);
  const int64_t cols = first.shape[1];
  DeviceMatrix m;
  uint64_t end = 0;
  int64_t rows = 0;
  for (const loader::TensorView* b : blocks) {
    if (b->shape.size() != 2 || b->shape[1] != cols) fail("tensor '{}' must be [*, {}] to fuse into {}", b->name, cols, name);
    ops::WeightType type = weight_type_of(*b);
    if (cols % ops::weight_type_block_elements(type) != 0)
      fail("tensor '{}' has rows of {} elements, not whole {} blocks", b->name, cols, ops::weight_type_name(type));
    if (m.parts.empty() || m.parts.back().type != type) {
      end = (end + kPartAlignment - 1) / kPartAlignment * kPartAlignment;
      m.parts.push_back({type, uint32_t(rows), 0, end, 0});
    }
    DeviceMatrix::Part& p = m.parts.back();
    p.rows += uint32_t(b->shape[0]);
    p.bytes += loader::upload_bytes(*b);
    end += loader::upload_bytes(*b);
    rows += b->shape[0];
  }
  m.buffer = vk::Buffer(ctx, (end + 3) / 4 * 4, vk::MemoryKind::Device, name);
  uint64_t offset = 0;
  size_t part = 0;
  for (const loader::TensorView* b : blocks) {
    if (part + 1 < m.parts.size() && offset == m.parts[part].offset + m.parts[part].bytes) offset = m.parts[++part].offset;
    put_rows(up, m.buffer, offset, *b);
    offset += loader::upload_bytes(*b);
  }
  m.rows = uint32_t(rows);
  m.cols = uint32_t(cols);
  return m;
}

DeviceMatrix load_matrix(const vk::Context& ctx, vk::Uploader& up, TensorUse& use, MatrixParts parts,
                         const std::string& name) {
  std::vector<const loader::TensorView*> blocks;
  for (auto& [tensor, shape] : parts) {
    const loader::TensorView& t = use.get(tensor);
    expect_shape(t, {shape.first, shape.second});
    blocks.push_back(&t);
  }
  DeviceMatrix m = upload_matrix(ctx, up, blocks, name);
  for (const loader::TensorView* b : blocks) use.ckpt.release_pages(*b);  // copied into staging already
  return m;
}

vk::Buffer upload_f32_vector(const vk::Context& ctx, vk::Uploader& up, const loader::TensorView& t, int64_t length) {
  expect_shape(t, {length});
  std::vector<float> values = loader::to_f32(t);
  vk::Buffer b(ctx, values.size() * 4, vk::MemoryKind::Device, t.name);
  up.put(b, values.data(), values.size() * 4);
  up.flush();  // `values` dies here
  return b;
}

const loader::TensorView& TensorUse::get(const std::string& name) {
  const loader::TensorView& t = ckpt.get(name);
  used.push_back(name);
  return t;
}

uint64_t TensorUse::used_device_bytes() const {
  uint64_t bytes = 0;
  for (const std::string& name : used) bytes += loader::upload_bytes(ckpt.get(name));
  return bytes;
}

uint64_t TensorUse::used_parameters() const {
  uint64_t count = 0;
  for (const std::string& name : used) count += uint64_t(ckpt.get(name).numel());
  return count;
}

void TensorUse::check_all_used(const std::vector<std::string>& ignored_prefixes,
                               const std::vector<std::string>& ignored_suffixes) const {
  for (const std::string& name : ckpt.names()) {
    if (std::find(used.begin(), used.end(), name) != used.end()) continue;
    bool ignored = std::any_of(ignored_prefixes.begin(), ignored_prefixes.end(),
                               [&](auto& p) { return name.rfind(p, 0) == 0; }) ||
                   std::any_of(ignored_suffixes.begin(), ignored_suffixes.end(), [&](auto& s) {
                     return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
                   });
    if (!ignored) fail("unexpected tensor '{}' in checkpoint {}", name, ckpt.path.string());
  }
}

}  // namespace eaglevk::models
