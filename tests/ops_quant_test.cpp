// Block-quantized weights (ggml's Q4_0 ... Q6_K, IQ1_S ... IQ4_XS) decoded inside the kernels:
// the matrix-vector kernel, the tiled GEMM, the embedding gather and the MoE indexed matvec.
// Seeded random weights are quantized with testing::quantize (tests/support/quantize.h) (the lattice formats: random blocks);
// the reference is loader::dequantize followed by the plain double-precision loops of
// support/reference.h.
//
// Tolerance, matmuls: |got - want| <= 1e-4 + 1e-4 * |want|. The reference multiplies the same
// decoded floats in double, so what remains is f32 accumulation over K <= 768 products of size
// <= 1, and at most one rounding per decoded weight where a driver fuses d * q + m (the
// reference rounds twice). NegativeControl shows that this catches a one-step error in one
// block's scale. Embedding rows: 1e-6 + 1e-6 * |want| (one rounding of values <= 1).
#include <algorithm>
#include <cstring>
#include <optional>
#include <random>

#include <fmt/format.h>

#include <eaglevk/error.h>

#include "loader/quant.h"
#include "runtime/ops/ops.h"
#include "shaders/shared_constants.h"
#include "support/gpu_fixture.h"
#include "support/quantize.h"
#include "support/reference.h"
#include "support/rope_fold_check.h"

