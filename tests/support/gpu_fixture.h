#pragma once
// One validated Vulkan device per test process, and a fixture that fails any test during
// which the validation layer (with synchronization validation) reported an error.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/ops/ops.h"
#include "runtime/vk/buffer.h"

namespace eaglevk::testing {

ops::Gpu& gpu();

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;
  uint32_t errors_before_ = 0;
};

// The matrix-vector kernel configurations of lavapipe (with its texel loads and without),
// NVIDIA and AMD/Intel devices (ops::matvec_shape_for), each made runnable on this device: the one-subgroup reduction is
// only correct where the workgroup is exactly this device's fixed subgroup, so elsewhere a
// configuration keeps its workgroup size and outputs and takes the shared-memory reduction.
struct VendorMatvecShape {
  const char* name;
  ops::MatvecShape shape;
};
std::vector<VendorMatvecShape> vendor_matvec_shapes();
// Whether a workgroup of `invocations` can run on the test device: pipelines require full
// subgroups, so it must be a whole number of the device's largest subgroup (a GPU with subgroups
// of 32 runs none of lavapipe's 8-invocation workgroups).
bool workgroup_runs_here(uint32_t invocations);
// One configuration per attention kernel this device can run and per load path: lavapipe's
// (texel loads), lavapipe's with storage buffers, and NVIDIA's (a 64-invocation workgroup);
// where the device cannot run the one-subgroup kernel the first two are its workgroup kernel.
std::vector<VendorMatvecShape> attention_configs();

// Runs the ops with `shape` until destroyed (gpu().matvec_shape_override).
struct MatvecShapeScope {
  explicit MatvecShapeScope(ops::MatvecShape shape);
  ~MatvecShapeScope();
  std::optional<ops::MatvecShape> saved;
};

// Runs prefill products on the GEMM's cooperative-matrix kernel, or not, until destroyed
// (gpu().coopmat_gemm).
struct CoopmatScope {
  explicit CoopmatScope(bool on);
  ~CoopmatScope();
  bool saved;
};

// Runs the coopmat kernel in its 64 or 128 block configuration until destroyed (gpu().gemm_block).
struct GemmBlockScope {
  explicit GemmBlockScope(uint32_t block);
  ~GemmBlockScope();
  uint32_t saved;
};
// The coopmat kernel's block configurations this device runs (64, then 128 where it can).
std::vector<uint32_t> coopmat_gemm_blocks();
// Runs the 128 block's k loop software-pipelined or not, and with k tiles of 32 or 64, until
// destroyed (gpu().gemm_prefetch, gpu().gemm_tile_k).
struct GemmKLoopScope {
  GemmKLoopScope(bool prefetch, uint32_t tile_k);
  ~GemmKLoopScope();
  bool saved_prefetch;
  uint32_t saved_tile_k;
};
// ops::matmul of x [rows, k] by `weights` into y on the coopmat kernel's 128 block (the caller
// sets it), with split and with f16 inputs, gives the plain loop's bits with the prefetching
// loop, with k tiles of 64 and with both, and ran each of those kernels (its pipeline, the
// constants after the matrix shape given, was made by the product, not afterwards). Tiles of 64
// that the device's shared memory cannot hold must be refused instead, naming the profile's gemm.tile_k.
void expect_k_loop_variants_give_the_same_bits(ops::OpContext& oc, vk::Buffer& x, const ops::WeightMatrix& weights,
                                               vk::Buffer& y, uint32_t rows, uint32_t n, uint32_t k);

