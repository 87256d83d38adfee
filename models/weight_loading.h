#pragma once
// Moving checkpoint tensors onto the device: shape checks that name the tensor, dtype to
// weight type, row-concatenation of several tensors into one fused matrix (q|k|v, gate|up),
// and the matmul over such a matrix.
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "loader/safetensors.h"
#include "runtime/ops/ops.h"
#include "runtime/ops/tensor.h"
#include "runtime/vk/buffer.h"
#include "runtime/vk/uploader.h"

namespace eaglevk::models {

void expect_shape(const loader::TensorView& t, std::initializer_list<int64_t> shape);
ops::WeightType weight_type_of(const loader::TensorView& t);

// A weight matrix with the buffer that holds it. The views are made on demand because a
// BufferRange points at its Buffer, which moves with the model. A fused matrix whose parts
// were stored in different types (llama.cpp's Q4_K_M keeps attn_v in Q6_K beside Q4_K q and k)
// keeps one part per run of equal type; each part starts on a binding-aligned offset.
struct DeviceMatrix {
  struct Part {
    ops::WeightType type = ops::WeightType::F32;
    uint32_t first_row = 0, rows = 0;
    uint64_t offset = 0, bytes = 0;  // in `buffer`
  };
  vk::Buffer buffer;
  std::vector<Part> parts;
  uint32_t rows = 0, cols = 0;
  ops::WeightMatrix part(size_t i) const;
  // The whole matrix as one operand; an error for a matrix of several parts.
  ops::WeightMatrix matrix() const;
};

// y[:, parts] (+)= x W^T for a matrix of any number of parts: one matmul per part, each into
// its own columns of y.
void linear(ops::OpContext& oc, ops::Act x, const DeviceMatrix& w, ops::Act y, uint32_t rows, bool accumulate,
            ops::MatmulPath path, const char* name);

// The input of a product that is an RMSNorm's output: the norm's input x, its weight and
// epsilon, and where its output goes when it cannot be folded into the product.
struct NormedInput {
  ops::Act x;               // the norm's input
  vk::BufferRange weight;   // f32 [cols]
  float eps = 0;
  ops::Act normed;          // rms_norm's output where it is not folded
  const char* name = "rms_norm";
};

// ops::matmul of rms_norm(in.x) by one matrix: the norm folded into the product where
// ops::norm_folds allows it, else rms_norm into in.normed first.
void norm_matmul(ops::OpContext& oc, const NormedInput& in, const ops::WeightMatrix& w, ops::Act y, uint32_t rows,
                 ops::MatmulPath path, const char* name);
// linear / linear_swiglu of rms_norm(in.x): the norm folded into every part's product where
// ops::norm_folds allows it for each of them, else rms_norm into in.normed first.
void norm_linear(ops::OpContext& oc, const NormedInput& in, const DeviceMatrix& w, ops::Act y, uint32_t rows,
                 ops::MatmulPath path, const char* name);
void norm_linear_swiglu(ops::OpContext& oc, const NormedInput& in, const DeviceMatrix& gate_up, ops::Act gu,
                        ops::Act out, uint32_t rows, uint32_t width, ops::MatmulPath path, const char* name);

// linear (or norm_linear) of the fused q | k | v matrix, then ops::rope_kv_write: the rotation and
// the cache write folded into each part's product where ops::rope_folds allows it for every
// part, else one rope_kv_write after the products.
void linear_rope_kv(ops::OpContext& oc, ops::Act x, const DeviceMatrix& qkv_w, ops::Act qkv, uint32_t rows,
                    ops::MatmulPath path, const char* name, const ops::RopeKv& rope);
void norm_linear_rope_kv(ops::OpContext& oc, const NormedInput& in, const DeviceMatrix& qkv_w, ops::Act qkv,
                         uint32_t rows, ops::MatmulPath path, const char* name, const ops::RopeKv& rope);

// out [rows, width] = silu(gate) * up of the [gate; up] product x W^T (2 * width rows): one
// fused dispatch for a matrix of one part (ops::matmul_swiglu), else linear into gu, then swiglu.
void linear_swiglu(ops::OpContext& oc, ops::Act x, const DeviceMatrix& gate_up, ops::Act gu, ops::Act out,
                   uint32_t rows, uint32_t width, ops::MatmulPath path, const char* name);

// Stacks the row blocks (all [rows_i, cols]) into one [sum rows_i, cols] matrix. Blocks whose
// rows llama.cpp reordered for its rope (TensorView::rope_permuted_heads) are put back in
// Hugging Face order row by row; no tensor is copied on the host.
DeviceMatrix upload_matrix(const vk::Context& ctx, vk::Uploader& up, const std::vector<const loader::TensorView*>& blocks,
                           const std::string& name);
// One tensor's rows into `dst` as upload_matrix puts them (rope order restored, FP8 and 4-bit
// weights as their blocks, loader::upload_bytes); fails when they take more than dst.bytes.
void put_tensor(vk::Uploader& up, vk::BufferRange dst, const loader::TensorView& t);
// Named tensors with their expected [rows, cols], stacked into one matrix (see upload_matrix).
struct TensorUse;
using MatrixParts = std::initializer_list<std::pair<std::string, std::pair<int64_t, int64_t>>>;
DeviceMatrix load_matrix(const vk::Context& ctx, vk::Uploader& up, TensorUse& use, MatrixParts parts,
                         const std::string& name);

// A 1-D tensor of `length` as f32 (norm weights).
vk::Buffer upload_f32_vector(const vk::Context& ctx, vk::Uploader& up, const loader::TensorView& t, int64_t length);

// Tracks which checkpoint tensors a model consumed so that leftovers are reported.
struct TensorUse {
  const loader::Checkpoint& ckpt;
  std::vector<std::string> used;
  const loader::TensorView& get(const std::string& name);
  // Every tensor neither used nor matching one of the ignored prefixes/suffixes is an error.
  void check_all_used(const std::vector<std::string>& ignored_prefixes,
                      const std::vector<std::string>& ignored_suffixes) const;
  // What the used tensors take on the device (FP8 and 4-bit weights as their blocks) and how
  // many parameters they hold: a model's weight_bytes and parameters.
  uint64_t used_device_bytes() const;
  uint64_t used_parameters() const;
};

}  // namespace eaglevk::models
