#include "support/gpu_fixture.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "shaders/shared_constants.h"
#include "support/reference.h"

namespace eaglevk::testing {

ops::Gpu& gpu() {
  // Tests always run with validation, whatever the environment says.
  static ops::Gpu instance([] {
    vk::ContextOptions options = vk::ContextOptions::from_env();
    options.validate = true;
    return options;
  }());
  return instance;
}

std::vector<VendorMatvecShape> vendor_matvec_shapes() {
  const auto& f = gpu().ctx.info.features;
  const bool fixed = f.min_subgroup_size == f.max_subgroup_size;
  auto runnable = [&](ops::MatvecShape s) {
    if (s.one_subgroup && !(fixed && s.workgroup == f.subgroup_size)) s.one_subgroup = 0;
    // Pipelines require full subgroups: another device's workgroup that is no whole number of
    // this device's largest subgroup (lavapipe's 8 on NVIDIA's 32) cannot be created here (the
    // validation layer refuses it and the results are undefined), so it runs at that size.
    const uint32_t sg = std::max(f.max_subgroup_size, 1u);
    if (s.workgroup % sg) s.workgroup = sg;
    if (s.split_workgroup && s.split_workgroup % sg) s.split_workgroup = 4 * sg;
    if (!f.storage_texel_buffers) s.texel_loads = 0;
    if (!(fixed && s.attention_workgroup == f.subgroup_size && f.subgroup_shuffle)) s.attention_workgroup = 64;
    // The split workgroup at the tests' widths (a GPU splits from 1024 columns on): every test
    // matrix of 64 columns or more and at most 8192 rows takes the split reduction.
    if (s.split_workgroup) s.split_min_cols = 64;
    return s;
  };
  ops::MatvecShape storage_buffers = ops::matvec_shape_for(8, 8, 8, true);
  storage_buffers.texel_loads = 0;  // lavapipe's kernels, reading storage buffers as GPUs do
  return {{"lavapipe", runnable(ops::matvec_shape_for(8, 8, 8, true))},
          {"lavapipe_storage_buffers", runnable(storage_buffers)},
          {"nvidia", runnable(ops::matvec_shape_for(32, 32, 32, false, 0x10de))},
          {"amd_intel", runnable(ops::matvec_shape_for(64, 32, 64, false, 0x8086))}};
}

bool workgroup_runs_here(uint32_t invocations) {
  return invocations % std::max(gpu().ctx.info.features.max_subgroup_size, 1u) == 0;
}

std::vector<VendorMatvecShape> attention_configs() {
  const std::vector<VendorMatvecShape> all = vendor_matvec_shapes();
  return {all[0], all[1], all[2]};
}

MatvecShapeScope::MatvecShapeScope(ops::MatvecShape shape) : saved(gpu().matvec_shape_override) {
  gpu().matvec_shape_override = shape;
}
MatvecShapeScope::~MatvecShapeScope() { gpu().matvec_shape_override = saved; }

void expect_matmul_in_every_configuration(ops::OpContext& oc, vk::Buffer& x, const ops::WeightMatrix& weights,
                                          vk::Buffer& y, const std::vector<float>& bias,
                                          const std::vector<double>& product, uint32_t rows, uint32_t n, uint32_t k,
                                          ops::MatmulPath path, double atol, double rtol, bool every_vendor) {
  const bool vector = path == ops::MatmulPath::Vector || (path == ops::MatmulPath::Auto && rows <= MATVEC_MAX_ROWS);
  std::vector<VendorMatvecShape> configs = vendor_matvec_shapes();
  if (!every_vendor) configs.resize(2);  // lavapipe and lavapipe_storage_buffers
  // Plain product, then the same product accumulated onto y (the fused residual add).
  auto check = [&](const std::string& configuration) {
    for (bool accumulate : {false, true}) {
      vk::upload(gpu().ctx, y, bias.data(), bias.size() * 4);
      oc.rec.begin();
      ops::matmul(oc, ops::Act(x, k), weights, ops::Act(y, n), rows, accumulate, path);
      oc.rec.submit_and_wait();
      std::vector<double> want = product;
      if (accumulate)
        for (size_t i = 0; i < want.size(); ++i) want[i] += bias[i];
      EXPECT_TRUE(all_close(read_back<float>(y, want.size()), want, atol, rtol))
          << "accumulate " << accumulate << " configuration " << configuration;
    }
  };
  {
    CoopmatScope scalar_gemm(false);
    for (const VendorMatvecShape& config : configs) {
      MatvecShapeScope scope(config.shape);
      check(config.name);
      // The GEMM has two variants, lavapipe's texel loads and storage buffers (every other device).
      if (!vector && config.shape.texel_loads == 0) break;
    }
  }
  if (!vector && ops::coopmat_unavailable(gpu().ctx).empty()) {
    CoopmatScope coopmat(true);
    for (uint32_t block : coopmat_gemm_blocks()) {
      GemmBlockScope scope(block);
      check(fmt::format("coopmat block {}", block));
      if (block == 128) expect_k_loop_variants_give_the_same_bits(oc, x, weights, y, rows, n, k);
    }
  }
}

CoopmatScope::CoopmatScope(bool on) : saved(gpu().coopmat_gemm) { gpu().coopmat_gemm = on; }
CoopmatScope::~CoopmatScope() { gpu().coopmat_gemm = saved; }

GemmBlockScope::GemmBlockScope(uint32_t block) : saved(gpu().gemm_block) { gpu().gemm_block = block; }
GemmBlockScope::~GemmBlockScope() { gpu().gemm_block = saved; }

GemmKLoopScope::GemmKLoopScope(bool prefetch, uint32_t tile_k)
    : saved_prefetch(gpu().gemm_prefetch), saved_tile_k(gpu().gemm_tile_k) {
  gpu().gemm_prefetch = prefetch;
  gpu().gemm_tile_k = tile_k;
}
GemmKLoopScope::~GemmKLoopScope() {
  gpu().gemm_prefetch = saved_prefetch;
  gpu().gemm_tile_k = saved_tile_k;
}

void expect_k_loop_variants_give_the_same_bits(ops::OpContext& oc, vk::Buffer& x, const ops::WeightMatrix& weights,
                                               vk::Buffer& y, uint32_t rows, uint32_t n, uint32_t k) {
  auto product = [&]() {
    oc.rec.begin();
    ops::matmul(oc, ops::Act(x, k), weights, ops::Act(y, n), rows, false, ops::MatmulPath::Tiled);
    oc.rec.submit_and_wait();
    return read_back<float>(y, size_t(rows) * n);
  };
  const auto& f = gpu().ctx.info.features;
  const ops::CoopmatKernel cm = ops::coopmat_kernel(gpu().ctx, 128);
  const std::string shader = fmt::format("gemm_{}{}", ops::weight_type_name(weights.type), cm.suffix);
  const bool f16_inputs_before = gpu().gemm_f16_inputs;
  // Both precisions: k tiles of 64 fit lavapipe's 32 KiB (and NVIDIA's 48) with f16 inputs only.
  for (bool f16_inputs : {false, true}) {
    gpu().gemm_f16_inputs = f16_inputs;
    std::vector<float> plain;
    {
      GemmKLoopScope scope(false, 32);
      plain = product();
    }
    for (uint32_t tile_k : {32u, 64u})
    for (bool prefetch : {false, true}) {
      if (tile_k == 32 && !prefetch) continue;  // the plain loop
      const std::string what = fmt::format("{}: prefetch {}, k tile {}, f16 inputs {} (rows {}, n {}, k {})",
                                           ops::weight_type_name(weights.type), prefetch, tile_k, f16_inputs, rows, n, k);
      GemmKLoopScope scope(prefetch, tile_k);
      if (ops::coopmat128_shared_bytes(f.coopmat_m, f.coopmat_n, tile_k, !f16_inputs) > f.max_compute_shared_memory) {
        try {
          product();
          ADD_FAILURE() << what << ": no error for a k tile the device cannot hold";
        } catch (const std::exception& e) {
          EXPECT_NE(std::string(e.what()).find("gemm.tile_k=64:"), std::string::npos) << e.what();
        }
        continue;
      }
      EXPECT_TRUE(bitwise_equal(product(), plain)) << what << ": not the plain loop's bits";
      // The kernel's constants, then LO_TERMS (4), PREFETCH (5) and TILE_K (6) where it is 64:
      // the product made this pipeline.
      std::vector<uint32_t> spec = cm.spec;
      spec.push_back(f16_inputs ? 0u : 1u);
      spec.push_back(prefetch ? 1u : 0u);
      if (tile_k != 32) spec.push_back(tile_k);
      const size_t pipelines = gpu().pipelines.size();
      gpu().pipelines.get(shader, spec);
      EXPECT_EQ(gpu().pipelines.size(), pipelines) << what << ": the switches did not reach the kernel's constants";
    }
  }
  gpu().gemm_f16_inputs = f16_inputs_before;
}

std::vector<uint32_t> coopmat_gemm_blocks() {
  std::vector<uint32_t> blocks{64};
  if (ops::coopmat_unavailable(gpu().ctx, 128).empty()) blocks.push_back(128);
  return blocks;
}

void expect_load_variants_give_the_same_bits(ops::OpContext& oc, const ops::WeightMatrix& weights, uint32_t seed,
                                             bool other_outputs) {
  ASSERT_TRUE(gpu().ctx.info.features.storage_texel_buffers) << "the device has no storage texel buffers";
  const std::vector<VendorMatvecShape> shapes = vendor_matvec_shapes();
  const VendorMatvecShape& texel = shapes[0];
  const VendorMatvecShape& plain = shapes[1];
  ASSERT_TRUE(texel.shape.texel_loads && !plain.shape.texel_loads);
  const uint32_t n = weights.rows, k = weights.cols, stride = k + 4;
  struct Case {
    uint32_t rows;
    ops::MatmulPath path;
  };
  CoopmatScope scalar_gemm(false);  // the GEMM's two scalar variants, not the coopmat kernel
  // The matrix-vector kernel for up to 8 rows, the GEMM for a partial and a whole 32-row block.
  for (Case c : {Case{1, ops::MatmulPath::Vector}, Case{3, ops::MatmulPath::Vector}, Case{8, ops::MatmulPath::Vector},
                 Case{13, ops::MatmulPath::Tiled}, Case{40, ops::MatmulPath::Tiled}}) {
    // Rows at a padded stride, the first 4 elements in: texel loads need only 16-byte rows.
    std::vector<float> x = random_floats(size_t(c.rows) * stride + 4, seed + c.rows);
    vk::Buffer xbuf = device_buffer(x, "x");
    vk::Buffer y(gpu().ctx, uint64_t(c.rows) * n * 4, vk::MemoryKind::Device, "y");
    const ops::Act xa(xbuf, stride, 4);
    EXPECT_TRUE(ops::matvec_texel_loads(xa, weights, weights.rows_range(0, n))) << "rows " << c.rows;
    // Texel loads, then storage buffers, with the device's outputs per workgroup and 3 (the
    // GEMM has no such choice: one storage-buffer run).
    std::vector<ops::MatvecShape> variants = {texel.shape, plain.shape};
    if (c.path == ops::MatmulPath::Vector && other_outputs) {
      variants.push_back(plain.shape);
      variants.back().outs = variants.back().block_outs = 3;
    }
    std::vector<float> first;
    for (const ops::MatvecShape& shape : variants) {
      MatvecShapeScope scope(shape);
      oc.rec.begin();
      ops::matmul(oc, xa, weights, ops::Act(y, n), c.rows, false, c.path);
      oc.rec.submit_and_wait();
      std::vector<float> got = read_back<float>(y, size_t(c.rows) * n);
      if (first.empty()) first = got;
      else
        EXPECT_TRUE(bitwise_equal(got, first)) << ops::weight_type_name(weights.type) << " rows " << c.rows
                                               << " storage buffers, outputs "
                                               << shape.outs_for(ops::weight_type_quantized(weights.type), c.rows);
    }
    // The same rows at an offset and stride that are not whole 16-byte quads: the storage
    // variants then read x a float at a time (16-byte loads where they are), with the same bits.
    const uint32_t odd_stride = k + 5, odd_offset = 1;
    std::vector<float> x_odd(size_t(c.rows) * odd_stride + odd_offset, 0.0f);
    for (uint32_t r = 0; r < c.rows; ++r)
      std::copy_n(x.begin() + 4 + size_t(r) * stride, k, x_odd.begin() + odd_offset + size_t(r) * odd_stride);
    vk::Buffer xbuf_odd = device_buffer(x_odd, "x, unaligned rows");
    const ops::Act xo(xbuf_odd, odd_stride, odd_offset);
    EXPECT_FALSE(ops::matvec_texel_loads(xo, weights, weights.rows_range(0, n)));
    for (const ops::MatvecShape& shape : {texel.shape, plain.shape}) {
      MatvecShapeScope scope(shape);
      oc.rec.begin();
      ops::matmul(oc, xo, weights, ops::Act(y, n), c.rows, false, c.path);
      oc.rec.submit_and_wait();
      EXPECT_TRUE(bitwise_equal(read_back<float>(y, size_t(c.rows) * n), first))
          << ops::weight_type_name(weights.type) << " rows " << c.rows << ", unaligned x rows, texel loads asked "
          << shape.texel_loads;
    }
  }
}

void expect_swiglu_fusion_gives_the_bits(ops::OpContext& oc, const ops::WeightMatrix& gate_up, uint32_t seed,
                                         bool every_vendor) {
  const uint32_t width = gate_up.rows / 2, k = gate_up.cols;
  std::vector<VendorMatvecShape> configs = vendor_matvec_shapes();
  if (!every_vendor) configs.resize(1);
  for (const VendorMatvecShape& config : configs) {
    MatvecShapeScope scope(config.shape);
    for (uint32_t rows : {1u, 3u, 8u}) {
      SCOPED_TRACE(fmt::format("{} {} rows", config.name, rows));
      EXPECT_TRUE(ops::swiglu_fuses(gpu(), gate_up, rows, ops::MatmulPath::Auto));
      vk::Buffer xbuf = device_buffer(random_floats(size_t(rows) * k, seed + rows), "x");
      vk::Buffer gu(gpu().ctx, uint64_t(rows) * 2 * width * 4, vk::MemoryKind::Device, "gate_up");
      vk::Buffer want(gpu().ctx, uint64_t(rows) * width * 4, vk::MemoryKind::Device, "unfused");
      vk::Buffer got(gpu().ctx, uint64_t(rows) * width * 4, vk::MemoryKind::Device, "fused");
      oc.rec.begin();
      ops::matmul(oc, ops::Act(xbuf, k), gate_up, ops::Act(gu, 2 * width), rows, false, ops::MatmulPath::Auto);
      ops::swiglu(oc, ops::Act(gu, 2 * width), ops::Act(gu, 2 * width).cols(width), ops::Act(want, width), rows, width);
      ops::matmul_swiglu(oc, ops::Act(xbuf, k), gate_up, ops::Act(gu, 2 * width), ops::Act(got, width), rows,
                         ops::MatmulPath::Auto, "gate_up");
      oc.rec.submit_and_wait();
      EXPECT_TRUE(bitwise_equal(read_back<float>(got, size_t(rows) * width), read_back<float>(want, size_t(rows) * width)))
          << ops::weight_type_name(gate_up.type);
    }
  }
}

void GpuTest::SetUp() { errors_before_ = gpu().ctx.validation_errors.load(); }

void GpuTest::TearDown() {
  EXPECT_EQ(gpu().ctx.validation_errors.load(), errors_before_) << "the validation layer reported errors";
}

::testing::AssertionResult bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "sizes differ: " << a.size() << " vs " << b.size();
  std::string report;
  size_t bad = 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], 4) != 0) {
      if (++bad <= 5) report += fmt::format("  [{}] {:.9g} vs {:.9g}\n", i, a[i], b[i]);
    }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << a.size() << " values differ in bits:\n" << report;
}

