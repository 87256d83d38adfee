#include "models/weight_loading.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <eaglevk/error.h>

namespace eaglevk::models {

void expect_shape(const loader::TensorView& t, std::initializer_list<int64_t> shape) {
  if (!std::equal(t.shape.begin(), t.shape.end(), shape.begin(), shape.end()))
    fail("tensor '{}' in {} has shape [{}], expected [{}]", t.name, t.file, fmt::join(t.shape, ", "),
         fmt::join(shape, ", "));
}

ops::WeightType weight_type_of(const loader::TensorView& t) {
  switch (t.dtype) {
    case loader::DType::F32: return ops::WeightType::F32;
    case loader::DType::F16: return ops::WeightType::F16;
    case loader::DType::BF16: return ops::WeightType::BF16;
    default: fail("tensor '{}' in {} has dtype {}; weights must be F32, F16 or BF16", t.name, t.file, loader::dtype_name(t.dtype));
  }
}

DeviceMatrix upload_matrix(const vk::Context& ctx, vk::Uploader& up, const std::vector<const loader::TensorView*>& blocks,
                           const std::string& name) {
  const loader::TensorView& first = *blocks.front();
  if (first.shape.size() != 2) fail("tensor '{}' must be 2-D", first.name);
  ops::WeightType type = weight_type_of(first);
  int64_t cols = first.shape[1], rows = 0;
  for (const loader::TensorView* b : blocks) {
    if (b->shape.size() != 2 || b->shape[1] != cols) fail("tensor '{}' must be [*, {}] to fuse into {}", b->name, cols, name);
    if (weight_type_of(*b) != type) fail("tensors fused into {} have different dtypes ('{}')", name, b->name);
    rows += b->shape[0];
  }
  DeviceMatrix m;
  uint64_t bytes = uint64_t(rows) * cols * ops::weight_type_bytes(type);
  m.buffer = vk::Buffer(ctx, (bytes + 3) / 4 * 4, vk::MemoryKind::Device, name);
  uint64_t offset = 0;
  for (const loader::TensorView* b : blocks) {
    up.put(vk::BufferRange(m.buffer, offset, b->bytes), b->data, b->bytes);
    offset += b->bytes;
  }
  m.type = type;
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
  return upload_matrix(ctx, up, blocks, name);
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
