// The Llama-4 vision tower at Scout's shapes (336-pixel tiles of 24 x 24 patches, width 1408,
// 16 heads of 88, MLP 5632, adapter 4096, projector to 5120) with one random-weight bf16 layer,
// written at test time: the tower on the device against a plain C++ double-precision
// implementation of vision-spec.md §3 written here (its own unfold, 2-D RoPE angles, softmax,
// GELU and pixel-shuffle indices). It reaches what the tiny model cannot: head_dim 88 (22 x
// and 22 y rotary pairs), 577 rows per tile, a 24 x 24 pixel shuffle, rows of 5632 and 8192.
#include <cmath>
#include <cstring>
#include <map>
#include <filesystem>
#include <random>

#include <fmt/format.h>

#include "loader/safetensors.h"
#include "models/llama4_vision.h"
#include "runtime/engine/prompt_images.h"
#include "runtime/vk/uploader.h"
#include "support/gpu_fixture.h"

namespace eaglevk::testing {
namespace {

namespace fs = std::filesystem;

constexpr uint32_t kTile = 336, kPatch = 14, kSide = 24, kN = kSide * kSide, kS = kN + 1, kD = 1408, kHeads = 16,
                   kHd = 88, kI = 5632, kP = 4096, kText = 5120;

uint16_t to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  bits += 0x7fff + ((bits >> 16) & 1);  // round to nearest even
  return uint16_t(bits >> 16);
}

// Random bf16 tensors under the checkpoint's names, and their values as the model sees them.
struct Weights {
  std::map<std::string, std::vector<float>> values;
  std::vector<loader::TensorData> tensors;
  std::vector<std::vector<uint16_t>> storage;
  std::mt19937 rng{1408};

  void add(const std::string& name, std::vector<int64_t> shape, float mean, float stddev) {
    size_t n = 1;
    for (int64_t d : shape) n *= size_t(d);
    std::normal_distribution<float> dist(mean, stddev);
    std::vector<uint16_t>& bits = storage.emplace_back(n);
    std::vector<float>& v = values[name];
    v.resize(n);
    for (size_t i = 0; i < n; ++i) {
      bits[i] = to_bf16(dist(rng));
      v[i] = loader::bf16_to_f32(bits[i]);
    }
    tensors.push_back({name, loader::DType::BF16, shape, std::as_bytes(std::span(bits))});
  }
  const std::vector<float>& operator[](const std::string& name) const { return values.at(name); }
};

Weights make_weights() {
  Weights w;
  const std::string P = "vision_model.", L = P + "model.layers.0.";
  const float fan_d = 1 / std::sqrt(float(kD));
  w.add(P + "patch_embedding.linear.weight", {kD, 3 * kPatch * kPatch}, 0, 0.02f);
  w.add(P + "class_embedding", {kD}, 0, fan_d);
  w.add(P + "positional_embedding_vlm", {kS, kD}, 0, fan_d);
  for (const char* norm : {"layernorm_pre", "layernorm_post"}) {
    w.add(P + norm + ".weight", {kD}, 1, 0.05f);
    w.add(P + norm + ".bias", {kD}, 0, 0.02f);
  }
  for (const char* norm : {"input_layernorm", "post_attention_layernorm"}) {
    w.add(L + norm + ".weight", {kD}, 1, 0.05f);
    w.add(L + norm + ".bias", {kD}, 0, 0.02f);
  }
  for (const char* proj : {"q_proj", "k_proj", "v_proj", "o_proj"}) {
    w.add(L + "self_attn." + proj + ".weight", {kD, kD}, 0, fan_d);
    w.add(L + "self_attn." + proj + ".bias", {kD}, 0, 0.02f);
  }
  w.add(L + "mlp.fc1.weight", {kI, kD}, 0, fan_d);
  w.add(L + "mlp.fc1.bias", {kI}, 0, 0.02f);
  w.add(L + "mlp.fc2.weight", {kD, kI}, 0, 1 / std::sqrt(float(kI)));
  w.add(L + "mlp.fc2.bias", {kD}, 0, 0.02f);
  w.add(P + "vision_adapter.mlp.fc1.weight", {kP, 4 * kD}, 0, 1 / std::sqrt(float(4 * kD)));
  w.add(P + "vision_adapter.mlp.fc2.weight", {kP, kP}, 0, 1 / std::sqrt(float(kP)));
  w.add("multi_modal_projector.linear_1.weight", {kText, kP}, 0, 0.01f);
  return w;
}

using Rows = std::vector<std::vector<double>>;

// y[r] = x[r] W^T (+ b), W [out][in] row-major.
Rows linear(const Rows& x, const std::vector<float>& w, size_t out, const std::vector<float>* b = nullptr) {
  const size_t in = x[0].size();
  Rows y(x.size(), std::vector<double>(out));
  for (size_t r = 0; r < x.size(); ++r)
    for (size_t o = 0; o < out; ++o) {
      double acc = b ? (*b)[o] : 0.0;
      const float* row = w.data() + o * in;
      for (size_t i = 0; i < in; ++i) acc += x[r][i] * row[i];
      y[r][o] = acc;
    }
  return y;
}

Rows layer_norm(const Rows& x, const std::vector<float>& w, const std::vector<float>& b) {
  Rows y = x;
  for (auto& row : y) {
    double mean = 0, var = 0;
    for (double v : row) mean += v;
    mean /= double(row.size());
    for (double v : row) var += (v - mean) * (v - mean);
    var /= double(row.size());
    for (size_t c = 0; c < row.size(); ++c) row[c] = (row[c] - mean) / std::sqrt(var + 1e-5) * w[c] + b[c];
  }
  return y;
}

double gelu(double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); }