// ops::matmul of x [rows, k] by `weights` [n, k] into y, plain and then accumulated onto
// `bias`, in every vendor's matrix-vector configuration when `path` takes the matrix-vector
// kernel (the tiled GEMM in its two variants: texel loads and storage buffers), against
// `product`, the reference x W^T; the GEMM also on cooperative matrices where this build and
// device have them (ops::coopmat_unavailable). Without `every_vendor`, lavapipe's two configurations only
// (texel loads and storage buffers, one workgroup shape): the quantized tests run the other
// vendors' workgroup shapes on one type per load path, as each costs lavapipe seconds to
// compile and their loops and reductions are the same code for every type of a path.
void expect_matmul_in_every_configuration(ops::OpContext& oc, vk::Buffer& x, const ops::WeightMatrix& weights,
                                          vk::Buffer& y, const std::vector<float>& bias,
                                          const std::vector<double>& product, uint32_t rows, uint32_t n, uint32_t k,
                                          ops::MatmulPath path, double atol, double rtol, bool every_vendor = true);

// The matrix-vector kernel and the GEMM with texel loads (lavapipe's configuration) give the bits
// of the same kernels reading storage buffers, for 1 to 40 rows of x at a padded stride and
// offset, and so do rows of x at an offset and stride that are not whole 16-byte quads; with `other_outputs`, so does the matrix-vector kernel computing 3 outputs per
// workgroup instead of the device's (so the last workgroup has a partial set when the weights
// have 29 rows): the outputs per workgroup may be chosen per matrix without changing a bit. Its
// loop is the same code for every type of a load path (floats, 32-element quant blocks, K-quant
// items), while lavapipe takes seconds to compile each variant: callers ask for it on one type
// per path.
void expect_load_variants_give_the_same_bits(ops::OpContext& oc, const ops::WeightMatrix& weights, uint32_t seed,
                                             bool other_outputs);

// ops::matmul_swiglu, fused (the matrix-vector kernel's GLU variant), gives the bits of its
// reference, ops::matmul into a [rows, 2 * width] buffer and then ops::swiglu, for 1, 3 and 8
// rows in lavapipe's configuration (texel loads; eight float or four block outputs, so four or two
// gate/up pairs) and, with
// `every_vendor`, in lavapipe's storage-buffer one and NVIDIA's and AMD/Intel's (two or four
// outputs, the shared-memory reduction). `gate_up` has 2 * width rows; a width that is not a
// multiple of the pairs per workgroup leaves the last workgroup a partial set. Fails if the
// configuration did not take the fused kernel.
void expect_swiglu_fusion_gives_the_bits(ops::OpContext& oc, const ops::WeightMatrix& gate_up, uint32_t seed,
                                         bool every_vendor);

// Device buffers filled from and read back to host vectors.
template <typename T>
vk::Buffer device_buffer(const std::vector<T>& host, const std::string& name) {
  // Sizes round up to whole 32-bit words: shaders read f16/bf16 weights as uint pairs.
  vk::Buffer b(gpu().ctx, std::max<uint64_t>((host.size() * sizeof(T) + 3) / 4 * 4, 4), vk::MemoryKind::Device, name);
  vk::upload(gpu().ctx, b, host.data(), host.size() * sizeof(T));
  return b;
}
template <typename T>
std::vector<T> read_back(vk::BufferRange r, size_t count) {
  std::vector<T> out(count);
  vk::download(gpu().ctx, r, out.data(), count * sizeof(T));
  return out;
}

// Bitwise equality of two float vectors, reporting the first mismatches.
::testing::AssertionResult bitwise_equal(const std::vector<float>& a, const std::vector<float>& b);

// |got - want| <= atol + rtol * |want| everywhere; reports the first mismatching indices.
::testing::AssertionResult all_close(const std::vector<float>& got, const std::vector<double>& want, double atol,
                                     double rtol);

// A verify pass's rows against decode steps: the matrix-vector product of `rows` rows of x
// (k each) with w (n outputs) in one dispatch, bit for bit what each row gets alone.
::testing::AssertionResult rows_match_one_row_products(ops::OpContext& oc, const std::vector<float>& x,
                                                       const ops::WeightMatrix& w, uint32_t rows, uint32_t n,
                                                       uint32_t k);

}  // namespace eaglevk::testing