namespace eaglevk::testing {
namespace {

using ops::WeightType;

constexpr double kAtol = 1e-4, kRtol = 1e-4;
constexpr double kEmbedTol = 1e-6;

const WeightType kQuantTypes[] = {WeightType::Q4_0, WeightType::Q4_1, WeightType::Q5_0, WeightType::Q5_1,
                                  WeightType::Q8_0, WeightType::Q2_K, WeightType::Q3_K, WeightType::Q4_K,
                                  WeightType::Q5_K, WeightType::Q6_K, WeightType::IQ4_NL, WeightType::IQ4_XS,
                                  WeightType::IQ1_S, WeightType::IQ1_M, WeightType::IQ2_XXS, WeightType::IQ2_XS,
                                  WeightType::IQ2_S, WeightType::IQ3_XXS, WeightType::IQ3_S, WeightType::MXFP4,
                                  WeightType::FP8_B32, WeightType::INT4_B32};

// The type that runs every vendor's matrix-vector configuration for its load path: Q4_0 for
// the 32-element groups (the blocks of Q4_0 to Q8_0, IQ4_NL and MXFP4, the runs of IQ4_XS and of
// the lattice formats IQ1_S ... IQ3_S: one loop for all),
// Q4_K for the K-quants' 16-element items.
bool path_representative(WeightType t) { return t == WeightType::Q4_0 || t == WeightType::Q4_K; }

loader::DType dtype_of(WeightType t) {
  switch (t) {
    case WeightType::Q4_0: return loader::DType::Q4_0;
    case WeightType::Q4_1: return loader::DType::Q4_1;
    case WeightType::Q5_0: return loader::DType::Q5_0;
    case WeightType::Q5_1: return loader::DType::Q5_1;
    case WeightType::Q8_0: return loader::DType::Q8_0;
    case WeightType::Q2_K: return loader::DType::Q2_K;
    case WeightType::Q3_K: return loader::DType::Q3_K;
    case WeightType::Q4_K: return loader::DType::Q4_K;
    case WeightType::Q5_K: return loader::DType::Q5_K;
    case WeightType::Q6_K: return loader::DType::Q6_K;
    case WeightType::IQ4_NL: return loader::DType::IQ4_NL;
    case WeightType::IQ4_XS: return loader::DType::IQ4_XS;
    case WeightType::IQ1_S: return loader::DType::IQ1_S;
    case WeightType::IQ1_M: return loader::DType::IQ1_M;
    case WeightType::IQ2_XXS: return loader::DType::IQ2_XXS;
    case WeightType::IQ2_XS: return loader::DType::IQ2_XS;
    case WeightType::IQ2_S: return loader::DType::IQ2_S;
    case WeightType::IQ3_XXS: return loader::DType::IQ3_XXS;
    case WeightType::IQ3_S: return loader::DType::IQ3_S;
    case WeightType::MXFP4: return loader::DType::MXFP4;
    case WeightType::FP8_B32: return loader::DType::FP8_B32;
    case WeightType::INT4_B32: return loader::DType::INT4_B32;
    default: break;
  }
  ADD_FAILURE() << "not a block type";
  return loader::DType::F32;
}

bool k_quant(WeightType t) { return ops::weight_type_block_elements(t) == 256; }
// One block, and several blocks, of a row.
uint32_t one_block(WeightType t) { return ops::weight_type_block_elements(t); }
uint32_t several_blocks(WeightType t) { return k_quant(t) ? 768 : 96; }

// A [rows, cols] matrix in a block format: the bytes as a GGUF file stores them and the floats
// they decode to.
struct QuantMatrix {
  std::vector<std::byte> blocks;
  std::vector<float> values;
};

std::vector<float> decode(WeightType t, const std::vector<std::byte>& blocks, size_t count) {
  std::vector<float> out(count);
  loader::dequantize(dtype_of(t), blocks.data(), out);
  return out;
}

// The lattice formats (IQ1_S ... IQ3_S) have no quantizer here (llama-quantize's needs an
// importance matrix); any bytes are a valid block of them, so their test matrices are random
// bytes with the f16 d of each super-block set to a positive value that keeps the decoded weights
// within about +-1 (d times the format's largest scale-times-magnitude). Random indices and signs
// reach every grid entry, which real files' blocks would not.
bool lattice_format(WeightType t) {
  return t == WeightType::IQ1_S || t == WeightType::IQ1_M || t == WeightType::IQ2_XXS || t == WeightType::IQ2_XS ||
         t == WeightType::IQ2_S || t == WeightType::IQ3_XXS || t == WeightType::IQ3_S;
}

std::vector<std::byte> random_lattice_blocks(WeightType t, size_t blocks, uint32_t seed) {
  const uint32_t bytes = ops::weight_type_block_bytes(t);
  const float largest = t == WeightType::IQ1_S || t == WeightType::IQ1_M ? 15 * 1.125f
                        : t == WeightType::IQ3_XXS                       ? 62 * 15.5f * 0.5f
                        : t == WeightType::IQ3_S                         ? 15 * 31.0f
                                                                         : 43 * 15.5f * 0.25f;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> size(0.3f, 1.0f);
  std::vector<std::byte> out(blocks * bytes);
  for (auto& b : out) b = std::byte(rng() & 0xFF);
  for (size_t i = 0; i < blocks; ++i) {
    std::byte* block = out.data() + i * bytes;
    const uint16_t d = loader::f32_to_f16(size(rng) / largest);
    if (t == WeightType::IQ1_M) {  // d's four nibbles are the top nibbles of the scales' four u16
      for (int j = 0; j < 4; ++j)
        block[49 + 2 * j] = std::byte((uint8_t(block[49 + 2 * j]) & 0x0F) | (((d >> (4 * j)) & 0xF) << 4));
    } else {
      std::memcpy(block, &d, 2);
    }
  }
  return out;
}

// FP8 blocks of random codes, so that every code is met (subnormals and +-448 too, which
// blocks quantized from random floats hardly reach), NaN codes excepted (the loader refuses
// them), with a positive f32 scale that keeps the values within about +-1.
std::vector<std::byte> random_fp8_blocks(size_t blocks, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> size(0.3f, 1.0f);
  std::vector<std::byte> out(blocks * 36);
  for (size_t i = 0; i < blocks; ++i) {
    const float d = size(rng) / 448.0f;
    std::memcpy(out.data() + i * 36, &d, 4);
    for (int j = 0; j < 32; ++j) {
      uint8_t code = uint8_t(rng() & 0xFF);
      if ((code & 0x7F) == 0x7F) code ^= 1;  // NaN -> +-448
      out[i * 36 + 4 + j] = std::byte(code);
    }
  }
  return out;
}

QuantMatrix quantized(WeightType t, uint32_t rows, uint32_t cols, uint32_t seed) {
  QuantMatrix m;
  if (t == WeightType::FP8_B32)
    m.blocks = random_fp8_blocks(size_t(rows) * cols / 32, seed);
  else if (lattice_format(t))
    m.blocks = random_lattice_blocks(t, size_t(rows) * cols / ops::weight_type_block_elements(t), seed);
  else
    testing::quantize(dtype_of(t), random_floats(size_t(rows) * cols, seed), m.blocks);
  EXPECT_EQ(m.blocks.size(), rows * ops::weight_row_bytes(t, cols));
  m.values = decode(t, m.blocks, size_t(rows) * cols);
  return m;
}

// Lowers the binding limit for one test and restores it even when the test throws.
struct BindingLimit {
  uint64_t saved;
  explicit BindingLimit(uint64_t bytes) : saved(gpu().ctx.max_binding_range) { gpu().ctx.max_binding_range = bytes; }
  ~BindingLimit() { gpu().ctx.max_binding_range = saved; }
};

struct QuantTest : GpuTest {
  vk::Recorder rec{gpu().ctx};
  ops::OpContext oc{gpu(), rec};
};

ops::WeightMatrix upload(vk::Buffer& storage, const QuantMatrix& m, WeightType t, uint32_t rows, uint32_t cols) {
  storage = device_buffer(m.blocks, "quantized weights");
  return ops::WeightMatrix{vk::BufferRange(storage), t, rows, cols};
}

// ---- matmul: matrix-vector (decode, verify) and tiled GEMM (prefill) ------------------

struct QuantMatmulCase {
  WeightType type;
  uint32_t rows, n, k;
  ops::MatmulPath path;
};

class QuantMatmulTest : public QuantTest, public ::testing::WithParamInterface<QuantMatmulCase> {};

TEST_P(QuantMatmulTest, MatchesDequantizedReference) {
  auto [type, rows, n, k, path] = GetParam();
  auto x = random_floats(size_t(rows) * k, 1 + rows);
  auto bias = random_floats(size_t(rows) * n, 3);
  QuantMatrix w = quantized(type, n, k, 2 + n + k);
  vk::Buffer wbuf;
  auto weights = upload(wbuf, w, type, n, k);
  vk::Buffer xbuf = device_buffer(x, "x"), ybuf = device_buffer(bias, "y");
  expect_matmul_in_every_configuration(oc, xbuf, weights, ybuf, bias, ref_matmul(x, w.values, rows, n, k), rows, n, k,
                                       path, kAtol, kRtol, path_representative(type));
}

std::vector<QuantMatmulCase> quant_matmul_cases() {
  std::vector<QuantMatmulCase> cases;
  for (WeightType t : kQuantTypes) {
    // Matrix-vector: decode (1 row) and verify passes (3, 8 rows). Each row count is a kernel
    // of its own (matvec.comp's ROWS) that llvmpipe compiles in about a second: 3 rows on one
    // type per load path.
    cases.push_back({t, 1, 13, one_block(t), ops::MatmulPath::Auto});
    if (path_representative(t)) cases.push_back({t, 3, 17, several_blocks(t), ops::MatmulPath::Auto});
    cases.push_back({t, 8, 61, several_blocks(t), ops::MatmulPath::Auto});
    cases.push_back({t, 8, 13, one_block(t), ops::MatmulPath::Auto});
    // Tiled GEMM: partial tiles in m and n.
    cases.push_back({t, 9, 61, several_blocks(t), ops::MatmulPath::Auto});
    cases.push_back({t, 33, 17, one_block(t), ops::MatmulPath::Auto});
    cases.push_back({t, 70, 130, several_blocks(t), ops::MatmulPath::Auto});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Shapes, QuantMatmulTest, ::testing::ValuesIn(quant_matmul_cases()), [](const auto& info) {
  const QuantMatmulCase& c = info.param;
  return fmt::format("{}_r{}_n{}_k{}", ops::weight_type_name(c.type), c.rows, c.n, c.k);
});

// A verify pass of up to 8 rows must give each row the bits a one-row decode step gives it.
TEST_F(QuantTest, MatvecIsBatchInvariant) {
  const std::vector<VendorMatvecShape> configs = vendor_matvec_shapes();
  for (size_t c = 0; c < configs.size(); ++c)
  for (WeightType t : kQuantTypes) {
    const VendorMatvecShape& config = configs[c];
    // NVIDIA's and AMD/Intel's workgroup shapes (after lavapipe's two) on one type per load
    // path (see path_representative), lavapipe's on all.
    if (c >= 2 && !path_representative(t)) continue;
    MatvecShapeScope scope(config.shape);
    SCOPED_TRACE(config.name);
    const uint32_t n = 61, k = several_blocks(t);
    QuantMatrix w = quantized(t, n, k, 7);
    vk::Buffer wbuf;
    auto weights = upload(wbuf, w, t, n, k);
    for (uint32_t rows : {3u, 8u}) {
      if (rows == 3 && !path_representative(t)) continue;  // a kernel per row count: see above
      EXPECT_TRUE(rows_match_one_row_products(oc, random_floats(size_t(rows) * k, 8 + rows), weights, rows, n, k))
          << ops::weight_type_name(t) << " rows " << rows;
    }
  }
}

// Outputs per workgroup chosen for several rows (MatvecShape::rows_outs: 1, 3 and 8) keep every
// row's decode-step bits, on the two block paths (Q4_0's 32-element groups, Q4_K's items) in
// NVIDIA's configuration: 61 outputs (partial workgroups), Q4_K's product split over subgroups
// (from 64 columns, as the profile's shapes=gpu runs it), Q4_0's one subgroup-sized workgroup each.
TEST_F(QuantTest, MatvecRowsOutsKeepTheDecodeBits) {
  const uint32_t n = 61;
  for (WeightType t : {WeightType::Q4_0, WeightType::Q4_K}) {
    ops::MatvecShape shape = vendor_matvec_shapes()[2].shape;
    if (t == WeightType::Q4_K) shape.split_min_cols = 64;
    const uint32_t k = several_blocks(t);
    QuantMatrix w = quantized(t, n, k, 71);
    vk::Buffer wbuf;
    auto weights = upload(wbuf, w, t, n, k);
    for (uint32_t rows_outs : {1u, 3u, 8u}) {
      shape.rows_outs = rows_outs;
      MatvecShapeScope scope(shape);
      for (uint32_t rows : {3u, 8u}) {
        SCOPED_TRACE(fmt::format("{} rows_outs {} rows {} workgroup {}", ops::weight_type_name(t), rows_outs, rows,
                                 ops::matvec_shape(gpu(), weights).workgroup));
        EXPECT_TRUE(rows_match_one_row_products(oc, random_floats(size_t(rows) * k, 72 + rows), weights, rows, n, k));
      }
    }
  }
}

// Texel loads (lavapipe) and storage-buffer loads (every other device) add in the same order,
// and so do other outputs per workgroup, on Q4_0 (the 32-element block path of Q4_0 to Q8_0)
// and Q4_K (the K-quant item path); 29 rows leave the last workgroup a partial set.
TEST_F(QuantTest, MatvecLoadVariantsGiveTheSameBits) {
  for (WeightType t : kQuantTypes) {
    const uint32_t n = 29, k = 1280;
    QuantMatrix w = quantized(t, n, k, 23);
    vk::Buffer wbuf;
    expect_load_variants_give_the_same_bits(oc, upload(wbuf, w, t, n, k), 24, path_representative(t));
  }
}

// SwiGLU folded into the gate/up product gives the bits of the product and then swiglu, on Q4_0
// (the 32-element block path) and Q4_K (the K-quant items) in every vendor's configuration; 29
// pairs leave the last workgroup a partial set.
TEST_F(QuantTest, SwigluFoldedIntoTheGateUpProductGivesTheSameBits) {
  for (WeightType t : {WeightType::Q4_0, WeightType::Q4_K}) {
    const uint32_t n = 2 * 29, k = several_blocks(t);
    QuantMatrix w = quantized(t, n, k, 29);
    vk::Buffer wbuf;
    expect_swiglu_fusion_gives_the_bits(oc, upload(wbuf, w, t, n, k), 30, true);
  }
}

// rope_kv_write folded into the q | k | v product gives the bits of the product then rope_kv_write
// for a matrix stored as llama.cpp's Q4_K_M stores it: q | k in Q4_K (the K-quant items), v in
// Q6_K; and for Q8_0 (the 32-element block path; no rotation too), in lavapipe's configuration and
// NVIDIA's.
TEST_F(QuantTest, RopeKvWriteFoldedIntoTheQkvProductGivesTheSameBits) {
  const uint32_t k = 256, q_heads = 4, kv_heads = 2, head_dim = 32, qk_rows = (q_heads + kv_heads) * head_dim;
  const std::vector<VendorMatvecShape> vendors = vendor_matvec_shapes();
  const std::vector<VendorMatvecShape> configs = {vendors[0], vendors[2]};
  vk::Buffer qk_buf, v_buf, q8_buf;
  const QuantMatrix qk = quantized(WeightType::Q4_K, qk_rows, k, 31), v = quantized(WeightType::Q6_K, kv_heads * head_dim, k, 32);
  expect_rope_fold_gives_the_bits(oc,
                                  {{upload(qk_buf, qk, WeightType::Q4_K, qk_rows, k), 0},
                                   {upload(v_buf, v, WeightType::Q6_K, kv_heads * head_dim, k), qk_rows}},
                                  k, q_heads, kv_heads, head_dim, {1, 3}, configs, false);
  const uint32_t width = qk_rows + kv_heads * head_dim;
  const QuantMatrix q8 = quantized(WeightType::Q8_0, width, k, 33);
  expect_rope_fold_gives_the_bits(oc, {{upload(q8_buf, q8, WeightType::Q8_0, width, k), 0}}, k, q_heads, kv_heads,
                                  head_dim, {2}, configs, false,
                                  {ops::RopePairing::RotateHalf, ops::RopePairing::Interleaved, ops::RopePairing::None});
}

// Weights above the binding limit are bound in row chunks: a 16 KiB limit splits a 200-row
// matrix (30 KB in IQ1_S to 163 KB in Q8_0) into several, for matvec, GEMM and the embedding
// gather.
TEST_F(QuantTest, SplitAboveTheBindingLimit) {
  const uint32_t n = 200, k = 768;
  BindingLimit limit(16 * 1024);
  for (WeightType t : kQuantTypes) {
    QuantMatrix w = quantized(t, n, k, 11);
    vk::Buffer wbuf;
    auto weights = upload(wbuf, w, t, n, k);
    EXPECT_LT(weights.chunk_rows(gpu().ctx.max_binding_range, gpu().ctx.info.features.min_storage_buffer_offset_alignment),
              n);
    std::vector<int32_t> ids = {199, 0, 117, 64};
    for (uint32_t rows : {3u, 9u}) {
      auto x = random_floats(size_t(rows) * k, 12 + rows);
      vk::Buffer xbuf = device_buffer(x, "x"), ybuf(gpu().ctx, rows * n * 4, vk::MemoryKind::Device, "y");
      rec.begin();
      ops::matmul(oc, ops::Act(xbuf, k), weights, ops::Act(ybuf, n), rows);
      rec.submit_and_wait();
      EXPECT_TRUE(all_close(read_back<float>(ybuf, rows * n), ref_matmul(x, w.values, rows, n, k), kAtol, kRtol))
          << ops::weight_type_name(t) << " rows " << rows;
    }
    vk::Buffer idbuf = device_buffer(ids, "ids"), ebuf(gpu().ctx, ids.size() * k * 4, vk::MemoryKind::Device, "e");
    rec.begin();
    ops::embed(oc, ops::IntVec{idbuf}, uint32_t(ids.size()), weights, ops::Act(ebuf, k));
    rec.submit_and_wait();
    std::vector<double> want;
    for (int32_t id : ids) want.insert(want.end(), w.values.begin() + size_t(id) * k, w.values.begin() + size_t(id + 1) * k);
    EXPECT_TRUE(all_close(read_back<float>(ebuf, ids.size() * k), want, kEmbedTol, kEmbedTol))
        << ops::weight_type_name(t) << " embed";
  }
}

// ---- embedding ------------------------------------------------------------------------

TEST_F(QuantTest, EmbeddingGathersRows) {
  const uint32_t vocab = 97;
  std::vector<int32_t> ids = {0, 96, 5, 5, 50, 17};
  for (WeightType t : kQuantTypes) {
    const uint32_t dim = several_blocks(t);
    QuantMatrix table = quantized(t, vocab, dim, 21);
    vk::Buffer tbuf;
    auto weights = upload(tbuf, table, t, vocab, dim);
    vk::Buffer idbuf = device_buffer(ids, "ids"), out(gpu().ctx, ids.size() * dim * 2 * 4, vk::MemoryKind::Device, "out");
    rec.begin();
    // Into the second half of [tokens, 2 * dim] rows, as the draft's concat buffer is written.
    ops::embed(oc, ops::IntVec{idbuf}, uint32_t(ids.size()), weights, ops::Act(out, 2 * dim, dim));
    rec.submit_and_wait();
    auto got = read_back<float>(out, ids.size() * dim * 2);
    std::vector<float> half;
    std::vector<double> want;
    for (size_t i = 0; i < ids.size(); ++i) {
      half.insert(half.end(), got.begin() + i * 2 * dim + dim, got.begin() + (i + 1) * 2 * dim);
      want.insert(want.end(), table.values.begin() + size_t(ids[i]) * dim,
                  table.values.begin() + size_t(ids[i] + 1) * dim);
    }
    EXPECT_TRUE(all_close(half, want, kEmbedTol, kEmbedTol)) << ops::weight_type_name(t);
  }
}

// ---- MoE indexed matvec ---------------------------------------------------------------

// Each row multiplied by its own expert's weights, for 1, 4 and 9 rows over 4 experts (9 also
// grouped by expert, as a prefill's rows are); then
// again under a 20 KiB binding limit, which splits the experts into one dispatch per expert
// (and, for the larger ones, row chunks inside an expert, where a prefill's grouped GEMM falls
// back to the per-row kernel). 128 rows per expert keep every
// expert's start aligned for its own binding.
TEST_F(QuantTest, MatmulIdPicksEachRowsExpert) {
  const uint32_t experts = 4, n = 128;
  for (WeightType t : kQuantTypes) {
    const uint32_t k = k_quant(t) ? 512 : 96;
    QuantMatrix w = quantized(t, experts * n, k, 31);
    vk::Buffer wbuf = device_buffer(w.blocks, "experts");
    ops::ExpertWeights ew{wbuf, t, experts, n, k, false, {}, 0};
    for (uint32_t rows : {1u, 4u, 9u}) {
      auto x = random_floats(size_t(rows) * k, 32 + rows);
      std::vector<int32_t> ids(rows);
      std::mt19937 rng(33 + rows);
      for (auto& id : ids) id = int32_t(rng() % experts);
      ids[0] = experts - 1;  // the last expert's rows sit at the end of the binding
      std::vector<double> want(size_t(rows) * n);
      for (uint32_t r = 0; r < rows; ++r) {
        std::vector<float> xr(x.begin() + size_t(r) * k, x.begin() + size_t(r + 1) * k);
        std::vector<float> we(w.values.begin() + size_t(ids[r]) * n * k, w.values.begin() + size_t(ids[r] + 1) * n * k);
        auto yr = ref_matmul(xr, we, 1, n, k);
        std::copy(yr.begin(), yr.end(), want.begin() + size_t(r) * n);
      }
      vk::Buffer xbuf = device_buffer(x, "x"), idbuf = device_buffer(ids, "ids"),
                 ybuf(gpu().ctx, size_t(rows) * n * 4, vk::MemoryKind::Device, "y");
      const std::vector<VendorMatvecShape> vendors = vendor_matvec_shapes();
      for (size_t c = 0; c < vendors.size(); ++c)
      for (uint64_t limit : {uint64_t(0), uint64_t(20 * 1024)}) {
        // The lattice formats decode in the 32-element group loop that Q4_0 runs in every
        // vendor's configuration: lavapipe's two suffice for them (each kernel compiles for
        // seconds on llvmpipe).
        if (c >= 2 && lattice_format(t)) continue;
        const VendorMatvecShape& config = vendors[c];
        MatvecShapeScope scope(config.shape);
        std::optional<BindingLimit> lowered;
        if (limit) {
          lowered.emplace(limit);
          EXPECT_GT(uint64_t(experts) * n * ops::weight_row_bytes(t, k), limit);
        }
        rec.begin();
        ops::matmul_id(oc, ops::Act(xbuf, k), ew, ops::IntVec{idbuf}, ops::Act(ybuf, n), rows, 1, 0, false);
        rec.submit_and_wait();
        const std::vector<float> together = read_back<float>(ybuf, want.size());
        EXPECT_TRUE(all_close(together, want, kAtol, kRtol))
            << ops::weight_type_name(t) << " rows " << rows << " binding limit " << limit << " matvec configuration "
            << config.name;
        // Batch invariance: each row alone gets the bits it got among the others (rows of one
        // expert share a workgroup there).
        if (rows == 1) continue;
        rec.begin();
        for (uint32_t r = 0; r < rows; ++r)
          ops::matmul_id(oc, ops::Act(xbuf, k).row(r), ew, ops::IntVec{idbuf, r}, ops::Act(ybuf, n).row(r), 1, 1, 0,
                         false);
        rec.submit_and_wait();
        EXPECT_TRUE(bitwise_equal(read_back<float>(ybuf, want.size()), together))
            << ops::weight_type_name(t) << " rows " << rows << " alone, binding limit " << limit << ", " << config.name;
        // The experts' rows as [gate; up] halves: swiglu folded into the product (where each
        // expert is bound whole) gives the bits of the product then swiglu. For 9 rows only:
        // llvmpipe takes seconds to compile each kernel.
        if (rows != 9) continue;
        vk::Buffer folded(gpu().ctx, size_t(rows) * n / 2 * 4, vk::MemoryKind::Device, "swiglu, folded"),
            apart(gpu().ctx, size_t(rows) * n / 2 * 4, vk::MemoryKind::Device, "swiglu, apart");
        rec.begin();
        ops::matmul_id_swiglu(oc, ops::Act(xbuf, k), ew, ops::IntVec{idbuf}, ops::Act(ybuf, n), ops::Act(folded, n / 2),
                              rows);
        rec.submit_and_wait();
        rec.begin();
        ops::matmul_id(oc, ops::Act(xbuf, k), ew, ops::IntVec{idbuf}, ops::Act(ybuf, n), rows, 1, 0, false);
        ops::swiglu(oc, ops::Act(ybuf, n), ops::Act(ybuf, n).cols(n / 2), ops::Act(apart, n / 2), rows, n / 2);
        rec.submit_and_wait();
        EXPECT_TRUE(bitwise_equal(read_back<float>(folded, size_t(rows) * n / 2),
                                  read_back<float>(apart, size_t(rows) * n / 2)))
            << ops::weight_type_name(t) << " rows " << rows << " swiglu folded, binding limit " << limit << ", "
            << config.name;
      }
      // A prefill's grouping of the rows by expert (more than 8 rows): a GEMM per expert, on the
      // scalar GEMM's two variants and on cooperative matrices where they run.
      if (rows <= MATVEC_MAX_ROWS) continue;
      vk::Buffer lists(gpu().ctx, ops::moe_row_lists_bytes(rows, experts), vk::MemoryKind::Device, "row lists");
      const ops::IntVec row_lists{lists};
      const std::vector<VendorMatvecShape> configs = vendor_matvec_shapes();
      for (int mode = 0; mode < 3; ++mode)
      for (uint64_t limit : {uint64_t(0), uint64_t(20 * 1024)}) {
        if (mode == 2 && !ops::coopmat_unavailable(gpu().ctx).empty()) continue;
        MatvecShapeScope scope(configs[mode == 0 ? 0 : 1].shape);
        CoopmatScope coopmat(mode == 2);
        std::optional<BindingLimit> lowered;
        if (limit) lowered.emplace(limit);
        rec.begin();
        ops::group_rows_by_expert(oc, ops::IntVec{idbuf}, rows, experts, row_lists);
        ops::matmul_id(oc, ops::Act(xbuf, k), ew, ops::IntVec{idbuf}, ops::Act(ybuf, n), rows, 1, 0, false, "experts",
                       &row_lists);
        rec.submit_and_wait();
        EXPECT_TRUE(all_close(read_back<float>(ybuf, want.size()), want, kAtol, kRtol))
            << ops::weight_type_name(t) << " rows " << rows << " grouped, binding limit " << limit << ", "
            << (mode == 0 ? "texel loads" : mode == 1 ? "storage buffers" : "coopmat");
      }
    }
  }
}

// ---- the tolerance catches decoding errors ---------------------------------------------

// Row 0's first block with its scale one step off (the f16 d of the 32-element formats moved
// by 16 units in the last place, about 1.6%, FP8's f32 scale as much; sub-block 0's 6-bit or 8-bit scale of the
// K-quants moved by one): the reference computed from those bytes must fail the comparison.
std::vector<std::byte> perturb_first_scale(WeightType t, std::vector<std::byte> blocks) {
  auto flip = [&](size_t byte, uint8_t mask) { blocks[byte] ^= std::byte{mask}; };
  switch (t) {
    case WeightType::Q2_K: flip(0, 0x01); break;    // scales[0]: group 0's 4-bit scale
    case WeightType::Q3_K: flip(96, 0x01); break;   // scales[0]: group 0's 6-bit scale
    case WeightType::Q4_K:
    case WeightType::Q5_K: flip(4, 0x01); break;    // scales[0]: sub-block 0's 6-bit scale
    case WeightType::Q6_K: flip(192, 0x01); break;  // int8 scales[0]
    case WeightType::IQ1_M: flip(48, 0x01); break;  // group 0's 3-bit scale of runs 0-1
    case WeightType::FP8_B32:
    case WeightType::INT4_B32: flip(2, 0x02); break;  // f32 scale d: mantissa bit 17, about 1.6%
    default: flip(0, 0x10); break;                  // f16 d: mantissa bit 4
  }
  return blocks;
}

TEST_F(QuantTest, NegativeControlPerturbedScaleFails) {
  const uint32_t rows = 3, n = 13;
  for (WeightType t : kQuantTypes) {
    const uint32_t k = one_block(t);
    QuantMatrix w = quantized(t, n, k, 41);
    vk::Buffer wbuf;
    auto weights = upload(wbuf, w, t, n, k);
    auto x = random_floats(size_t(rows) * k, 42);
    vk::Buffer xbuf = device_buffer(x, "x"), ybuf(gpu().ctx, rows * n * 4, vk::MemoryKind::Device, "y");
    rec.begin();
    ops::matmul(oc, ops::Act(xbuf, k), weights, ops::Act(ybuf, n), rows);
    rec.submit_and_wait();
    auto got = read_back<float>(ybuf, rows * n);
    ASSERT_TRUE(all_close(got, ref_matmul(x, w.values, rows, n, k), kAtol, kRtol)) << ops::weight_type_name(t);
    auto wrong = decode(t, perturb_first_scale(t, w.blocks), size_t(n) * k);
    ASSERT_NE(wrong, w.values) << ops::weight_type_name(t) << ": the perturbation changed nothing";
    EXPECT_FALSE(all_close(got, ref_matmul(x, wrong, rows, n, k), kAtol, kRtol))
        << ops::weight_type_name(t) << ": the tolerance does not catch a perturbed block scale";
  }
}

// A quantized row must be a whole number of blocks: anything else is an error, not a crash.
TEST_F(QuantTest, RejectsRowsOfPartialBlocks) {
  vk::Buffer wbuf(gpu().ctx, 4096, vk::MemoryKind::Device, "w"), xbuf(gpu().ctx, 4096, vk::MemoryKind::Device, "x"),
      idbuf = device_buffer(std::vector<int32_t>{0}, "ids");
  ops::WeightMatrix bad{wbuf, WeightType::Q4_K, 4, 320};
  ops::ExpertWeights bad_experts{wbuf, WeightType::Q8_0, 2, 4, 48, false, {}, 0};
  rec.begin();
  EXPECT_THROW(ops::matmul(oc, ops::Act(xbuf, 320), bad, ops::Act(xbuf, 4), 1), eaglevk::Error);
  EXPECT_THROW(ops::embed(oc, ops::IntVec{idbuf}, 1, bad, ops::Act(xbuf, 320)), eaglevk::Error);
  EXPECT_THROW(ops::matmul_id(oc, ops::Act(xbuf, 48), bad_experts, ops::IntVec{idbuf}, ops::Act(xbuf, 4), 1, 1, 0,
                              false),
               eaglevk::Error);
  rec.submit_and_wait();
}

}  // namespace
}  // namespace eaglevk::testing