// vision-spec.md §3 for one tile of pixels [3][t][t].
Rows reference_tower(const Weights& w, const float* pixels) {
  const std::string P = "vision_model.", L = P + "model.layers.0.";
  Rows x(kS, std::vector<double>(kD));
  const std::vector<float>& pe = w[P + "patch_embedding.linear.weight"];
  for (uint32_t n = 0; n < kN; ++n) {
    std::vector<double> patch;
    for (uint32_t c = 0; c < 3; ++c)
      for (uint32_t ky = 0; ky < kPatch; ++ky)
        for (uint32_t kx = 0; kx < kPatch; ++kx)
          patch.push_back(pixels[(size_t(c) * kTile + n / kSide * kPatch + ky) * kTile + n % kSide * kPatch + kx]);
    for (uint32_t d = 0; d < kD; ++d) {
      double acc = 0;
      for (size_t i = 0; i < patch.size(); ++i) acc += patch[i] * pe[d * patch.size() + i];
      x[n][d] = acc;
    }
  }
  for (uint32_t d = 0; d < kD; ++d) x[kN][d] = w[P + "class_embedding"][d];
  for (uint32_t n = 0; n < kS; ++n)
    for (uint32_t d = 0; d < kD; ++d) x[n][d] += w[P + "positional_embedding_vlm"][n * kD + d];
  x = layer_norm(x, w[P + "layernorm_pre.weight"], w[P + "layernorm_pre.bias"]);

  Rows h = layer_norm(x, w[L + "input_layernorm.weight"], w[L + "input_layernorm.bias"]);
  Rows q = linear(h, w[L + "self_attn.q_proj.weight"], kD, &w[L + "self_attn.q_proj.bias"]);
  Rows k = linear(h, w[L + "self_attn.k_proj.weight"], kD, &w[L + "self_attn.k_proj.bias"]);
  Rows v = linear(h, w[L + "self_attn.v_proj.weight"], kD, &w[L + "self_attn.v_proj.bias"]);
  for (uint32_t n = 0; n < kN; ++n)  // the class token (row N) is not turned
    for (Rows* t : {&q, &k})
      for (uint32_t head = 0; head < kHeads; ++head)
        for (uint32_t j = 0; j < kHd / 2; ++j) {
          const uint32_t i = j % (kHd / 4);
          const double f = std::pow(10000.0, -2.0 * i / (kHd / 2.0));
          const double angle = double((j < kHd / 4 ? n % kSide : n / kSide) + 1) * f;
          double& a = (*t)[n][head * kHd + 2 * j];
          double& b = (*t)[n][head * kHd + 2 * j + 1];
          const double a0 = a, b0 = b;
          a = a0 * std::cos(angle) - b0 * std::sin(angle);
          b = b0 * std::cos(angle) + a0 * std::sin(angle);
        }
  Rows attn(kS, std::vector<double>(kD));
  for (uint32_t head = 0; head < kHeads; ++head)
    for (uint32_t r = 0; r < kS; ++r) {
      std::vector<double> p(kS);
      double m = -1e300, total = 0;
      for (uint32_t j = 0; j < kS; ++j) {
        double s = 0;
        for (uint32_t d = 0; d < kHd; ++d) s += q[r][head * kHd + d] * k[j][head * kHd + d];
        p[j] = s / std::sqrt(double(kHd));
        m = std::max(m, p[j]);
      }
      for (double& e : p) total += (e = std::exp(e - m));
      for (uint32_t d = 0; d < kHd; ++d) {
        double acc = 0;
        for (uint32_t j = 0; j < kS; ++j) acc += p[j] * v[j][head * kHd + d];
        attn[r][head * kHd + d] = acc / total;
      }
    }
  Rows o = linear(attn, w[L + "self_attn.o_proj.weight"], kD, &w[L + "self_attn.o_proj.bias"]);
  for (uint32_t n = 0; n < kS; ++n)
    for (uint32_t d = 0; d < kD; ++d) x[n][d] += o[n][d];
  h = layer_norm(x, w[L + "post_attention_layernorm.weight"], w[L + "post_attention_layernorm.bias"]);
  Rows mlp = linear(h, w[L + "mlp.fc1.weight"], kI, &w[L + "mlp.fc1.bias"]);
  for (auto& row : mlp)
    for (double& e : row) e = gelu(e);
  Rows down = linear(mlp, w[L + "mlp.fc2.weight"], kD, &w[L + "mlp.fc2.bias"]);
  for (uint32_t n = 0; n < kS; ++n)
    for (uint32_t d = 0; d < kD; ++d) x[n][d] += down[n][d];
  x = layer_norm(x, w[P + "layernorm_post.weight"], w[P + "layernorm_post.bias"]);

  // Token (r, c) of the shuffle: patches (2r, 2c), (2r, 2c + 1), (2r + 1, 2c), (2r + 1, 2c + 1).
  Rows shuffled(kN / 4, std::vector<double>(4 * kD));
  for (uint32_t r = 0; r < kSide / 2; ++r)
    for (uint32_t c = 0; c < kSide / 2; ++c)
      for (uint32_t part = 0; part < 4; ++part)
        for (uint32_t d = 0; d < kD; ++d)
          shuffled[r * (kSide / 2) + c][part * kD + d] = x[(2 * r + part / 2) * kSide + 2 * c + part % 2][d];
  Rows a = linear(shuffled, w[P + "vision_adapter.mlp.fc1.weight"], kP);
  for (auto& row : a)
    for (double& e : row) e = gelu(e);
  a = linear(a, w[P + "vision_adapter.mlp.fc2.weight"], kP);
  for (auto& row : a)
    for (double& e : row) e = gelu(e);
  return linear(a, w["multi_modal_projector.linear_1.weight"], kText);
}

