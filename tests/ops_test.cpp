// Every op against its CPU reference on seeded random inputs with odd sizes, each weight
// precision. Tolerances are stated per test; failures print the first mismatching indices.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include <fmt/format.h>

#include <eaglevk/error.h>

#include "runtime/ops/ops.h"
#include "shaders/shared_constants.h"
#include "support/gpu_fixture.h"
#include "support/reference.h"
#include "support/rope_fold_check.h"

namespace eaglevk::testing {
namespace {

using ops::WeightType;

// Lowers the binding limit for one test and restores it even when the test throws.
struct BindingLimit {
  uint64_t saved;
  explicit BindingLimit(uint64_t bytes) : saved(gpu().ctx.max_binding_range) { gpu().ctx.max_binding_range = bytes; }
  ~BindingLimit() { gpu().ctx.max_binding_range = saved; }
};

// Lowers maxComputeWorkGroupCount for one test and restores it even when the test throws.
struct WorkgroupLimit {
  uint32_t saved[3];
  explicit WorkgroupLimit(uint32_t x, uint32_t y = 65535) {
    std::copy(gpu().ctx.max_workgroups, gpu().ctx.max_workgroups + 3, saved);
    gpu().ctx.max_workgroups[0] = x;
    gpu().ctx.max_workgroups[1] = y;
  }
  ~WorkgroupLimit() { std::copy(saved, saved + 3, gpu().ctx.max_workgroups); }
};

struct OpsTest : GpuTest {
  vk::Recorder rec{gpu().ctx};
  ops::OpContext oc{gpu(), rec};
};

ops::WeightMatrix upload_weights(vk::Buffer& storage, const std::vector<float>& w, WeightType t, uint32_t rows,
                                 uint32_t cols) {
  auto bytes = weight_bytes(w, t);
  storage = device_buffer(bytes, "weights");
  return ops::WeightMatrix{vk::BufferRange(storage), t, rows, cols};
}

// ---- matmul ---------------------------------------------------------------------------

struct MatmulCase {
  uint32_t rows, n, k;
  WeightType type;
  ops::MatmulPath path;
};

class MatmulTest : public OpsTest, public ::testing::WithParamInterface<MatmulCase> {};

TEST_P(MatmulTest, MatchesReference) {
  auto [rows, n, k, type, path] = GetParam();
  auto x = random_floats(size_t(rows) * k, 1 + rows);
  auto w = random_floats(size_t(n) * k, 2 + n);
  auto bias = random_floats(size_t(rows) * n, 3);
  vk::Buffer wbuf;
  auto weights = upload_weights(wbuf, w, type, n, k);
  vk::Buffer xbuf = device_buffer(x, "x"), ybuf = device_buffer(bias, "y");
  expect_matmul_in_every_configuration(oc, xbuf, weights, ybuf, bias, ref_matmul(x, round_through(w, type), rows, n, k),
                                       rows, n, k, path, 1e-4, 1e-4);
}

std::vector<MatmulCase> matmul_cases() {
  std::vector<MatmulCase> cases;
  for (WeightType t : {WeightType::F32, WeightType::F16, WeightType::BF16}) {
    for (uint32_t rows : {1u, 3u, 8u, 13u}) cases.push_back({rows, 67, 257, t, ops::MatmulPath::Auto});
    cases.push_back({5, 130, 256, t, ops::MatmulPath::Auto});
    cases.push_back({70, 129, 96, t, ops::MatmulPath::Tiled});
    cases.push_back({13, 33, 257, t, ops::MatmulPath::Vector});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Shapes, MatmulTest, ::testing::ValuesIn(matmul_cases()), [](const auto& info) {
  const MatmulCase& c = info.param;
  const char* path = c.path == ops::MatmulPath::Auto ? "auto" : c.path == ops::MatmulPath::Vector ? "vector" : "tiled";
  return fmt::format("r{}_n{}_k{}_{}_{}", c.rows, c.n, c.k, ops::weight_type_name(c.type), path);
});

// The prefill GEMM on cooperative matrices (where the build and device have them; the matmul
// cases above run it too), in both block configurations (64 and 128: on lavapipe's 8 x 8
// matrices 32 x 32 and 64 x 64): several blocks each way with ragged edges, K of 1,000 (its last
// 32-wide step partial; the 128 block's 16-byte x and 8-element W loads) and 998 (the 128
// block's element-wise loads, rows at offsets that are not multiples of 4). The tolerance is one
// a product of f16-rounded inputs cannot meet (about 1e-3 here), so it fails without the
// kernel's lo halves. A row's bits do not depend on the other rows of its block. ctest runs it
// only in coopmat_ops_test, on Debian 13's lavapipe (the plain ops_test entry leaves it out);
// run by hand on a device or build without the kernels it skips, saying why, and a ctest entry
// that shows a skip fails (as it does where the device cannot run the 128 block).
TEST_F(OpsTest, CoopmatGemm) {
  const std::string missing = ops::coopmat_unavailable(gpu().ctx);
  if (!missing.empty()) GTEST_SKIP() << "no cooperative-matrix GEMM here: " << missing;
  CoopmatScope coopmat(true);
  const uint32_t rows = 150, n = 200;
  for (uint32_t block : coopmat_gemm_blocks())
  for (uint32_t k : {1000u, 998u})
  for (WeightType t : {WeightType::F32, WeightType::F16, WeightType::BF16}) {
    SCOPED_TRACE(fmt::format("{} block {} k {}", ops::weight_type_name(t), block, k));
    GemmBlockScope scope(block);
    auto x = random_floats(size_t(rows) * k, 31);
    auto w = random_floats(size_t(n) * k, 32);
    auto bias = random_floats(size_t(rows) * n, 33);
    vk::Buffer wbuf;
    auto weights = upload_weights(wbuf, w, t, n, k);
    vk::Buffer xbuf = device_buffer(x, "x"), ybuf = device_buffer(bias, "y");
    const std::vector<double> want = ref_matmul(x, round_through(w, t), rows, n, k);
    auto expect_close = [&](bool accumulate) {
      std::vector<double> expected = want;
      if (accumulate)
        for (size_t i = 0; i < expected.size(); ++i) expected[i] += bias[i];
      EXPECT_TRUE(all_close(read_back<float>(ybuf, expected.size()), expected, 1e-4, 1e-4)) << "accumulate " << accumulate;
    };
    for (bool accumulate : {false, true}) {
      vk::upload(gpu().ctx, ybuf, bias.data(), bias.size() * 4);
      rec.begin();
      ops::matmul(oc, ops::Act(xbuf, k), weights, ops::Act(ybuf, n), rows, accumulate, ops::MatmulPath::Tiled);
      rec.submit_and_wait();
      expect_close(accumulate);
    }
    // Row 70 alone gives the bits it gets among 150.
    vk::Buffer one(gpu().ctx, size_t(n) * 4, vk::MemoryKind::Device, "one row");
    rec.begin();
    ops::matmul(oc, ops::Act(xbuf, k), weights, ops::Act(ybuf, n), rows, false, ops::MatmulPath::Tiled);
    ops::matmul(oc, ops::Act(xbuf, k).row(70), weights, ops::Act(one, n), 1, false, ops::MatmulPath::Tiled);
    rec.submit_and_wait();
    std::vector<float> all = read_back<float>(ybuf, size_t(rows) * n);
    EXPECT_TRUE(bitwise_equal(std::vector<float>(all.begin() + 70 * n, all.begin() + 71 * n), read_back<float>(one, n)));
    // gemm.precision=f16: the inputs' nearest f16 alone, f16-sized errors (about 2^-11 of
    // the products' magnitudes, summed over k): within 0.05 of the reference here, and clearly
    // worse than the halves' (which sit within 1e-4), so the switch reaches the kernel.
    auto worst_error = [&]() {
      const std::vector<float> got = read_back<float>(ybuf, want.size());
      double worst = 0;
      for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(double(got[i]) - want[i]));
      return worst;
    };
    const double split_error = worst_error();
    const bool f16_before = gpu().gemm_f16_inputs;
    gpu().gemm_f16_inputs = true;
    rec.begin();
    ops::matmul(oc, ops::Act(xbuf, k), weights, ops::Act(ybuf, n), rows, false, ops::MatmulPath::Tiled);
    rec.submit_and_wait();
    gpu().gemm_f16_inputs = f16_before;
    const double f16_error = worst_error();
    EXPECT_LT(f16_error, 0.05);
    EXPECT_GT(f16_error, 10 * split_error) << "f16 inputs " << f16_error << ", halves " << split_error;
    // gemm.prefetch=on and gemm.tile_k=64: the 128 block's pipelined k loop and
    // its 64-wide k tiles give the plain loop's bits, with the halves and with f16 inputs (K 1000:
    // the last tile partial, wide loads; 998: element loads); the 64 block keeps its one kernel.
    if (block == 128) {
      expect_k_loop_variants_give_the_same_bits(oc, xbuf, weights, ybuf, rows, n, k);
    } else {
      GemmKLoopScope k_loop(true, 64);
      const ops::CoopmatKernel cm = ops::coopmat_kernel(gpu().ctx, 64);
      EXPECT_EQ(ops::coopmat_gemm_spec(gpu(), cm, 64), cm.spec);
    }
  }
  if (coopmat_gemm_blocks().size() < 2)
    GTEST_SKIP() << "no 128 block here: " << ops::coopmat_unavailable(gpu().ctx, 128);
}

// The 128 block's shared memory, counted as gemm_coopmat.comp declares it: NVIDIA's 48 KiB
// exactly by default on 16 x 16 matrices; k tiles of 64 fit there only with f16 inputs.
TEST(GemmTileKSwitch, SharedMemoryOfTheTiles) {
  EXPECT_EQ(ops::coopmat128_shared_bytes(16, 16), 49152u);
  EXPECT_EQ(ops::coopmat128_shared_bytes(16, 16, 32, false), (256u + 2u) * 40u * 2u + 8192u);
  EXPECT_EQ(ops::coopmat128_shared_bytes(16, 16, 64, true), 512u * 72u * 2u + 8192u);
  EXPECT_LE(ops::coopmat128_shared_bytes(16, 16, 64, false), 49152u);
  EXPECT_GT(ops::coopmat128_shared_bytes(16, 16, 64, true), 49152u);
}

// The device's choice: the 128 block on NVIDIA where it runs (measured faster there), 64 on
// other vendors and where the device cannot hold the 128 block.
TEST(GemmBlockSwitch, DevicesChooseTheirBlock) {
  EXPECT_EQ(ops::gemm_block_for(vk::vendor::kNvidia, true), 128u);
  EXPECT_EQ(ops::gemm_block_for(vk::vendor::kNvidia, false), 64u);
  EXPECT_EQ(ops::gemm_block_for(vk::vendor::kAmd, true), 64u);
  EXPECT_EQ(ops::gemm_block_for(vk::vendor::kIntel, true), 64u);
  EXPECT_EQ(ops::gemm_block_for(vk::vendor::kMesa, true), 64u);  // Mesa's lavapipe
}

// A verify pass of k+1 rows must give each row the bits a one-row decode step gives it.
TEST_F(OpsTest, MatvecIsBatchInvariant) {
  const uint32_t n = 300, k = 256;
  for (const VendorMatvecShape& config : vendor_matvec_shapes())
  for (WeightType t : {WeightType::F32, WeightType::F16, WeightType::BF16}) {
    MatvecShapeScope scope(config.shape);
    SCOPED_TRACE(config.name);
    auto w = random_floats(size_t(n) * k, 7);
    vk::Buffer wbuf;
    auto weights = upload_weights(wbuf, w, t, n, k);
    for (uint32_t rows : {2u, 4u, 9u}) {
      EXPECT_TRUE(rows_match_one_row_products(oc, random_floats(size_t(rows) * k, 8 + rows), weights, rows, n, k))
          << ops::weight_type_name(t) << " rows " << rows;
    }
  }
}

// Outputs per workgroup chosen for several rows (MatvecShape::rows_outs) keep every row's
// decode-step bits: each row of a 3- or 9-row product (chunks of 8 and 1) and of a fused SwiGLU
// product against the same row alone (the one-row dispatch, the device's outputs), on bf16 (the
// float loop every float type shares) with rows_outs 1, 3 (odd: the SwiGLU fold rounds it up to
// 4; 37 outputs leave partial workgroups) and 8. NVIDIA's workgroup split over subgroups (from 64
// columns, as the profile's shapes=gpu runs it) and lavapipe's one subgroup with texel loads.
TEST_F(OpsTest, MatvecRowsOutsKeepTheDecodeBits) {
  const uint32_t n = 37, k = 264;
  const std::vector<VendorMatvecShape> vendors = vendor_matvec_shapes();
  ops::MatvecShape split = vendors[2].shape;
  split.split_min_cols = 64;
  vk::Buffer wbuf, gbuf;
  const ops::WeightMatrix w = upload_weights(wbuf, random_floats(size_t(n) * k, 61), WeightType::BF16, n, k);
  const ops::WeightMatrix gate_up = upload_weights(gbuf, random_floats(size_t(2 * n) * k, 62), WeightType::BF16, 2 * n, k);
  struct Case {
    const char* config;
    ops::MatvecShape shape;
    uint32_t rows_outs, workgroup;  // the workgroup the product takes
  };
  for (Case c : {Case{"nvidia split", split, 1, split.split_workgroup}, Case{"nvidia split", split, 3, split.split_workgroup},
                 Case{"nvidia split", split, 8, split.split_workgroup},
                 Case{vendors[0].name, vendors[0].shape, 3, vendors[0].shape.workgroup}}) {
    c.shape.rows_outs = c.rows_outs;
    MatvecShapeScope scope(c.shape);
    ASSERT_EQ(ops::matvec_shape(gpu(), w).workgroup, c.workgroup) << c.config;
    for (uint32_t rows : {3u, 9u}) {
      SCOPED_TRACE(fmt::format("{}, rows_outs {}, {} rows", c.config, c.rows_outs, rows));
      ASSERT_TRUE(ops::swiglu_fuses(gpu(), gate_up, rows, ops::MatmulPath::Vector));
      vk::Buffer xbuf = device_buffer(random_floats(size_t(rows) * k, 63 + rows), "x");
      vk::Buffer batch(gpu().ctx, size_t(rows) * n * 4, vk::MemoryKind::Device, "batch"),
          single(gpu().ctx, size_t(rows) * n * 4, vk::MemoryKind::Device, "single"),
          glu_batch(gpu().ctx, size_t(rows) * n * 4, vk::MemoryKind::Device, "swiglu batch"),
          glu_single(gpu().ctx, size_t(rows) * n * 4, vk::MemoryKind::Device, "swiglu single"),
          gu(gpu().ctx, size_t(rows) * 2 * n * 4, vk::MemoryKind::Device, "gate_up");
      const ops::Act x(xbuf, k);
      rec.begin();
      ops::matmul(oc, x, w, ops::Act(batch, n), rows, false, ops::MatmulPath::Vector);
      ops::matmul_swiglu(oc, x, gate_up, ops::Act(gu, 2 * n), ops::Act(glu_batch, n), rows, ops::MatmulPath::Vector,
                         "gate_up");
      for (uint32_t r = 0; r < rows; ++r) {
        ops::matmul(oc, x.row(r), w, ops::Act(single, n).row(r), 1, false, ops::MatmulPath::Vector);
        ops::matmul_swiglu(oc, x.row(r), gate_up, ops::Act(gu, 2 * n).row(r), ops::Act(glu_single, n).row(r), 1,
                           ops::MatmulPath::Vector, "gate_up");
      }
      rec.submit_and_wait();
      EXPECT_TRUE(bitwise_equal(read_back<float>(batch, size_t(rows) * n), read_back<float>(single, size_t(rows) * n)));
      EXPECT_TRUE(bitwise_equal(read_back<float>(glu_batch, size_t(rows) * n),
                                read_back<float>(glu_single, size_t(rows) * n)))
          << "swiglu";
      // The product took rows_outs: its pipeline (OUTS = rows_outs for these rows) is made already.
      if (!c.shape.texel_loads) {
        const size_t pipelines = gpu().pipelines.size();
        gpu().pipelines.get("matvec_bf16", {c.workgroup, c.rows_outs, /*ONE_SUBGROUP=*/0, /*GLU=*/0, /*NORM_WG=*/0,
                                            std::min<uint32_t>(rows, MATVEC_MAX_ROWS)});
        EXPECT_EQ(gpu().pipelines.size(), pipelines) << "no dispatch with " << c.rows_outs << " outputs a workgroup";
      }
    }
  }
}

// Texel loads (lavapipe) and storage-buffer loads (every other device) add in the same order,
// and so do other outputs per workgroup (on bf16: the loop is the same for every float type);
// 37 rows leave the last workgroup a partial set of outputs.
TEST_F(OpsTest, MatvecLoadVariantsGiveTheSameBits) {
  const uint32_t n = 37, k = 264;
  for (WeightType t : {WeightType::F32, WeightType::F16, WeightType::BF16}) {
    auto w = random_floats(size_t(n) * k, 17);
    vk::Buffer wbuf;
    expect_load_variants_give_the_same_bits(oc, upload_weights(wbuf, w, t, n, k), 18, t == WeightType::BF16);
  }
}

// SwiGLU folded into the gate/up product gives the bits of the product and then swiglu: every
// vendor's configuration on bf16 (the kernel's loop is the same for every float type), lavapipe's
// on f32 and f16 and on a width of 262 (K not a multiple of 8: the two-element loop). 37 pairs
// leave the last workgroup a partial set.
TEST_F(OpsTest, SwigluFoldedIntoTheGateUpProductGivesTheSameBits) {
  struct Case {
    WeightType type;
    uint32_t k;
  };
  for (Case c : {Case{WeightType::BF16, 264}, Case{WeightType::F32, 264}, Case{WeightType::F16, 264},
                 Case{WeightType::BF16, 262}}) {
    const uint32_t n = 2 * 37;
    vk::Buffer wbuf;
    expect_swiglu_fusion_gives_the_bits(oc, upload_weights(wbuf, random_floats(size_t(n) * c.k, 19), c.type, n, c.k),
                                        20, c.type == WeightType::BF16 && c.k == 264);
  }
}

// An RMSNorm folded into the product that consumes it (ops::NormFold) gives the bits of rms_norm
// then the product, on bf16 (the fold sits in the float loop every float type shares): lavapipe's
// configurations (one subgroup; texel and storage loads) and NVIDIA's and AMD/Intel's (the
// shared-memory reduction), with the norm workgroups of CPU devices (64) and GPUs (512); 1, 3
// and 8 rows at a padded stride, accumulated onto y and with SwiGLU folded in too. K = 264 is no
// multiple of the norm's workgroup (its invocations hold different numbers of elements); 29
// outputs leave the last workgroup a partial set.
TEST_F(OpsTest, RmsNormFoldedIntoTheProductGivesTheSameBits) {
  const uint32_t k = 264, n = 29, stride = k + 8;
  const float eps = 1e-5f;
  const uint32_t device_wg = gpu().norm_workgroup;
  const bool device_fold = gpu().fold_norms;
  gpu().fold_norms = true;  // whatever the device's default
  vk::Buffer nbuf = device_buffer(random_floats(k, 41, 0.5, 1.5), "norm weight");
  const vk::BufferRange nw(nbuf);
  const ops::NormFold fold{nw, eps};
  {
    const WeightType type = WeightType::BF16;
    vk::Buffer wbuf, gbuf;
    const ops::WeightMatrix w = upload_weights(wbuf, random_floats(size_t(n) * k, 42), type, n, k);
    const ops::WeightMatrix gate_up = upload_weights(gbuf, random_floats(size_t(2 * n) * k, 43), type, 2 * n, k);
    struct Config {
      VendorMatvecShape shape;
      uint32_t norm_wg;
    };
    const std::vector<VendorMatvecShape> vendors = vendor_matvec_shapes();
    // The norm workgroups the devices take (GPUs: 512, a multiple of their split product workgroups).
    const std::vector<Config> configs = {{vendors[0], 8}, {vendors[1], 8}, {vendors[2], 512}, {vendors[3], 512}};
    for (const auto& [config, norm_wg] : configs)
      for (uint32_t rows : {1u, 3u, 8u}) {
        SCOPED_TRACE(fmt::format("{} {}, norm workgroup {}, {} rows", ops::weight_type_name(type), config.name,
                                 norm_wg, rows));
        MatvecShapeScope scope(config.shape);
        // A whole number of the product's workgroups (on a GPU, lavapipe's 8 runs at its subgroup).
        gpu().norm_workgroup = std::max(norm_wg, config.shape.workgroup);
        ASSERT_TRUE(ops::norm_folds(gpu(), w, rows, ops::MatmulPath::Auto));
        const std::vector<float> bias = random_floats(size_t(rows) * n, 45);
        vk::Buffer xbuf = device_buffer(random_floats(size_t(rows) * stride, 44 + rows, -3, 3), "x");
        vk::Buffer normed(gpu().ctx, uint64_t(rows) * k * 4, vk::MemoryKind::Device, "normed");
        vk::Buffer want = device_buffer(bias, "unfolded"), got = device_buffer(bias, "folded");
        vk::Buffer gu(gpu().ctx, uint64_t(rows) * 2 * n * 4, vk::MemoryKind::Device, "gate_up");
        vk::Buffer want_glu(gpu().ctx, uint64_t(rows) * n * 4, vk::MemoryKind::Device, "unfolded swiglu");
        vk::Buffer got_glu(gpu().ctx, uint64_t(rows) * n * 4, vk::MemoryKind::Device, "folded swiglu");
        const ops::Act x(xbuf, stride), xn(normed, k);
        rec.begin();
        ops::rms_norm(oc, x, &nw, xn, rows, k, eps);
        ops::matmul(oc, xn, w, ops::Act(want, n), rows, /*accumulate=*/true);
        ops::matmul_swiglu(oc, xn, gate_up, ops::Act(gu, 2 * n), ops::Act(want_glu, n), rows, ops::MatmulPath::Auto,
                           "gate_up");
        ops::matmul(oc, x, w, ops::Act(got, n), rows, /*accumulate=*/true, ops::MatmulPath::Auto, "folded", &fold);
        ops::matmul_swiglu(oc, x, gate_up, ops::Act(gu, 2 * n), ops::Act(got_glu, n), rows, ops::MatmulPath::Auto,
                           "gate_up", &fold);
        rec.submit_and_wait();
        EXPECT_TRUE(bitwise_equal(read_back<float>(got, bias.size()), read_back<float>(want, bias.size())));
        EXPECT_TRUE(bitwise_equal(read_back<float>(got_glu, size_t(rows) * n),
                                  read_back<float>(want_glu, size_t(rows) * n)));
      }
  }
  gpu().norm_workgroup = device_wg;
  // Where it cannot fold: the GEMM, block formats, and when turned off.
  vk::Buffer fbuf;
  const ops::WeightMatrix f = upload_weights(fbuf, random_floats(size_t(n) * k, 47), WeightType::F32, n, k);
  EXPECT_FALSE(ops::norm_folds(gpu(), ops::WeightMatrix{vk::BufferRange(fbuf), WeightType::Q4_0, n, 256}, 1,
                               ops::MatmulPath::Auto));
  EXPECT_FALSE(ops::norm_folds(gpu(), f, 9, ops::MatmulPath::Auto));
  EXPECT_TRUE(ops::norm_folds(gpu(), f, 9, ops::MatmulPath::Vector));
  gpu().fold_norms = false;
  EXPECT_FALSE(ops::norm_folds(gpu(), f, 1, ops::MatmulPath::Auto));
  gpu().fold_norms = device_fold;
}

// Weights larger than the binding limit are split into row chunks: lower the limit to a few
// KiB and compare with the reference.
TEST_F(OpsTest, MatmulAndEmbedSplitTensorsAboveTheBindingLimit) {
  const uint32_t n = 1000, k = 130, rows = 3;
  BindingLimit limit(64 * 1024);
  for (WeightType t : {WeightType::F32, WeightType::F16, WeightType::BF16}) {
    auto w = random_floats(size_t(n) * k, 11);
    vk::Buffer wbuf;
    auto weights = upload_weights(wbuf, w, t, n, k);
    EXPECT_LT(weights.chunk_rows(gpu().ctx.max_binding_range, 256), n);
    auto x = random_floats(size_t(rows) * k, 12);
    std::vector<int32_t> ids = {999, 0, 517, 64};
    vk::Buffer xbuf = device_buffer(x, "x"), ybuf(gpu().ctx, rows * n * 4, vk::MemoryKind::Device, "y"),
               idbuf = device_buffer(ids, "ids"), ebuf(gpu().ctx, ids.size() * k * 4, vk::MemoryKind::Device, "e");
    rec.begin();
    ops::matmul(oc, ops::Act(xbuf, k), weights, ops::Act(ybuf, n), rows);
    ops::embed(oc, ops::IntVec{idbuf}, uint32_t(ids.size()), weights, ops::Act(ebuf, k));
    rec.submit_and_wait();
    auto rw = round_through(w, t);
    EXPECT_TRUE(all_close(read_back<float>(ybuf, rows * n), ref_matmul(x, rw, rows, n, k), 1e-4, 1e-4));
    std::vector<double> want;
    for (int32_t id : ids) want.insert(want.end(), rw.begin() + size_t(id) * k, rw.begin() + size_t(id + 1) * k);
    EXPECT_TRUE(all_close(read_back<float>(ebuf, ids.size() * k), want, 0, 0));
  }
}

TEST_F(OpsTest, DispatchRejectsBindingsAboveTheLimit) {
  vk::Buffer big(gpu().ctx, 64 * 1024, vk::MemoryKind::Device, "big");
  BindingLimit limit(1024);
  rec.begin();
  EXPECT_THROW(ops::softmax(oc, ops::Act(big, 1000), 4, 1000), eaglevk::Error);
  rec.submit_and_wait();
}

// ---- embedding, norms -----------------------------------------------------------------

TEST_F(OpsTest, EmbeddingGathersRowsEachPrecision) {
  const uint32_t vocab = 301, dim = 257;
  std::vector<int32_t> ids = {0, 300, 5, 5, 129, 17, 299};
  for (WeightType t : {WeightType::F32, WeightType::F16, WeightType::BF16}) {
    auto table = random_floats(size_t(vocab) * dim, 21);
    vk::Buffer tbuf;
    auto weights = upload_weights(tbuf, table, t, vocab, dim);
    vk::Buffer idbuf = device_buffer(ids, "ids"), out(gpu().ctx, ids.size() * dim * 2 * 4, vk::MemoryKind::Device, "out");
    rec.begin();
    // Written into the second half of [tokens, 2*dim] rows, as the draft's concat buffer is.
    ops::embed(oc, ops::IntVec{idbuf}, uint32_t(ids.size()), weights, ops::Act(out, 2 * dim, dim));
    rec.submit_and_wait();
    auto got = read_back<float>(out, ids.size() * dim * 2);
    auto rt = round_through(table, t);
    std::vector<float> half;
    std::vector<double> want;
    for (size_t i = 0; i < ids.size(); ++i) {
      half.insert(half.end(), got.begin() + i * 2 * dim + dim, got.begin() + (i + 1) * 2 * dim);
      want.insert(want.end(), rt.begin() + size_t(ids[i]) * dim, rt.begin() + size_t(ids[i] + 1) * dim);
    }
    EXPECT_TRUE(all_close(half, want, 0, 0)) << ops::weight_type_name(t);
  }
}

TEST(NormWorkgroup, PerDevice) {
  EXPECT_EQ(ops::norm_workgroup_for(true, 1024, 8), 8u);     // lavapipe
  EXPECT_EQ(ops::norm_workgroup_for(false, 1024, 32), 512u);  // NVIDIA
  EXPECT_EQ(ops::norm_workgroup_for(false, 1024, 8), 512u);   // Intel (SIMD8 .. 32)
  EXPECT_EQ(ops::norm_workgroup_for(false, 256, 64), 256u);   // a device that allows 256
  EXPECT_EQ(ops::norm_workgroup_for(false, 1024, 4), 256u);   // 64 subgroups of 4 at most
}

// Every workgroup size a device can get (ops::norm_workgroup_for), on rows shorter and longer
// than the workgroup.
TEST_F(OpsTest, RmsNormAndL2Norm) {
  const uint32_t device_wg = gpu().norm_workgroup;
  for (uint32_t wg : {8u, 64u, 256u, 512u})
  for (uint32_t dim : {257u, 4096u})
  for (uint32_t rows : {1u, 3u, 13u}) {
    if (!workgroup_runs_here(wg)) continue;
    SCOPED_TRACE(::testing::Message() << "workgroup " << wg << ", dim " << dim << ", rows " << rows);
    gpu().norm_workgroup = wg;
    auto x = random_floats(size_t(rows) * dim, 31 + rows, -3, 3);
    auto w = random_floats(dim, 32, 0.5, 1.5);
    vk::Buffer xbuf = device_buffer(x, "x"), wbuf = device_buffer(w, "w"),
               y1(gpu().ctx, x.size() * 4, vk::MemoryKind::Device, "y1"), y2(gpu().ctx, x.size() * 4, vk::MemoryKind::Device, "y2");
    rec.begin();
    vk::BufferRange wr(wbuf);
    ops::rms_norm(oc, ops::Act(xbuf, dim), &wr, ops::Act(y1, dim), rows, dim, 1e-5f);
    ops::rms_norm(oc, ops::Act(xbuf, dim), nullptr, ops::Act(y2, dim), rows, dim, 1e-6f);
    rec.submit_and_wait();
    EXPECT_TRUE(all_close(read_back<float>(y1, x.size()), ref_rms_norm(x, &w, rows, dim, 1e-5f), 1e-5, 1e-5));
    EXPECT_TRUE(all_close(read_back<float>(y2, x.size()), ref_rms_norm(x, nullptr, rows, dim, 1e-6f), 1e-5, 1e-5));
  }
  gpu().norm_workgroup = device_wg;
}

// ---- rope -----------------------------------------------------------------------------

TEST_F(OpsTest, RopeBothPairingsWithLlama3Scaling) {
  for (uint32_t head_dim : {64u, 128u}) {
    // llama3-scaled inverse frequencies (factor 8, low 1, high 4, original 8192), computed here
    // independently of the loader.
    std::vector<float> inv(head_dim / 2);
    for (uint32_t j = 0; j < head_dim / 2; ++j) {
      double base = 1.0 / std::pow(500000.0, 2.0 * j / head_dim);
      double wavelen = 2 * M_PI / base, low = 8192.0 / 1, high = 8192.0 / 4;
      double scaled = wavelen < high ? base : wavelen > low ? base / 8 : [&] {
        double s = (8192.0 / wavelen - 1) / (4 - 1);
        return (1 - s) * base / 8 + s * base;
      }();
      inv[j] = float(scaled);
    }
    // Positions beyond the 8192 of the original context, where the scaled low frequencies
    // matter, up to a 128k context.
    const uint32_t rows = 9, heads = 3, table_positions = 131072;
    std::vector<int32_t> pos = {0, 1, 77, 2047, 8191, 8192, 9000, 32768, 131071};
    auto table = ops::rope_table(inv, table_positions);
    vk::Buffer tbuf = device_buffer(table, "rope table"), pbuf = device_buffer(pos, "pos");
    for (auto pairing : {ops::RopePairing::RotateHalf, ops::RopePairing::Interleaved}) {
      auto x = random_floats(size_t(rows) * heads * head_dim, 41);
      vk::Buffer xbuf = device_buffer(x, "x");
      rec.begin();
      ops::rope(oc, ops::Act(xbuf, heads * head_dim), rows, heads, head_dim, ops::IntVec{pbuf}, tbuf, table_positions,
                pairing);
      rec.submit_and_wait();
      auto want = ref_rope(x, pos, inv, rows, heads, head_dim, pairing == ops::RopePairing::Interleaved);
      EXPECT_TRUE(all_close(read_back<float>(xbuf, x.size()), want, 2e-6, 2e-6)) << head_dim;
    }
  }
}

// rope_kv_write (one dispatch) against its reference, rope then kv_write: the same q columns
// and the same cache bits, in both pairings, with slots that are not the positions (tree nodes
// and batched sequences write elsewhere) and 2 of 6 kv heads of a 12-head GQA row.
TEST_F(OpsTest, RopeKvWriteGivesTheBitsOfRopeThenKvWrite) {
  const uint32_t rows = 5, q_heads = 12, kv_heads = 2, head_dim = 64, capacity = 40, table_positions = 64;
  const uint32_t q_dim = q_heads * head_dim, kv_dim = kv_heads * head_dim, width = q_dim + 2 * kv_dim + 3;
  std::vector<float> inv(head_dim / 2);
  for (uint32_t j = 0; j < head_dim / 2; ++j) inv[j] = float(1.0 / std::pow(10000.0, 2.0 * j / head_dim));
  vk::Buffer tbuf = device_buffer(ops::rope_table(inv, table_positions), "rope table");
  vk::Buffer pbuf = device_buffer(std::vector<int32_t>{3, 4, 5, 6, 63}, "positions");
  vk::Buffer sbuf = device_buffer(std::vector<int32_t>{30, 2, 17, 39, 0}, "slots");
  for (auto pairing : {ops::RopePairing::RotateHalf, ops::RopePairing::Interleaved}) {
    // Rows at a padded stride, 3 elements in.
    const std::vector<float> x = random_floats(size_t(rows) * width + 3, 43);
    std::vector<float> q[2];
    std::vector<uint32_t> k[2], v[2];
    for (int fused = 0; fused < 2; ++fused) {
      vk::Buffer xbuf = device_buffer(x, "qkv");
      std::vector<uint32_t> zeros(size_t(capacity) * kv_dim / 2, 0x7e007e00u);
      vk::Buffer kbuf = device_buffer(zeros, "k cache"), vbuf = device_buffer(zeros, "v cache");
      const ops::KvLayer kv{vk::BufferRange(kbuf), vk::BufferRange(vbuf), capacity, kv_dim};
      const ops::Act qkv(xbuf, width, 3);
      rec.begin();
      if (fused) {
        ops::rope_kv_write(oc, qkv, rows,
                           {q_heads, head_dim, ops::IntVec{pbuf}, tbuf, table_positions, pairing, ops::IntVec{sbuf}, kv});
      } else {
        ops::rope(oc, qkv, rows, q_heads + kv_heads, head_dim, ops::IntVec{pbuf}, tbuf, table_positions, pairing);
        ops::kv_write(oc, qkv.cols(q_dim), qkv.cols(q_dim + kv_dim), rows, ops::IntVec{sbuf}, kv);
      }
      rec.submit_and_wait();
      const std::vector<float> all = read_back<float>(xbuf, x.size());
      for (uint32_t r = 0; r < rows; ++r)
        q[fused].insert(q[fused].end(), all.begin() + 3 + r * width, all.begin() + 3 + r * width + q_dim);
      k[fused] = read_back<uint32_t>(kbuf, zeros.size());
      v[fused] = read_back<uint32_t>(vbuf, zeros.size());
    }
    EXPECT_TRUE(bitwise_equal(q[1], q[0])) << "q, pairing " << int(pairing);
    EXPECT_EQ(k[1], k[0]) << "k cache, pairing " << int(pairing);
    EXPECT_EQ(v[1], v[0]) << "v cache, pairing " << int(pairing);
    EXPECT_NE(k[0][30 * kv_dim / 2], 0x7e007e00u) << "slot 30 was not written";
  }
}

// rope_norm_kv_write (Llama-4's rope layers with QK norm, one dispatch) against rope,
// rms_norm_heads and kv_write: the same qkv rows and cache bits, for both pairings, with the
// norm workgroups of CPU devices (8), 64 and GPUs' 512 (the sums' order depends on it), heads of
// 64 and 128 (more than the 8 and 64 invocations hold one at a time), rows at a padded stride,
// and one row whose position lies past the table and another whose slot lies past the cache.
TEST_F(OpsTest, RopeNormKvWriteGivesTheBitsOfRopeNormThenKvWrite) {
  const uint32_t rows = 5, q_heads = 4, kv_heads = 2, capacity = 40, table_positions = 64;
  const uint32_t device_wg = gpu().norm_workgroup;
  const float eps = 1e-5f;
  vk::Buffer pbuf = device_buffer(std::vector<int32_t>{0, 3, 64, 6, 63, 9}, "positions");
  vk::Buffer sbuf = device_buffer(std::vector<int32_t>{0, 30, 2, 17, 40, 0}, "slots");
  for (uint32_t head_dim : {64u, 128u}) {
    const uint32_t q_dim = q_heads * head_dim, kv_dim = kv_heads * head_dim, width = q_dim + 2 * kv_dim + 5;
    std::vector<float> inv(head_dim / 2);
    for (uint32_t j = 0; j < head_dim / 2; ++j) inv[j] = float(1.0 / std::pow(500000.0, 2.0 * j / head_dim));
    vk::Buffer tbuf = device_buffer(ops::rope_table(inv, table_positions), "rope table");
    const std::vector<float> x = random_floats(size_t(rows) * width + 3, 91 + head_dim, -3, 3);
    const std::vector<uint32_t> cache_init(size_t(capacity) * kv_dim / 2, 0x7e007e00u);
    for (uint32_t norm_wg : {8u, 64u, 512u})
      for (auto pairing : {ops::RopePairing::Interleaved, ops::RopePairing::RotateHalf}) {
        if (!workgroup_runs_here(norm_wg)) continue;
        SCOPED_TRACE(fmt::format("head_dim {}, norm workgroup {}, pairing {}", head_dim, norm_wg, int(pairing)));
        gpu().norm_workgroup = norm_wg;
        std::vector<float> qkv_out[2];
        std::vector<uint32_t> k_out[2], v_out[2];
        for (int fused = 0; fused < 2; ++fused) {
          vk::Buffer xbuf = device_buffer(x, "qkv");
          vk::Buffer kbuf = device_buffer(cache_init, "k cache"), vbuf = device_buffer(cache_init, "v cache");
          const ops::KvLayer kv{vk::BufferRange(kbuf), vk::BufferRange(vbuf), capacity, kv_dim};
          const ops::Act qkv(xbuf, width, 3);
          const ops::IntVec pos{pbuf, 1}, slots{sbuf, 1};
          rec.begin();
          if (fused) {
            ops::rope_norm_kv_write(oc, qkv, rows, {q_heads, head_dim, pos, tbuf, table_positions, pairing, slots, kv},
                                    eps);
          } else {
            ops::rope(oc, qkv, rows, q_heads + kv_heads, head_dim, pos, tbuf, table_positions, pairing);
            ops::rms_norm_heads(oc, qkv, rows, q_heads + kv_heads, head_dim, eps);
            ops::kv_write(oc, qkv.cols(q_dim), qkv.cols(q_dim + kv_dim), rows, slots, kv);
          }
          rec.submit_and_wait();
          qkv_out[fused] = read_back<float>(xbuf, x.size());
          k_out[fused] = read_back<uint32_t>(kbuf, cache_init.size());
          v_out[fused] = read_back<uint32_t>(vbuf, cache_init.size());
        }
        EXPECT_TRUE(bitwise_equal(qkv_out[1], qkv_out[0])) << "qkv rows";
        EXPECT_EQ(k_out[1], k_out[0]) << "K cache";
        EXPECT_EQ(v_out[1], v_out[0]) << "V cache";
        EXPECT_NE(k_out[0][30 * kv_dim / 2], cache_init[0]) << "row 0's slot 30 was not written";
      }
  }
  gpu().norm_workgroup = device_wg;
}

// rope_kv_write folded into the q | k | v product (ops::matmul_rope_kv, matvec.comp ROPE_KV) gives
// the bits of the product then rope_kv_write: f16 in every vendor's configuration for 1 and 11
// rows (chunks of 8 and 3), with both pairings and with none (NoPE layers: the cache writes,
// kv_write's bits); bf16 with the RMSNorm folded in front as well; and a matrix of two
// parts, q | k in f16 and v in f32, as llama.cpp's files keep v in another type. Heads of 32 (8
// quads each), 4 q heads and 2 kv heads; K = 264.
TEST_F(OpsTest, RopeKvWriteFoldedIntoTheQkvProductGivesTheSameBits) {
  const uint32_t k = 264, q_heads = 4, kv_heads = 2, head_dim = 32, width = (q_heads + 2 * kv_heads) * head_dim;
  const std::vector<VendorMatvecShape> vendors = vendor_matvec_shapes();
  vk::Buffer f16_buf, bf16_buf, qk_buf, v_buf;
  const std::vector<float> w = random_floats(size_t(width) * k, 81);
  const ops::WeightMatrix f16 = upload_weights(f16_buf, w, WeightType::F16, width, k);
  expect_rope_fold_gives_the_bits(oc, {{f16, 0}}, k, q_heads, kv_heads, head_dim, {1, 11}, vendors, false,
                                  {ops::RopePairing::RotateHalf, ops::RopePairing::Interleaved, ops::RopePairing::None});
  const ops::WeightMatrix bf16 = upload_weights(bf16_buf, w, WeightType::BF16, width, k);
  expect_rope_fold_gives_the_bits(oc, {{bf16, 0}}, k, q_heads, kv_heads, head_dim, {11}, vendors, true);
  const uint32_t qk_rows = (q_heads + kv_heads) * head_dim;
  const std::vector<float> qk(w.begin(), w.begin() + size_t(qk_rows) * k), v(w.begin() + size_t(qk_rows) * k, w.end());
  const ops::WeightMatrix qk_part = upload_weights(qk_buf, qk, WeightType::F16, qk_rows, k);
  const ops::WeightMatrix v_part = upload_weights(v_buf, v, WeightType::F32, width - qk_rows, k);
  expect_rope_fold_gives_the_bits(oc, {{qk_part, 0}, {v_part, qk_rows}}, k, q_heads, kv_heads, head_dim, {1, 4},
                                  {vendors[0], vendors[2]}, false);
  // Several rows with other outputs per workgroup (rows_outs 5: the fold rounds it up to 8 and
  // its reference products take 5).
  VendorMatvecShape rows_outs = vendors[2];
  rows_outs.shape.rows_outs = 5;
  expect_rope_fold_gives_the_bits(oc, {{f16, 0}}, k, q_heads, kv_heads, head_dim, {11}, {rows_outs}, false);

  // Where it does not fold: the GEMM, heads of no whole quads, a part that starts inside a head,
  // and when turned off.
  const ops::KvLayer kv{{}, {}, 40, kv_heads * head_dim};
  const ops::RopeKv rope{q_heads, head_dim, {}, {}, 64, ops::RopePairing::RotateHalf, {}, kv};
  EXPECT_TRUE(ops::rope_folds(gpu(), f16, 0, 8, ops::MatmulPath::Auto, rope));
  EXPECT_FALSE(ops::rope_folds(gpu(), f16, 0, 9, ops::MatmulPath::Auto, rope));
  EXPECT_TRUE(ops::rope_folds(gpu(), f16, 0, 9, ops::MatmulPath::Vector, rope));
  ops::RopeKv odd = rope;
  odd.head_dim = 34;
  odd.kv.kv_dim = 2 * 34;
  EXPECT_FALSE(ops::rope_folds(gpu(), ops::WeightMatrix{f16.data, WeightType::F16, 8 * 34, k}, 0, 1,
                               ops::MatmulPath::Auto, odd));
  EXPECT_FALSE(ops::rope_folds(gpu(), v_part, qk_rows - 16, 1, ops::MatmulPath::Auto, rope));
  const bool device_fold = gpu().fold_rope;
  gpu().fold_rope = false;
  EXPECT_FALSE(ops::rope_folds(gpu(), f16, 0, 1, ops::MatmulPath::Auto, rope));
  gpu().fold_rope = device_fold;
}

// ---- KV cache and attention -----------------------------------------------------------

// Both attention kernels: this device's (lavapipe: one subgroup, texel loads) and the
// 64-invocation workgroup of GPUs.
std::vector<VendorMatvecShape> both_attention_kernels() {
  const std::vector<VendorMatvecShape> configs = attention_configs();
  return {configs[0], configs[2]};
}

// A flash-decoding split of `keys` keys with a scratch for `rows` rows at kv_len.
struct SplitScratch {
  vk::Buffer buffer;
  ops::AttentionSplit split;
  SplitScratch(uint32_t keys, uint32_t heads, uint32_t head_dim, uint32_t kv_len, uint32_t rows)
      : buffer(gpu().ctx, ops::attention_split_row_bytes(heads, head_dim, kv_len, keys) * rows, vk::MemoryKind::Device,
               "split scratch"),
        split{keys, vk::BufferRange(buffer)} {}
};

// Each attention workgroup serves one (row, head) pair: the reference for the bits of the
// workgroups that serve the heads of a KV head and the rows of a batch.
struct OneHeadOneRow {
  uint32_t heads = gpu().attention_max_group, rows = gpu().attention_max_rows;
  OneHeadOneRow() { gpu().attention_max_group = gpu().attention_max_rows = 1; }
  ~OneHeadOneRow() { gpu().attention_max_group = heads, gpu().attention_max_rows = rows; }
};

struct AttentionCase {
  uint32_t rows, heads, kv_heads, head_dim, first_pos, chunk;
  bool qscale;
};

class AttentionTest : public OpsTest, public ::testing::WithParamInterface<AttentionCase> {};

TEST_P(AttentionTest, MatchesReference) {
  const AttentionCase c = GetParam();
  const uint32_t kv_dim = c.kv_heads * c.head_dim, q_dim = c.heads * c.head_dim, capacity = c.first_pos + c.rows + 3;
  const uint32_t kv_len = c.first_pos + c.rows;
  // Earlier positions come from a previous "pass"; the new rows write theirs via kv_write.
  auto old_k = random_floats(size_t(capacity) * kv_dim, 51), old_v = random_floats(size_t(capacity) * kv_dim, 52);
  std::vector<uint16_t> k16 = to_f16(old_k), v16 = to_f16(old_v);
  // Rows are [q | k | v] as a fused qkv matmul writes them.
  const uint32_t stride = q_dim + 2 * kv_dim;
  auto qkv = random_floats(size_t(c.rows) * stride, 53, -2, 2);
  std::vector<int32_t> pos(c.rows);
  for (uint32_t r = 0; r < c.rows; ++r) pos[r] = int32_t(c.first_pos + r);
  auto qscale = random_floats(c.rows, 55, 1.0f, 1.3f);

  vk::Buffer kbuf = device_buffer(k16, "k"), vbuf = device_buffer(v16, "v"), qkvbuf = device_buffer(qkv, "qkv"),
             pbuf = device_buffer(pos, "pos"), out(gpu().ctx, size_t(c.rows) * q_dim * 4, vk::MemoryKind::Device, "out");
  vk::Buffer sbuf = device_buffer(qscale, "qscale");
  ops::KvLayer kv{kbuf, vbuf, capacity, kv_dim};
  vk::BufferRange sr(sbuf);
  ops::AttentionParams params{c.heads, c.kv_heads, c.head_dim, kv_len, c.chunk, 1.0f / std::sqrt(float(c.head_dim)),
                              nullptr, c.qscale ? &sr : nullptr};
  ops::Act rows_act(qkvbuf, stride);
  rec.begin();
  ops::kv_write(oc, rows_act.cols(q_dim), rows_act.cols(q_dim + kv_dim), c.rows, ops::IntVec{pbuf}, kv);
  ops::attention(oc, rows_act, kv, ops::IntVec{pbuf}, ops::Act(out, q_dim), c.rows, params);
  rec.submit_and_wait();
  const auto device_choice = read_back<float>(out, size_t(c.rows) * q_dim);

  // Reference cache: old rows, then the new rows rounded to f16.
  std::vector<float> kc(size_t(kv_len) * kv_dim), vc(size_t(kv_len) * kv_dim), q(size_t(c.rows) * q_dim);
  for (size_t i = 0; i < kc.size(); ++i) kc[i] = f16_to_float(k16[i]), vc[i] = f16_to_float(v16[i]);
  for (uint32_t r = 0; r < c.rows; ++r) {
    for (uint32_t d = 0; d < q_dim; ++d) q[size_t(r) * q_dim + d] = qkv[size_t(r) * stride + d];
    for (uint32_t d = 0; d < kv_dim; ++d) {
      kc[size_t(pos[r]) * kv_dim + d] = f16_to_float(to_f16({qkv[size_t(r) * stride + q_dim + d]})[0]);
      vc[size_t(pos[r]) * kv_dim + d] = f16_to_float(to_f16({qkv[size_t(r) * stride + q_dim + kv_dim + d]})[0]);
    }
  }
  RefAttention ra{c.heads, c.kv_heads, c.head_dim, kv_len, c.chunk, params.scale, nullptr, 0,
                  c.qscale ? &qscale : nullptr};
  auto want = ref_attention(q, kc, vc, pos, c.rows, ra);
  EXPECT_TRUE(all_close(device_choice, want, 1e-5, 1e-4));

  // Every attention kernel and load path: the caches through texel buffers (CPU devices) or as
  // storage buffers (GPUs) give the same bits; the other kernel (another block of keys) agrees
  // with the reference. The query heads of a KV head share a workgroup (GQA), and on the
  // workgroup kernel so do the rows; one head and one row per workgroup give the same bits.
  // The long contexts check llvmpipe's loop limit (attention.comp) on the kernel it runs; the
  // other kernel runs the short ones (on lavapipe it is several times slower).
  const uint32_t device_workgroup = ops::matvec_shape(gpu()).attention_workgroup;
  for (const VendorMatvecShape& config : attention_configs()) {
    if (config.shape.attention_workgroup != device_workgroup && kv_len > 4096) continue;
    MatvecShapeScope scope(config.shape);
    rec.begin();
    ops::attention(oc, rows_act, kv, ops::IntVec{pbuf}, ops::Act(out, q_dim), c.rows, params);
    rec.submit_and_wait();
    const auto grouped = read_back<float>(out, device_choice.size());
    if (config.shape.attention_workgroup == device_workgroup)
      EXPECT_TRUE(bitwise_equal(grouped, device_choice)) << config.name;
    else
      EXPECT_TRUE(all_close(grouped, want, 1e-5, 1e-4)) << config.name;
    OneHeadOneRow one_pair;
    rec.begin();
    ops::attention(oc, rows_act, kv, ops::IntVec{pbuf}, ops::Act(out, q_dim), c.rows, params);
    rec.submit_and_wait();
    EXPECT_TRUE(bitwise_equal(read_back<float>(out, device_choice.size()), grouped))
        << config.name << ": one head and one row per workgroup";
  }
  // Split along the context (flash-decoding), on both kernels: close to the reference; a row
  // whose keys all lie in one split has the unsplit kernel's bits (the merge scales it by 1);
  // a scratch of two rows, which takes the rows a chunk at a time, changes no bit.
  for (const VendorMatvecShape& config : both_attention_kernels()) {
    if (config.shape.attention_workgroup != device_workgroup && kv_len > 4096) continue;
    MatvecShapeScope scope(config.shape);
    SCOPED_TRACE(config.name);
    rec.begin();
    ops::attention(oc, rows_act, kv, ops::IntVec{pbuf}, ops::Act(out, q_dim), c.rows, params);
    rec.submit_and_wait();
    const auto unsplit = read_back<float>(out, device_choice.size());
    const uint32_t keys = kv_len > 4096 ? 1024 : 64;
    std::vector<float> split_out[2];
    for (bool chunked : {false, true}) {
      SplitScratch scratch(keys, c.heads, c.head_dim, kv_len, chunked ? 2u : c.rows);
      ops::AttentionParams split_params = params;
      split_params.split = &scratch.split;
      rec.begin();
      ops::attention(oc, rows_act, kv, ops::IntVec{pbuf}, ops::Act(out, q_dim), c.rows, split_params);
      rec.submit_and_wait();
      split_out[chunked] = read_back<float>(out, device_choice.size());
    }
    EXPECT_TRUE(all_close(split_out[0], want, 1e-5, 1e-4));
    EXPECT_TRUE(bitwise_equal(split_out[1], split_out[0])) << "rows in chunks of 2";
    {
      OneHeadOneRow one_pair;
      SplitScratch scratch(keys, c.heads, c.head_dim, kv_len, c.rows);
      ops::AttentionParams split_params = params;
      split_params.split = &scratch.split;
      rec.begin();
      ops::attention(oc, rows_act, kv, ops::IntVec{pbuf}, ops::Act(out, q_dim), c.rows, split_params);
      rec.submit_and_wait();
      EXPECT_TRUE(bitwise_equal(read_back<float>(out, device_choice.size()), split_out[0]))
          << "split, one head and one row per workgroup";
    }
    for (uint32_t r = 0; r < c.rows; ++r) {
      const uint32_t p = uint32_t(pos[r]), start = c.chunk ? p / c.chunk * c.chunk : 0;
      if (start / keys != p / keys) continue;
      std::vector<float> a(split_out[0].begin() + size_t(r) * q_dim, split_out[0].begin() + size_t(r + 1) * q_dim),
          b(unsplit.begin() + size_t(r) * q_dim, unsplit.begin() + size_t(r + 1) * q_dim);
      EXPECT_TRUE(bitwise_equal(a, b)) << "row " << r << " at " << p << ", its keys in one split";
    }
  }
  // The written cache rows equal the f16 rounding of the new k and v.
  auto kgot = read_back<uint16_t>(kbuf, size_t(capacity) * kv_dim);
  for (uint32_t r = 0; r < c.rows; ++r)
    for (uint32_t d = 0; d < kv_dim; d += 7)
      ASSERT_EQ(f16_to_float(kgot[size_t(pos[r]) * kv_dim + d]), kc[size_t(pos[r]) * kv_dim + d]) << r << "," << d;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionTest,
    ::testing::Values(AttentionCase{1, 8, 8, 64, 0, 0, false},      // first token, GQA ratio 1
                      AttentionCase{1, 8, 2, 64, 150, 0, false},    // decode, ratio 4
                      AttentionCase{4, 10, 2, 128, 61, 0, false},   // verify of 4, ratio 5
                      AttentionCase{13, 4, 1, 128, 0, 0, false},    // prefill, ratio 4
                      AttentionCase{9, 8, 2, 64, 59, 64, false},    // crosses a 64-chunk boundary
                      AttentionCase{5, 8, 8, 64, 126, 128, true},   // a verify across a chunk, ratio 1
                      AttentionCase{20, 4, 4, 64, 30, 0, false},    // prefill, 8 rows a workgroup
                      AttentionCase{6, 8, 2, 256, 100, 0, false},   // widest heads: narrower key tiles
                      AttentionCase{3, 8, 2, 64, 40, 32, true},     // chunked + query scale
                      // Long contexts: a 32k+ cache, and Llama-4's 8192 chunks many chunks in.
                      // (near 20,000 keys lavapipe once cut rolled loops short: see attention.comp)
                      AttentionCase{4, 8, 2, 128, 32765, 0, false},
                      AttentionCase{2, 4, 1, 128, 65000, 0, false},
                      AttentionCase{6, 8, 2, 64, 3 * 8192 - 3, 8192, true},
                      AttentionCase{2, 4, 1, 128, 40000, 8192, false}),
    [](const auto& info) {
      const AttentionCase& c = info.param;
      return fmt::format("r{}_h{}_kv{}_d{}_p{}_c{}{}", c.rows, c.heads, c.kv_heads, c.head_dim, c.first_pos, c.chunk,
                         c.qscale ? "_qscale" : "");
    });

// Attention of a row must not depend on how many rows share the dispatch.
TEST_F(OpsTest, AttentionIsBatchInvariant) {
  for (const VendorMatvecShape& config : both_attention_kernels())
  for (uint32_t split_keys : {0u, 64u}) {
  MatvecShapeScope scope(config.shape);
  SCOPED_TRACE(fmt::format("{}, split {}", config.name, split_keys));
  const uint32_t heads = 8, kv_heads = 2, hd = 64, kv_dim = kv_heads * hd, rows = 5, first = 130, cap = 160;
  auto k = to_f16(random_floats(size_t(cap) * kv_dim, 61)), v = to_f16(random_floats(size_t(cap) * kv_dim, 62));
  auto q = random_floats(size_t(rows) * heads * hd, 63);
  std::vector<int32_t> pos;
  for (uint32_t r = 0; r < rows; ++r) pos.push_back(int32_t(first + r));
  vk::Buffer kb = device_buffer(k, "k"), vb = device_buffer(v, "v"), qb = device_buffer(q, "q"), pb = device_buffer(pos, "pos"),
             batch(gpu().ctx, q.size() * 4, vk::MemoryKind::Device, "batch"),
             single(gpu().ctx, q.size() * 4, vk::MemoryKind::Device, "single");
  ops::KvLayer kv{kb, vb, cap, kv_dim};
  ops::AttentionParams params{heads, kv_heads, hd, first + rows, 0, 0.125f};
  SplitScratch scratch(64, heads, hd, cap, rows);
  scratch.split.keys = split_keys;
  params.split = &scratch.split;
  rec.begin();
  ops::attention(oc, ops::Act(qb, heads * hd), kv, ops::IntVec{pb}, ops::Act(batch, heads * hd), rows, params);
  for (uint32_t r = 0; r < rows; ++r) {
    ops::AttentionParams one = params;
    one.kv_len = first + r + 1;  // a decode step sees only the cache up to its own position
    ops::attention(oc, ops::Act(qb, heads * hd).row(r), kv, ops::IntVec{pb, r}, ops::Act(single, heads * hd).row(r), 1,
                   one);
  }
  rec.submit_and_wait();
  EXPECT_TRUE(bitwise_equal(read_back<float>(batch, q.size()), read_back<float>(single, q.size())));
  }
}

// The workgroup kernel (GPUs) stages each block's values in shared memory as its keys, K_TILE
// quads a key at a time, against the f64 reference: heads of 64 and 128 (a tile of all of a key's
// quads, and on lavapipe's 32 KiB of shared memory with 16 pairs, two tiles), one row and a batch
// of 5 (rows sharing blocks), 200 keys (a partial last block), unsplit and split along the context.
TEST_F(OpsTest, AttentionValuesStagedMatchTheReference) {
  const VendorMatvecShape config = attention_configs()[2];  // a GPU's 64-invocation workgroup
  ASSERT_EQ(config.shape.attention_workgroup, 64u);
  MatvecShapeScope scope(config.shape);
  for (uint32_t hd : {64u, 128u})
  for (uint32_t rows : {1u, 5u})
  for (uint32_t split_keys : {0u, 64u}) {
    SCOPED_TRACE(fmt::format("head_dim {}, {} rows, split {}", hd, rows, split_keys));
    const uint32_t heads = 8, kv_heads = 2, kv_dim = kv_heads * hd, first = 200 - rows, cap = 208;
    auto k = to_f16(random_floats(size_t(cap) * kv_dim, 71 + hd)), v = to_f16(random_floats(size_t(cap) * kv_dim, 72));
    auto q = random_floats(size_t(rows) * heads * hd, 73, -2, 2);
    std::vector<int32_t> pos;
    for (uint32_t r = 0; r < rows; ++r) pos.push_back(int32_t(first + r));
    vk::Buffer kb = device_buffer(k, "k"), vb = device_buffer(v, "v"), qb = device_buffer(q, "q"),
               pb = device_buffer(pos, "pos");
    ops::KvLayer kv{kb, vb, cap, kv_dim};
    ops::AttentionParams params{heads, kv_heads, hd, first + rows, 0, 1.0f / std::sqrt(float(hd))};
    SplitScratch scratch(64, heads, hd, cap, rows);
    scratch.split.keys = split_keys;
    params.split = &scratch.split;
    vk::Buffer ob(gpu().ctx, q.size() * 4, vk::MemoryKind::Device, "out");
    rec.begin();
    ops::attention(oc, ops::Act(qb, heads * hd), kv, ops::IntVec{pb}, ops::Act(ob, heads * hd), rows, params);
    rec.submit_and_wait();
    std::vector<float> kc(k.size()), vc(v.size());
    for (size_t i = 0; i < k.size(); ++i) kc[i] = f16_to_float(k[i]), vc[i] = f16_to_float(v[i]);
    RefAttention ra{heads, kv_heads, hd, first + rows, 0, params.scale};
    const std::vector<double> want = ref_attention(q, kc, vc, pos, rows, ra);
    EXPECT_TRUE(all_close(read_back<float>(ob, q.size()), want, 1e-5, 1e-4));
  }
}

// Tree rows (verification of a speculation tree): every node attends to the committed rows and
// its own ancestors and computes, bit for bit, what a one-row pass computes along its own branch
// stored at consecutive positions; also across a Llama-4 chunk boundary inside the tree and with
// the NoPE temperature taken from each node's own position; unsplit and split along the context.
TEST_F(OpsTest, TreeAttentionEqualsEachBranchDecodedAlone) {
  struct Case {
    uint32_t base, chunk;
    bool temperature;
  };
  const uint32_t heads = 8, kv_heads = 2, hd = 64, kv_dim = kv_heads * hd, nodes = 14;
  for (const VendorMatvecShape& config : both_attention_kernels())
  for (uint32_t split_keys : {0u, 64u})
  for (const Case& c : {Case{47, 0, false}, Case{61, 64, false}, Case{125, 64, true}, Case{0, 0, true}}) {
    MatvecShapeScope scope(config.shape);
    SCOPED_TRACE(fmt::format("{}, split {}", config.name, split_keys));
    // A random tree: node j > 0 hangs from a random earlier node.
    std::mt19937 rng(c.base + 7);
    std::vector<int32_t> parent(nodes, -1), depth(nodes, 0);
    for (uint32_t j = 1; j < nodes; ++j) {
      parent[j] = int32_t(rng() % j);
      depth[j] = depth[uint32_t(parent[j])] + 1;
    }
    const uint32_t stride = uint32_t(*std::max_element(depth.begin(), depth.end())) + 1;
    std::vector<int32_t> path(size_t(nodes) * stride, 0), pos(nodes);
    for (uint32_t j = 0; j < nodes; ++j) {
      pos[j] = int32_t(c.base) + depth[j];
      for (int32_t m = int32_t(j); m >= 0; m = parent[uint32_t(m)]) path[size_t(j) * stride + uint32_t(depth[uint32_t(m)])] = m;
    }
    const uint32_t cap = c.base + nodes + 8;
    auto k = to_f16(random_floats(size_t(cap) * kv_dim, 81)), v = to_f16(random_floats(size_t(cap) * kv_dim, 82));
    auto q = random_floats(size_t(nodes) * heads * hd, 83, -2, 2);
    ops::AttentionParams params{heads, kv_heads, hd, c.base + nodes, c.chunk, 0.125f};
    SplitScratch scratch(64, heads, hd, cap, nodes);
    scratch.split.keys = split_keys;
    params.split = &scratch.split;
    params.temperature_tuning = c.temperature;
    params.floor_scale = 4;
    params.attn_scale = 0.25f;
    // The split runs read the tree's base from the table (a replayed round's), with a wrong
    // number where the base would be given.
    path.push_back(int32_t(c.base));
    vk::Buffer kb = device_buffer(k, "k"), vb = device_buffer(v, "v"), qb = device_buffer(q, "q"),
               pb = device_buffer(pos, "pos"), tb = device_buffer(path, "path"),
               out(gpu().ctx, q.size() * 4, vk::MemoryKind::Device, "tree out");
    ops::TreePath tree{tb, 0, stride, c.base};
    if (split_keys) tree = ops::TreePath{tb, 0, stride, c.base + 1000, int32_t(path.size() - 1)};
    ops::AttentionParams tree_params = params;
    tree_params.tree = &tree;
    rec.begin();
    ops::attention(oc, ops::Act(qb, heads * hd), ops::KvLayer{kb, vb, cap, kv_dim}, ops::IntVec{pb},
                   ops::Act(out, heads * hd), nodes, tree_params);
    rec.submit_and_wait();
    auto got = read_back<float>(out, q.size());
    for (uint32_t j = 0; j < nodes; ++j) {
      // The branch root..j moved to positions base, base + 1, ...
      std::vector<uint16_t> ks(k.begin(), k.begin() + size_t(c.base) * kv_dim), vs(v.begin(), v.begin() + size_t(c.base) * kv_dim);
      for (int32_t d = 0; d <= depth[j]; ++d) {
        size_t slot = c.base + uint32_t(path[size_t(j) * stride + uint32_t(d)]);
        ks.insert(ks.end(), k.begin() + slot * kv_dim, k.begin() + (slot + 1) * kv_dim);
        vs.insert(vs.end(), v.begin() + slot * kv_dim, v.begin() + (slot + 1) * kv_dim);
      }
      const uint32_t len = uint32_t(ks.size() / kv_dim);
      std::vector<float> qj(q.begin() + size_t(j) * heads * hd, q.begin() + size_t(j + 1) * heads * hd);
      vk::Buffer ksb = device_buffer(ks, "k seq"), vsb = device_buffer(vs, "v seq"), qsb = device_buffer(qj, "q seq"),
                 psb = device_buffer(std::vector<int32_t>{pos[j]}, "pos seq"),
                 seq(gpu().ctx, qj.size() * 4, vk::MemoryKind::Device, "seq out");
      ops::AttentionParams seq_params = params;
      seq_params.kv_len = len;
      rec.begin();
      ops::attention(oc, ops::Act(qsb, heads * hd), ops::KvLayer{ksb, vsb, len, kv_dim}, ops::IntVec{psb},
                     ops::Act(seq, heads * hd), 1, seq_params);
      rec.submit_and_wait();
      std::vector<float> row(got.begin() + size_t(j) * heads * hd, got.begin() + size_t(j + 1) * heads * hd);
      EXPECT_TRUE(bitwise_equal(row, read_back<float>(seq, qj.size()))) << "base " << c.base << " node " << j;
    }
  }
}

// Sequence regions (batched decoding): rows of three sequences in one dispatch, each sequence
// in its own range of a shared cache and at its own positions, compute bit for bit what each
// sequence computes alone in a cache of its own; also with Llama-4 chunks and the NoPE
// temperature from each row's position. A row whose region is wrong reads another sequence's
// keys and differs.
TEST_F(OpsTest, AttentionRegionsEqualEachSequenceAlone) {
  const uint32_t heads = 8, kv_heads = 2, hd = 64, kv_dim = kv_heads * hd, region = 200;
  struct Seq {
    uint32_t first, rows;  // positions first .. first + rows - 1
  };
  const std::vector<Seq> seqs = {{130, 4}, {7, 1}, {70, 3}};
  for (const VendorMatvecShape& config : both_attention_kernels())
  for (uint32_t split_keys : {0u, 64u})
  for (uint32_t chunk : {0u, 64u}) {
    MatvecShapeScope scope(config.shape);
    SCOPED_TRACE(fmt::format("{}, split {}", config.name, split_keys));
    const uint32_t cap = region * uint32_t(seqs.size());
    auto k = to_f16(random_floats(size_t(cap) * kv_dim, 91)), v = to_f16(random_floats(size_t(cap) * kv_dim, 92));
    std::vector<int32_t> pos, slots;
    for (size_t s = 0; s < seqs.size(); ++s)
      for (uint32_t r = 0; r < seqs[s].rows; ++r) {
        pos.push_back(int32_t(seqs[s].first + r));
        slots.push_back(int32_t(s * region + seqs[s].first + r));
      }
    const uint32_t rows = uint32_t(pos.size());
    auto q = random_floats(size_t(rows) * heads * hd, 93, -2, 2);
    ops::AttentionParams params{heads, kv_heads, hd, 134, chunk, 0.125f};  // the largest position + 1
    SplitScratch scratch(64, heads, hd, 134, 8);
    scratch.split.keys = split_keys;
    params.split = &scratch.split;
    params.temperature_tuning = chunk > 0;
    params.floor_scale = 4;
    params.attn_scale = 0.25f;
    vk::Buffer kb = device_buffer(k, "k"), vb = device_buffer(v, "v"), qb = device_buffer(q, "q"),
               pb = device_buffer(pos, "pos"), sb = device_buffer(slots, "slots"),
               out(gpu().ctx, q.size() * 4, vk::MemoryKind::Device, "batch out");
    ops::IntVec regions{sb};
    ops::AttentionParams batch_params = params;
    batch_params.regions = &regions;
    rec.begin();
    ops::attention(oc, ops::Act(qb, heads * hd), ops::KvLayer{kb, vb, cap, kv_dim}, ops::IntVec{pb},
                   ops::Act(out, heads * hd), rows, batch_params);
    rec.submit_and_wait();
    const auto got = read_back<float>(out, q.size());
    uint32_t row0 = 0;
    for (size_t s = 0; s < seqs.size(); ++s) {
      // The sequence alone: its region as a cache of its own, its rows in one pass.
      const size_t from = s * region * kv_dim, to = (s + 1) * region * kv_dim;
      std::vector<uint16_t> ks(k.begin() + from, k.begin() + to), vs(v.begin() + from, v.begin() + to);
      const uint32_t n = seqs[s].rows, width = heads * hd;
      std::vector<float> qs(q.begin() + size_t(row0) * width, q.begin() + size_t(row0 + n) * width);
      std::vector<int32_t> ps(pos.begin() + row0, pos.begin() + row0 + n);
      vk::Buffer ksb = device_buffer(ks, "k seq"), vsb = device_buffer(vs, "v seq"), qsb = device_buffer(qs, "q seq"),
                 psb = device_buffer(ps, "pos seq"), seq(gpu().ctx, qs.size() * 4, vk::MemoryKind::Device, "seq out");
      ops::AttentionParams seq_params = params;
      seq_params.kv_len = seqs[s].first + n;
      rec.begin();
      ops::attention(oc, ops::Act(qsb, width), ops::KvLayer{ksb, vsb, region, kv_dim}, ops::IntVec{psb},
                     ops::Act(seq, width), n, seq_params);
      rec.submit_and_wait();
      std::vector<float> mine(got.begin() + size_t(row0) * width, got.begin() + size_t(row0 + n) * width);
      EXPECT_TRUE(bitwise_equal(mine, read_back<float>(seq, qs.size()))) << "chunk " << chunk << " sequence " << s;
      row0 += n;
    }
  }
}

// ---- elementwise, softmax, argmax -----------------------------------------------------

TEST_F(OpsTest, SwigluOnFusedGateUp) {
  const uint32_t rows = 3, width = 257;
  auto x = random_floats(size_t(rows) * 2 * width, 71, -6, 6);
  vk::Buffer xb = device_buffer(x, "x"), out(gpu().ctx, rows * width * 4, vk::MemoryKind::Device, "out");
  ops::Act in(xb, 2 * width);
  rec.begin();
  ops::swiglu(oc, in, in.cols(width), ops::Act(out, width), rows, width);
  rec.submit_and_wait();
  std::vector<float> g, u;
  for (uint32_t r = 0; r < rows; ++r) {
    g.insert(g.end(), x.begin() + r * 2 * width, x.begin() + r * 2 * width + width);
    u.insert(u.end(), x.begin() + r * 2 * width + width, x.begin() + (r + 1) * 2 * width);
  }
  EXPECT_TRUE(all_close(read_back<float>(out, rows * width), ref_swiglu(g, u), 1e-6, 1e-5));
}

TEST_F(OpsTest, ResidualAdd) {
  const uint32_t n = 1001;
  auto a = random_floats(n, 81), b = random_floats(n, 82);
  vk::Buffer ab = device_buffer(a, "a"), bb = device_buffer(b, "b");
  rec.begin();
  ops::add(oc, ab, bb, ab, n);
  rec.submit_and_wait();
  std::vector<double> want(n);
  for (uint32_t i = 0; i < n; ++i) want[i] = double(a[i] + b[i]);
  EXPECT_TRUE(all_close(read_back<float>(ab, n), want, 0, 0));
}

// The one-dimensional kernels (swiglu, copy_rows, add, rope, kv_write, and the matvec's output
// groups) fold what exceeds the
// device's workgroup count along x into y: under a limit of 3 groups along x they give the
// bits they give under the device's own limit (the tests above check those against the
// references). Past x * y, the op refuses with the reason; so does the recorder for any
// dispatch beyond the limit.
TEST_F(OpsTest, OneDimensionalKernelsFoldLargeGridsIntoY) {
  const uint32_t rows = 7, width = 301, heads = 4, head_dim = 64, kv_dim = 2 * head_dim, capacity = 16;
  auto gu = random_floats(size_t(rows) * 2 * width, 91, -4, 4), a = random_floats(size_t(rows) * width, 92),
       b = random_floats(size_t(rows) * width, 93), q = random_floats(size_t(rows) * heads * head_dim, 94),
       kv_rows = random_floats(size_t(rows) * 2 * kv_dim, 95);
  std::vector<float> inv(head_dim / 2);
  for (uint32_t j = 0; j < head_dim / 2; ++j) inv[j] = float(1.0 / std::pow(10000.0, 2.0 * j / head_dim));
  vk::Buffer tbuf = device_buffer(ops::rope_table(inv, capacity), "rope table");
  vk::Buffer pbuf = device_buffer(std::vector<int32_t>{3, 4, 5, 6, 7, 8, 9}, "pos");
  const uint32_t mv_n = 67, mv_k = 64;
  vk::Buffer mv_storage;
  const ops::WeightMatrix mv_w = upload_weights(mv_storage, random_floats(size_t(mv_n) * mv_k, 96), WeightType::F16, mv_n, mv_k);
  vk::Buffer mv_x = device_buffer(random_floats(size_t(rows) * mv_k, 97), "matvec x");

  // Every kernel's output, read back after one submission.
  auto run_all = [&]() {
    vk::Buffer gub = device_buffer(gu, "gate_up"), sw(gpu().ctx, rows * width * 4, vk::MemoryKind::Device, "swiglu"),
        ab = device_buffer(a, "a"), bb = device_buffer(b, "b"),
        copy(gpu().ctx, rows * width * 4, vk::MemoryKind::Device, "copy"), qb = device_buffer(q, "q"),
        kvb = device_buffer(kv_rows, "kv rows"), kc(gpu().ctx, capacity * kv_dim * 2, vk::MemoryKind::Device, "k"),
        vc(gpu().ctx, capacity * kv_dim * 2, vk::MemoryKind::Device, "v"),
        mv_y(gpu().ctx, rows * mv_n * 4, vk::MemoryKind::Device, "matvec y");
    ops::Act in(gub, 2 * width), kva(kvb, 2 * kv_dim);
    ops::KvLayer kv{kc, vc, capacity, kv_dim};
    rec.begin();
    rec.fill(vk::BufferRange(kc), 0);
    rec.fill(vk::BufferRange(vc), 0);
    ops::swiglu(oc, in, in.cols(width), ops::Act(sw, width), rows, width);
    ops::add(oc, ab, bb, ab, rows * width);
    ops::copy_rows(oc, ops::Act(ab, width), ops::Act(copy, width), rows, width);
    ops::rope(oc, ops::Act(qb, heads * head_dim), rows, heads, head_dim, ops::IntVec{pbuf}, tbuf, capacity,
              ops::RopePairing::RotateHalf);
    ops::kv_write(oc, kva, kva.cols(kv_dim), rows, ops::IntVec{pbuf}, kv);
    ops::matmul(oc, ops::Act(mv_x, mv_k), mv_w, ops::Act(mv_y, mv_n), rows, false, ops::MatmulPath::Vector);
    rec.submit_and_wait();
    return std::tuple{read_back<float>(sw, rows * width), read_back<float>(copy, rows * width),
                      read_back<float>(qb, q.size()), read_back<uint16_t>(kc, capacity * kv_dim),
                      read_back<uint16_t>(vc, capacity * kv_dim), read_back<float>(mv_y, rows * mv_n)};
  };
  const auto want = run_all();
  {
    WorkgroupLimit limit(3);  // swiglu's 33 groups become 3 x 11, rope's 14 become 3 x 5, ...
    EXPECT_EQ(ops::linear_grid(gpu().ctx, uint64_t(rows) * width, 64, "t").y, 11u);
    const auto got = run_all();
    EXPECT_EQ(std::get<0>(got), std::get<0>(want)) << "swiglu";
    EXPECT_EQ(std::get<1>(got), std::get<1>(want)) << "add, copy_rows";
    EXPECT_EQ(std::get<2>(got), std::get<2>(want)) << "rope";
    EXPECT_EQ(std::get<3>(got), std::get<3>(want)) << "kv_write k";
    EXPECT_EQ(std::get<4>(got), std::get<4>(want)) << "kv_write v";
    EXPECT_EQ(std::get<5>(got), std::get<5>(want)) << "matvec";
  }
  // A grid that cannot hold the work, and a dispatch beyond the limit, are errors.
  WorkgroupLimit tiny(3, 2);
  vk::Buffer gub = device_buffer(gu, "gate_up"), sw(gpu().ctx, rows * width * 4, vk::MemoryKind::Device, "swiglu");
  ops::Act in(gub, 2 * width);
  rec.begin();
  try {
    ops::swiglu(oc, in, in.cols(width), ops::Act(sw, width), rows, width);
    ADD_FAILURE() << "33 workgroups fit a 3 x 2 grid";
  } catch (const eaglevk::Error& e) {
    EXPECT_NE(std::string(e.what()).find("swiglu: 33 workgroups do not fit the device's grid of 3 x 2"),
              std::string::npos)
        << e.what();
  }
  try {
    ops::softmax(oc, ops::Act(sw, width), 5, width);  // one workgroup per row
    ADD_FAILURE() << "5 workgroups along x passed a limit of 3";
  } catch (const eaglevk::Error& e) {
    EXPECT_NE(std::string(e.what()).find("5 workgroups in dimension x exceed the device's maxComputeWorkGroupCount 3"),
              std::string::npos)
        << e.what();
  }
  rec.submit_and_wait();
}

TEST_F(OpsTest, SoftmaxWithTemperature) {
  const uint32_t rows = 3, n = 4099;
  auto x = random_floats(size_t(rows) * n, 91, -10, 10);
  vk::Buffer xb = device_buffer(x, "x");
  rec.begin();
  ops::softmax(oc, ops::Act(xb, n), rows, n, 1.0f / 0.7f);
  rec.submit_and_wait();
  EXPECT_TRUE(all_close(read_back<float>(xb, x.size()), ref_softmax(x, rows, n, 1.0f / 0.7f), 1e-8, 1e-5));
}

TEST_F(OpsTest, ArgmaxOverLargeVocabularyWithTies) {
  const uint32_t n = 202048, rows = 4;
  auto x = random_floats(size_t(rows) * n, 101);
  x[size_t(0) * n + n - 1] = 5.0f;                                   // maximum at the last index
  x[size_t(1) * n + 7] = 4.0f, x[size_t(1) * n + 150000] = 4.0f;     // a tie: lowest index wins
  x[size_t(2) * n + 0] = 3.0f;                                       // maximum at index 0
  for (uint32_t i = 0; i < n; ++i) x[size_t(3) * n + i] = 1.0f;      // all equal: index 0
  std::vector<int32_t> d2t(n, 0);
  d2t[7] = 100;
  vk::Buffer xb = device_buffer(x, "x"), ids(gpu().ctx, rows * 4, vk::MemoryKind::Device, "ids"),
             mapped(gpu().ctx, rows * 4, vk::MemoryKind::Device, "mapped"), db = device_buffer(d2t, "d2t");
  vk::BufferRange dr(db);
  rec.begin();
  ops::argmax(oc, ops::Act(xb, n), rows, n, ops::IntVec{ids});
  ops::argmax(oc, ops::Act(xb, n), rows, n, ops::IntVec{mapped}, &dr);
  rec.submit_and_wait();
  auto want = ref_argmax(x, rows, n);
  EXPECT_EQ(want, (std::vector<int32_t>{int32_t(n - 1), 7, 0, 0}));
  EXPECT_EQ(read_back<int32_t>(ids, rows), want);
  EXPECT_EQ(read_back<int32_t>(mapped, rows), (std::vector<int32_t>{int32_t(n - 1), 107, 0, 0}));
}

// A row holding a NaN or an infinity (anywhere: first, last, middle; all NaN) has no argmax:
// the kernel writes NON_FINITE_ROW_ID, unmapped by d2t; finite rows, extremes included, are
// untouched. Before, NaN compared false and an all-NaN row gave token 0.
TEST_F(OpsTest, ArgmaxMarksNonFiniteRows) {
  const uint32_t n = 4099, rows = 6;
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  auto x = random_floats(size_t(rows) * n, 103);
  x[size_t(0) * n + 17] = nan;
  for (uint32_t i = 0; i < n; ++i) x[size_t(1) * n + i] = nan;
  x[size_t(2) * n + n - 1] = inf;
  x[size_t(3) * n + 0] = -inf;
  x[size_t(4) * n + 9] = std::numeric_limits<float>::max();
  x[size_t(4) * n + 10] = -std::numeric_limits<float>::max();
  x[size_t(5) * n + 3] = std::numeric_limits<float>::denorm_min();
  std::vector<int32_t> d2t(n, 5);
  vk::Buffer xb = device_buffer(x, "x"), ids(gpu().ctx, rows * 4, vk::MemoryKind::Device, "ids"),
             mapped(gpu().ctx, rows * 4, vk::MemoryKind::Device, "mapped"), db = device_buffer(d2t, "d2t");
  vk::BufferRange dr(db);
  rec.begin();
  ops::argmax(oc, ops::Act(xb, n), rows, n, ops::IntVec{ids});
  ops::argmax(oc, ops::Act(xb, n), rows, n, ops::IntVec{mapped}, &dr);
  rec.submit_and_wait();
  // The reference: -1 where std::isfinite fails anywhere in the row, else the plain argmax.
  std::vector<int32_t> want = ref_argmax(x, rows, n), want_mapped(rows);
  for (uint32_t r = 0; r < rows; ++r) {
    for (uint32_t i = 0; i < n; ++i)
      if (!std::isfinite(x[size_t(r) * n + i])) want[r] = NON_FINITE_ROW_ID;
    want_mapped[r] = want[r] == NON_FINITE_ROW_ID ? want[r] : want[r] + 5;
  }
  EXPECT_EQ(want, (std::vector<int32_t>{-1, -1, -1, -1, 9, want[5]}));
  EXPECT_EQ(read_back<int32_t>(ids, rows), want);
  EXPECT_EQ(read_back<int32_t>(mapped, rows), want_mapped);
}

}  // namespace
}  // namespace eaglevk::testing