::testing::AssertionResult all_close(const std::vector<float>& got, const std::vector<double>& want, double atol,
                                     double rtol) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "sizes differ: " << got.size() << " vs " << want.size();
  std::string report;
  size_t bad = 0;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double err = std::fabs(double(got[i]) - want[i]);
    double allowed = atol + rtol * std::fabs(want[i]);
    if (!(err <= allowed)) {
      if (++bad <= 5) report += fmt::format("  [{}] got {:.7g} want {:.7g} (err {:.3g} > {:.3g})\n", i, got[i], want[i], err, allowed);
      worst = std::max(worst, err);
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << got.size() << " values outside atol " << atol << " + rtol "
                                       << rtol << " (worst error " << worst << "); first mismatches:\n"
                                       << report;
}

::testing::AssertionResult rows_match_one_row_products(ops::OpContext& oc, const std::vector<float>& x,
                                                       const ops::WeightMatrix& w, uint32_t rows, uint32_t n,
                                                       uint32_t k) {
  vk::Buffer xbuf = device_buffer(x, "x"), batch(gpu().ctx, size_t(rows) * n * 4, vk::MemoryKind::Device, "batch"),
             single(gpu().ctx, size_t(rows) * n * 4, vk::MemoryKind::Device, "single");
  oc.rec.begin();
  ops::matmul(oc, ops::Act(xbuf, k), w, ops::Act(batch, n), rows, false, ops::MatmulPath::Vector);
  for (uint32_t r = 0; r < rows; ++r)
    ops::matmul(oc, ops::Act(xbuf, k).row(r), w, ops::Act(single, n).row(r), 1, false, ops::MatmulPath::Vector);
  oc.rec.submit_and_wait();
  return bitwise_equal(read_back<float>(batch, size_t(rows) * n), read_back<float>(single, size_t(rows) * n));
}

}  // namespace eaglevk::testing
