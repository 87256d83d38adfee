// The Llama-4 vision encoder's ops against plain C++ references written here from the
// formulas of vision-spec.md §3: LayerNorm, bias add (and the per-position table), exact GELU,
// bidirectional tile attention, the 2-D RoPE table through the rope op, the pixel shuffle
// (against Hugging Face's view/permute sequence replayed on indices) and the patch unfold.
#include <cmath>

#include <eaglevk/error.h>

#include "models/llama4_vision.h"
#include "runtime/ops/ops.h"
#include "support/gpu_fixture.h"
#include "support/reference.h"

namespace eaglevk::testing {
namespace {

struct VisionOpsTest : GpuTest {
  vk::Recorder rec{gpu().ctx};
  ops::OpContext oc{gpu(), rec};
};

vk::Buffer empty_buffer(size_t floats, const char* name) {
  return vk::Buffer(gpu().ctx, floats * 4, vk::MemoryKind::Device, name);
}

// At the workgroup of CPU devices (8) and of GPUs (512).
TEST_F(VisionOpsTest, LayerNormMatchesReference) {
  const uint32_t device_wg = gpu().norm_workgroup;
  for (uint32_t wg : {8u, 512u})
  for (uint32_t dim : {64u, 88u, 1408u}) {
    if (!workgroup_runs_here(wg)) continue;
    SCOPED_TRACE(::testing::Message() << "workgroup " << wg);
    gpu().norm_workgroup = wg;
    const uint32_t rows = 7;
    // An offset mean, as encoder activations have: a one-pass variance would lose digits here.
    auto x = random_floats(size_t(rows) * dim, 3 + dim, 4.0f, 6.0f);
    auto w = random_floats(dim, 5, 0.5f, 1.5f), b = random_floats(dim, 6, -0.2f, 0.2f);
    vk::Buffer xb = device_buffer(x, "x"), wb = device_buffer(w, "w"), bb = device_buffer(b, "b"),
               y = empty_buffer(x.size(), "y");
    rec.begin();
    ops::layer_norm(oc, ops::Act(xb, dim), wb, bb, ops::Act(y, dim), rows, dim, 1e-5f);
    rec.submit_and_wait();
    std::vector<double> want(x.size());
    for (uint32_t r = 0; r < rows; ++r) {
      double mean = 0, var = 0;
      for (uint32_t c = 0; c < dim; ++c) mean += x[r * dim + c];
      mean /= dim;
      for (uint32_t c = 0; c < dim; ++c) var += (x[r * dim + c] - mean) * (x[r * dim + c] - mean);
      var /= dim;
      for (uint32_t c = 0; c < dim; ++c)
        want[r * dim + c] = (x[r * dim + c] - mean) / std::sqrt(var + 1e-5) * w[c] + b[c];
    }
    EXPECT_TRUE(all_close(read_back<float>(y, x.size()), want, 2e-5, 2e-5)) << dim;
  }
  gpu().norm_workgroup = device_wg;
}

TEST_F(VisionOpsTest, BiasAddWithPeriodAndGelu) {
  const uint32_t rows = 11, width = 37, stride = 50, offset = 5, period = 4;
  auto x = random_floats(size_t(rows) * stride + offset, 11, -6.0f, 6.0f);
  auto bias = random_floats(size_t(period) * width, 12);
  vk::Buffer x1 = device_buffer(x, "x1"), x2 = device_buffer(x, "x2"), x3 = device_buffer(x, "x3"),
             bb = device_buffer(bias, "bias");
  rec.begin();
  ops::add_bias(oc, ops::Act(x1, stride, offset), rows, width, bb, period);
  ops::add_bias(oc, ops::Act(x2, stride, offset), rows, width, bb, 1, /*gelu=*/true);
  ops::gelu(oc, ops::Act(x3, stride, offset), rows, width);
  rec.submit_and_wait();
  auto gelu = [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); };
  std::vector<double> want1(x.begin(), x.end()), want2 = want1, want3 = want1;
  for (uint32_t r = 0; r < rows; ++r)
    for (uint32_t c = 0; c < width; ++c) {
      const size_t at = offset + size_t(r) * stride + c;
      want1[at] = double(x[at]) + bias[(r % period) * width + c];
      want2[at] = gelu(double(x[at]) + bias[c]);
      want3[at] = gelu(x[at]);
    }
  // Columns outside [0, width) of each row stay as they were (compared exactly via want = x).
  EXPECT_TRUE(all_close(read_back<float>(x1, x.size()), want1, 1e-6, 1e-6));
  EXPECT_TRUE(all_close(read_back<float>(x2, x.size()), want2, 1e-6, 2e-6));
  EXPECT_TRUE(all_close(read_back<float>(x3, x.size()), want3, 1e-6, 2e-6));
}

TEST_F(VisionOpsTest, TileAttentionIsBidirectionalWithinEachTile) {
  for (uint32_t head_dim : {32u, 88u}) {
    const uint32_t tiles = 3, seq = 17, heads = 2, D = heads * head_dim, rows = tiles * seq;
    auto qkv = random_floats(size_t(rows) * 3 * D, 20 + head_dim, -2.0f, 2.0f);
    vk::Buffer in = device_buffer(qkv, "qkv"), out = empty_buffer(size_t(rows) * D, "out");
    const float scale = 1.0f / std::sqrt(float(head_dim));
    rec.begin();
    ops::vision_attention(oc, ops::Act(in, 3 * D), ops::Act(out, D), rows, seq, heads, head_dim, scale);
    rec.submit_and_wait();
    std::vector<double> want(size_t(rows) * D);
    for (uint32_t r = 0; r < rows; ++r)
      for (uint32_t h = 0; h < heads; ++h) {
        const uint32_t first = r / seq * seq;
        std::vector<double> p(seq);
        double m = -1e300, total = 0;
        for (uint32_t j = 0; j < seq; ++j) {
          double s = 0;
          for (uint32_t d = 0; d < head_dim; ++d)
            s += double(qkv[size_t(r) * 3 * D + h * head_dim + d]) * qkv[size_t(first + j) * 3 * D + D + h * head_dim + d];
          p[j] = s * scale;
          m = std::max(m, p[j]);
        }
        for (double& v : p) total += (v = std::exp(v - m));
        for (uint32_t d = 0; d < head_dim; ++d) {
          double acc = 0;
          for (uint32_t j = 0; j < seq; ++j) acc += p[j] * qkv[size_t(first + j) * 3 * D + 2 * D + h * head_dim + d];
          want[size_t(r) * D + h * head_dim + d] = acc / total;
        }
      }
    EXPECT_TRUE(all_close(read_back<float>(out, want.size()), want, 1e-5, 1e-5)) << head_dim;
  }
}

TEST_F(VisionOpsTest, TwoDimensionalRopeTurnsColumnsThenRows) {
  // A 4x4-patch tile (the tiny model) and a 6x6 one with Scout's head_dim of 88.
  for (auto [side, head_dim] : {std::pair{4u, 32u}, std::pair{6u, 88u}}) {
    const uint32_t N = side * side, seq = N + 1, tiles = 2, rows = tiles * seq, heads = 3;
    std::vector<float> table = models::vision_rope_table(side, head_dim, 10000.0f);
    std::vector<int32_t> pos(rows);
    for (uint32_t r = 0; r < rows; ++r) pos[r] = int32_t(r % seq);
    auto x = random_floats(size_t(rows) * heads * head_dim, 30 + side);
    vk::Buffer xb = device_buffer(x, "x"), tb = device_buffer(table, "table"), pb = device_buffer(pos, "pos");
    rec.begin();
    ops::rope(oc, ops::Act(xb, heads * head_dim), rows, heads, head_dim, ops::IntVec{pb}, tb, seq,
              ops::RopePairing::Interleaved);
    rec.submit_and_wait();
    // The spec's rule, in double: pair j < hd/4 by (x + 1) f_j, the rest by (y + 1) f_(j - hd/4).
    std::vector<double> want(x.begin(), x.end());
    const uint32_t quarter = head_dim / 4;
    for (uint32_t r = 0; r < rows; ++r) {
      const uint32_t n = r % seq;
      if (n == N) continue;  // the class token keeps its values
      for (uint32_t h = 0; h < heads; ++h)
        for (uint32_t j = 0; j < head_dim / 2; ++j) {
          const uint32_t i = j % quarter;
          const double f = std::pow(10000.0, -2.0 * i / (head_dim / 2.0));
          const double angle = double((j < quarter ? n % side : n / side) + 1) * f;
          const size_t a = size_t(r) * heads * head_dim + h * head_dim + 2 * j;
          want[a] = x[a] * std::cos(angle) - x[a + 1] * std::sin(angle);
          want[a + 1] = x[a + 1] * std::cos(angle) + x[a] * std::sin(angle);
        }
    }
    EXPECT_TRUE(all_close(read_back<float>(xb, x.size()), want, 5e-6, 5e-6)) << side;
  }
}

// Hugging Face's pixel_shuffle (ratio 0.5) as the sequence of views and permutes it is, replayed
// on element indices of one tile [N, D]: returns, for every output element (token k, column
// c4 of 4 D), the input (patch, channel) it holds.
std::vector<std::pair<uint32_t, uint32_t>> hf_pixel_shuffle_sources(uint32_t side, uint32_t D) {
  // x.view(s, s, D) -> view(s, s/2, 2D) -> permute(1, 0, 2) -> view(s/2, s/2, 4D) -> permute(1, 0, 2)
  // -> view(N/4, 4D). Each view of a contiguous tensor keeps flat indices; each permute swaps
  // the first two axes of the element's coordinates.
  const uint32_t half = side / 2;
  std::vector<std::pair<uint32_t, uint32_t>> out;
  for (uint32_t k = 0; k < half * half; ++k)
    for (uint32_t c4 = 0; c4 < 4 * D; ++c4) {
      // Output [h2][w2][c4] = permuted B[w2][h2][c4]; B is the contiguous view [s/2][s/2][4D]
      // of A, so its flat index is (w2 * half + h2) * 4D + c4, read as A [s/2][s][2D].
      const uint32_t h2 = k / half, w2 = k % half;
      const uint64_t flat_b = (uint64_t(w2) * half + h2) * 4 * D + c4;
      const uint32_t a0 = uint32_t(flat_b / (uint64_t(side) * 2 * D)), a1 = uint32_t(flat_b / (2 * D) % side),
                     a2 = uint32_t(flat_b % (2 * D));
      // A[w'][h][c2] = the first view X [s][s/2][2D] at [h][w'][c2]: flat (h * half + w') * 2D + c2
      // of the input [s][s][D].
      const uint64_t flat_x = (uint64_t(a1) * half + a0) * 2 * D + a2;
      out.push_back({uint32_t(flat_x / D), uint32_t(flat_x % D)});
    }
  return out;
}

TEST_F(VisionOpsTest, PixelShuffleRowsEqualHuggingFacesReshapes) {
  for (uint32_t side : {4u, 24u}) {
    const uint32_t N = side * side, D = 3, tiles = 2;
    std::vector<int32_t> rows = models::pixel_shuffle_rows(tiles, side);
    ASSERT_EQ(rows.size(), size_t(tiles) * N);
    auto hf = hf_pixel_shuffle_sources(side, D);
    for (uint32_t t = 0; t < tiles; ++t)
      for (uint32_t k = 0; k < N / 4; ++k)
        for (uint32_t c4 = 0; c4 < 4 * D; ++c4) {
          // Our gather writes [tiles N, D] rows: output token k's columns [q D, (q + 1) D) are
          // gathered row 4 k + q, taken from encoder row rows[...] (tiles of N + 1 rows).
          const int32_t src = rows[t * N + 4 * k + c4 / D];
          const auto [patch, channel] = hf[size_t(k) * 4 * D + c4];
          ASSERT_EQ(src, int32_t(t * (N + 1) + patch)) << side << " " << k << " " << c4;
          ASSERT_EQ(c4 % D, channel);
        }
  }
}

TEST_F(VisionOpsTest, UnfoldTakesPatchesRowMajorChannelMajor) {
  const uint32_t tile = 6, patch = 3, tiles = 2, side = tile / patch;
  std::vector<float> pixels(size_t(tiles) * 3 * tile * tile);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = float(i);
  std::vector<float> rows = models::unfold_patches(pixels, tiles, tile, patch);
  ASSERT_EQ(rows.size(), size_t(tiles) * side * side * 3 * patch * patch);
  for (uint32_t t = 0; t < tiles; ++t)
    for (uint32_t n = 0; n < side * side; ++n)
      for (uint32_t c = 0; c < 3; ++c)
        for (uint32_t ky = 0; ky < patch; ++ky)
          for (uint32_t kx = 0; kx < patch; ++kx) {
            const uint32_t y = n / side * patch + ky, x = n % side * patch + kx;
            const float want = pixels[((size_t(t) * 3 + c) * tile + y) * tile + x];
            ASSERT_EQ(rows[(size_t(t) * side * side + n) * 3 * patch * patch + c * patch * patch + ky * patch + kx], want);
          }
  EXPECT_THROW(models::unfold_patches(std::span<const float>(pixels).first(10), tiles, tile, patch), eaglevk::Error);
}

}  // namespace
}  // namespace eaglevk::testing