TEST_F(GpuTest, ScoutShapeVisionTowerMatchesAPlainReference) {
  Weights w = make_weights();
  const fs::path dir = fs::temp_directory_path() / fmt::format("eaglevk-vision-scout-{}", ::getpid());
  fs::create_directories(dir);
  loader::write_safetensors(dir / "model.safetensors", w.tensors);
  w.storage.clear();
  w.tensors.clear();

  models::Llama4VisionConfig c;
  c.image_size = kTile;
  c.patch_size = kPatch;
  c.hidden = kD;
  c.heads = kHeads;
  c.head_dim = kHd;
  c.intermediate = kI;
  c.layers = 1;
  c.projector_input_dim = kP;
  c.projector_output_dim = kP;
  c.text_hidden = kText;
  loader::Checkpoint ckpt = loader::Checkpoint::open(dir / "model.safetensors");
  models::TensorUse use{ckpt, {}};
  vk::Uploader up(gpu().ctx);
  models::Llama4Vision tower = models::load_llama4_vision(gpu().ctx, up, use, c);
  up.flush();
  use.check_all_used({}, {});
  fs::remove_all(dir);

  // One tile of random pixels in [-1, 1] (a tile's 577 rows are a few minutes of lavapipe; the
  // offsets of several tiles in one submission are the tiny tower's tests').
  std::mt19937 rng(336);
  std::uniform_real_distribution<float> pixel(-1, 1);
  std::vector<float> pixels(size_t(3) * kTile * kTile);
  for (float& p : pixels) p = pixel(rng);
  vk::Buffer features = engine::encode_image_tiles(gpu(), tower, pixels, 1);
  std::vector<float> got = read_back<float>(features, size_t(kN / 4) * kText);

  Rows want = reference_tower(w, pixels.data());
  double worst = 0;
  for (uint32_t r = 0; r < kN / 4; ++r) {
    double norm = 0, diff = 0;
    for (uint32_t d = 0; d < kText; ++d) {
      const double g = got[size_t(r) * kText + d];
      norm += want[r][d] * want[r][d];
      diff += (g - want[r][d]) * (g - want[r][d]);
    }
    worst = std::max(worst, std::sqrt(diff / norm));
  }
  fmt::print("Scout-shape vision tower: worst relative L2 error of a feature row {:.2e}\n", worst);
  EXPECT_LT(worst, 1e-3);
}

}  // namespace
}  // namespace eaglevk::testing
