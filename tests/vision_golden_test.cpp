// Llama-4 image prompts end to end against golden_vision.json (an independent float32
// reference): each test image's features from the vision tower on the device (first values of
// the first and last rows, every row's L2 norm, the sum), then every golden prompt with its
// images: the last position's top-5 logits, the prefill argmax, 32 greedy tokens, and EAGLE-3
// with the text-only draft at k = 1 and 3 (output equal to plain decoding, acceptance counts
// equal to the golden's), with and without the image.
#include <cmath>
#include <fstream>
#include <map>

#include <fmt/format.h>

#include "loader/llama4_image.h"
#include "models/eagle3.h"
#include "models/target.h"
#include "runtime/engine/generate.h"
#include "runtime/engine/decoder.h"
#include "support/decoding.h"
#include "support/gpu_fixture.h"
#include "support/golden.h"
#include "support/image_features_check.h"

namespace eaglevk::testing {
namespace {

using nlohmann::json;

struct VisionPair {
  json golden;
  models::TargetModel target;
  models::Eagle3Model draft;
  loader::Llama4ImageConfig image_config;
  std::map<std::string, loader::PreprocessedImage> images;  // by file name
};

VisionPair& vision_pair() {
  gpu();
  static std::unique_ptr<VisionPair> p;
  if (!p) {
    p = std::make_unique<VisionPair>();
    const std::string dir = asset("tiny-llama4-vision");
    p->golden = json::parse(std::ifstream(dir + "/golden_vision.json"));
    p->target = models::load_target(gpu().ctx, dir);
    p->draft = models::load_eagle3(gpu().ctx, asset("tiny-llama4-vision-eagle3"), p->target.config());
    p->image_config = loader::load_llama4_image_config(dir);
    for (const auto& [name, g] : p->golden["images"].items())
      p->images[name] = loader::preprocess_llama4_image(loader::load_image(dir + "/" + g["file"].get<std::string>()),
                                                        p->image_config);
  }
  return *p;
}

const models::Llama4Vision& tower(const VisionPair& p) {
  const auto& m = std::get<models::Llama4Model>(p.target.family);
  if (!m.vision) throw std::runtime_error("tiny-llama4-vision loaded without its vision tower: " + m.no_vision_reason);
  return *m.vision;
}

// The features of the named images, one after another, as one prompt needs them.
engine::PromptImages prompt_images(VisionPair& p, const std::vector<std::string>& names,
                                   const std::vector<uint32_t>& positions) {
  std::vector<float> pixels;
  uint32_t tiles = 0;
  for (const std::string& n : names) {
    const loader::PreprocessedImage& img = p.images.at(n);
    pixels.insert(pixels.end(), img.pixels.begin(), img.pixels.end());
    tiles += img.tiles;
  }
  engine::PromptImages out;
  out.features = engine::encode_image_tiles(gpu(), tower(p), pixels, tiles);
  out.hidden = p.target.config().hidden_size;
  out.patch_positions = positions;
  out.patch_id = tower(p).config.patch_id;
  return out;
}

struct VisionGolden : GpuTest {};

TEST_F(VisionGolden, TheCheckpointHasAUsableVisionTower) {
  VisionPair& p = vision_pair();
  const models::Llama4VisionConfig& c = tower(p).config;
  EXPECT_EQ(c.tokens_per_tile(), p.golden["tokens_per_tile"].get<uint32_t>());
  EXPECT_EQ(c.patch_id, p.golden["image_token_index"].get<int32_t>());
  // pair B's tiny-llama4 carries a tower too, but placeholder image ids: it runs text only.
  models::TargetModel text_only = models::load_target(gpu().ctx, asset("tiny-llama4"));
  const auto& m = std::get<models::Llama4Model>(text_only.family);
  EXPECT_FALSE(m.vision);
  EXPECT_NE(m.no_vision_reason.find("placeholders"), std::string::npos) << m.no_vision_reason;
}

TEST_F(VisionGolden, ImageFeaturesMatchTheGolden) {
  VisionPair& p = vision_pair();
  const uint32_t H = p.target.config().hidden_size;
  for (const auto& [name, g] : p.golden["images"].items()) {
    const loader::PreprocessedImage& img = p.images.at(name);
    ASSERT_EQ(img.tiles, g["num_tiles"].get<uint32_t>()) << name;
    engine::PromptImages f = prompt_images(p, {name}, {});
    const json& want = g["image_features"];
    const uint32_t rows = want["shape"][0];
    ASSERT_EQ(rows, img.tiles * tower(p).config.tokens_per_tile()) << name;
    ASSERT_EQ(want["shape"][1].get<uint32_t>(), H);
    expect_golden_image_features(read_back<float>(f.features, size_t(rows) * H), H, want, name);
  }
}

// Lavapipe binds 128 MiB, a Scout tile's activations take 19 MB: the tower runs a few tiles per
// chunk (one submission). With the binding limit lowered so that 2 tiny tiles fit, a 5-tile
// image goes in 3 chunks and gives the same features, bit for bit.
TEST_F(VisionGolden, TilesInChunksGiveTheSameFeatures) {
  VisionPair& p = vision_pair();
  const loader::PreprocessedImage& img = p.images.at("noise_h112_w112.png");
  ASSERT_EQ(img.tiles, 5u);
  const models::Llama4VisionConfig& c = tower(p).config;
  const size_t floats = size_t(img.tiles) * c.tokens_per_tile() * c.text_hidden;
  std::vector<float> whole = read_back<float>(engine::encode_image_tiles(gpu(), tower(p), img.pixels, img.tiles), floats);
  const uint64_t saved = gpu().ctx.max_binding_range;
  const uint64_t per_tile = uint64_t(c.seq()) * 3 * c.patch_size * c.patch_size * 4;  // the widest rows: patches
  gpu().ctx.max_binding_range = 2 * per_tile + 64;
  std::vector<float> chunked;
  try {
    models::VisionWorkspace ws = models::make_vision_workspace(gpu().ctx, tower(p), img.tiles);
    EXPECT_EQ(ws.chunk_tiles, 2u);
    chunked = read_back<float>(engine::encode_image_tiles(gpu(), tower(p), img.pixels, img.tiles), floats);
  } catch (...) {
    gpu().ctx.max_binding_range = saved;
    throw;
  }
  gpu().ctx.max_binding_range = saved;
  EXPECT_TRUE(bitwise_equal(chunked, whole));
}

struct PromptCase {
  std::vector<int32_t> ids;
  std::vector<std::string> images;
  std::vector<uint32_t> positions;
  const json* golden;
};

std::vector<PromptCase> prompt_cases(const VisionPair& p, bool with_images) {
  std::vector<PromptCase> out;
  for (const json& g : p.golden["prompts"]) {
    const json& src = with_images ? g : g["text_only"];
    PromptCase c{src["prompt_ids"].get<std::vector<int32_t>>(), {}, {}, &src};
    if (with_images) {
      c.images = g["images"].get<std::vector<std::string>>();
      c.positions = g["image_token_positions"].get<std::vector<uint32_t>>();
    }
    out.push_back(std::move(c));
  }
  return out;
}

// Plain greedy decoding against the golden; returns eaglevk's tokens per prompt.
std::vector<std::vector<int32_t>> check_plain(VisionPair& p, bool with_images) {
  engine::Decoder runner = plain_decoder(p.target, 512, 64);
  std::vector<std::vector<int32_t>> tokens;
  size_t full = 0;
  float worst = 0;
  for (const PromptCase& c : prompt_cases(p, with_images)) {
    const json& g = *c.golden;
    const std::string label = fmt::format("{} prompt {}", with_images ? "image" : "text-only", tokens.size());
    engine::PromptImages images;
    if (with_images) images = prompt_images(p, c.images, c.positions);
    engine::GenerationOptions o;
    o.n_predict = 32;
    o.ignore_eos = true;
    o.top_logits = 5;
    o.prompt_argmax = true;
    if (with_images) o.images = &images;
    engine::GenerationResult r = testing::generate(runner, c.ids, o);
    const auto top_ids = g["last_pos_top5"]["ids"].get<std::vector<int32_t>>();
    const auto top_logits = g["last_pos_top5"]["logits"].get<std::vector<float>>();
    const float tol = 2e-3f;
    for (size_t i = 0; i < 5; ++i) {
      const bool tie = (i > 0 && top_logits[i - 1] - top_logits[i] < tol) || (i < 4 && top_logits[i] - top_logits[i + 1] < tol);
      if (!tie) {
        EXPECT_EQ(r.prompt_top_logits[i].first, top_ids[i]) << label << " rank " << i;
      }
      EXPECT_NEAR(r.prompt_top_logits[i].second, top_logits[i], tol) << label << " rank " << i;
      worst = std::max(worst, std::fabs(r.prompt_top_logits[i].second - top_logits[i]));
    }
    EXPECT_EQ(r.prompt_argmax, g["prompt_argmax_ids"].get<std::vector<int32_t>>()) << label;
    const auto greedy = g["greedy_ids"].get<std::vector<int32_t>>();
    const auto margins = g["greedy_top2_margins"].get<std::vector<float>>();
    size_t step = 0;
    while (step < greedy.size() && step < r.tokens.size() && r.tokens[step] == greedy[step]) ++step;
    if (step == greedy.size())
      ++full;
    else
      EXPECT_LT(margins[step], tol) << label << " left the golden greedy path at step " << step << " (margin "
                                    << margins[step] << ")";
    tokens.push_back(r.tokens);
  }
  fmt::print("{}: {} of {} prompts match all 32 greedy tokens; worst top-5 logit error {:.2e}\n",
             with_images ? "image prompts" : "text-only prompts", full, tokens.size(), worst);
  return tokens;
}

// EAGLE-3 with the text-only draft: lossless at k = 1, 3, and the golden's acceptance counts
// per prompt (where eaglevk's greedy path is the golden's) and in total.
void check_speculative(VisionPair& p, bool with_images, const std::vector<std::vector<int32_t>>& plain) {
  const std::vector<PromptCase> cases = prompt_cases(p, with_images);
  for (uint32_t k : {1u, 3u}) {
    engine::Decoder spec = chain_decoder(p.target, p.draft, 512, k, 64);
    engine::SpecStats total;
    bool all_on_golden_path = true;
    for (size_t i = 0; i < cases.size(); ++i) {
      const PromptCase& c = cases[i];
      const std::string label = fmt::format("{} prompt {} k {}", with_images ? "image" : "text-only", i, k);
      engine::PromptImages images;
      if (with_images) images = prompt_images(p, c.images, c.positions);
      engine::GenerationOptions o;
      o.n_predict = 32;
      o.ignore_eos = true;
      if (with_images) o.images = &images;
      engine::SpecStats stats;
      engine::GenerationResult r = spec.generate(c.ids, o, stats);
      EXPECT_EQ(r.tokens, plain[i]) << label;
      total.merge(stats);
      const json& g = (*c.golden)["spec"][std::to_string(k)];
      if (plain[i] == (*c.golden)["greedy_ids"].get<std::vector<int32_t>>()) {
        EXPECT_EQ(stats.num_drafts, g["num_drafts"].get<uint64_t>()) << label;
        EXPECT_EQ(stats.num_accepted_tokens, g["num_accepted_tokens"].get<uint64_t>()) << label;
      } else {
        all_on_golden_path = false;
      }
    }
    const json& g = p.golden["acceptance"][with_images ? "image" : "text_only"][std::to_string(k)];
    fmt::print("{} k={}: drafts {} accepted {} AL {:.4f} (golden {} {} {:.4f})\n", with_images ? "image" : "text-only", k,
               total.num_drafts, total.num_accepted_tokens, total.mean_acceptance_length(),
               g["num_drafts"].get<uint64_t>(), g["num_accepted_tokens"].get<uint64_t>(),
               g["mean_acceptance_length"].get<double>());
    if (all_on_golden_path) {
      EXPECT_EQ(total.num_drafts, g["num_drafts"].get<uint64_t>());
      EXPECT_EQ(total.num_accepted_tokens, g["num_accepted_tokens"].get<uint64_t>());
    }
  }
}

TEST_F(VisionGolden, ImagePromptsMatchTheGoldenAndSpeculationIsLossless) {
  VisionPair& p = vision_pair();
  check_speculative(p, true, check_plain(p, true));
}

TEST_F(VisionGolden, TextOnlyPromptsMatchTheGoldenAndSpeculationIsLossless) {
  VisionPair& p = vision_pair();
  check_speculative(p, false, check_plain(p, false));
}

}  // namespace
}  // namespace eaglevk::testing
