// Image prompts with a Llama-4 vision target split across devices (issue 47): the vision tower
// loads with the first part (the embeddings' device), its features replace the <|patch|> rows
// there, and the hidden state hops on as for text. The kernels and their order are one
// device's, so the tokens, the last prompt row's logits and EAGLE-3 acceptance are the single
// device's to the bit, split at every layer boundary.
#include <cstring>
#include <string>

#include <gtest/gtest.h>

#include <eaglevk/eaglevk.hpp>

#include "loader/image_decode.h"
#include "models/target.h"
#include "runtime/engine/decoder.h"
#include "runtime/ops/gpu.h"

namespace eaglevk::testing {
namespace {

const std::string kAssets = EAGLEVK_ASSETS;
const std::string kTarget = kAssets + "/tiny-llama4-vision", kDraft = kAssets + "/tiny-llama4-vision-eagle3";
constexpr uint32_t kContext = 512;

api::LoadOptions options(std::vector<double> split = {}) {
  api::LoadOptions o;
  o.context = kContext;
  o.draft = kDraft;
  o.split = std::move(split);
  return o;
}

// One user turn with an image placeholder, rendered and tokenized by the model's own template.
std::vector<int32_t> placeholder_prompt(const api::Model& m) {
  const std::vector<loader::ChatMessage> turn = {{"user", "<|image|>Describe this image."}};
  return api::tokenize(m, api::apply_chat_template(m, turn, true), false);
}

struct ImageRun {
  std::vector<int32_t> tokens;
  std::vector<std::pair<int32_t, float>> top_logits;  // the whole last prompt row
  engine::SpecStats stats;
  engine::HopStats hops;
};

// The image prompt through the decoder: plain (k 0, no draft) with the last row's logits, or
// chains of k 3 with the draft.
ImageRun run(const api::Model& m, const api::ImagePrompt& prompt, bool chain) {
  engine::DecoderConfig c;
  c.context = kContext;
  c.k = chain ? 3 : 0;
  engine::Decoder dec(*m.device->gpu, *m.target, chain ? m.draft.get() : nullptr, c);
  engine::GenerationOptions o;
  o.n_predict = 12;
  o.ignore_eos = true;
  o.images = &prompt.images;
  if (!chain) o.top_logits = uint32_t(m.vocab_size());
  ImageRun r;
  engine::GenerationResult g = dec.generate(prompt.ids, o, r.stats);
  r.tokens = g.tokens;
  r.top_logits = g.prompt_top_logits;
  r.hops = dec.split_hops();
  return r;
}

void expect_same(const ImageRun& a, const ImageRun& b, const std::string& what) {
  EXPECT_EQ(a.tokens, b.tokens) << what;
  ASSERT_EQ(a.top_logits.size(), b.top_logits.size()) << what;
  for (size_t i = 0; i < a.top_logits.size(); ++i) {
    EXPECT_EQ(a.top_logits[i].first, b.top_logits[i].first) << what << " logit " << i;
    EXPECT_EQ(std::memcmp(&a.top_logits[i].second, &b.top_logits[i].second, 4), 0) << what << " logit " << i;
  }
  EXPECT_EQ(a.stats.num_drafts, b.stats.num_drafts) << what;
  EXPECT_EQ(a.stats.num_accepted_tokens, b.stats.num_accepted_tokens) << what;
  EXPECT_EQ(a.stats.accepted_at, b.stats.accepted_at) << what;
}

TEST(LayerSplitVision, ImagePromptsGiveTheSingleDeviceBitsAtEveryLayerBoundary) {
  const std::vector<loader::RgbImage> images = {loader::load_image(kTarget + "/images/grad_h56_w56.png")};
  const api::Runtime one = api::open_runtime("0"), two = api::open_runtime(std::vector<std::string>(2, "0"));
  const auto whole = api::load_model(one, api::plan_load(one, kTarget, options()));
  ASSERT_TRUE(whole->images) << whole->no_images_reason;
  const std::vector<int32_t> placeholders = placeholder_prompt(*whole);
  const api::ImagePrompt ref_prompt = api::prepare_images(*whole, placeholders, images);
  ASSERT_GT(ref_prompt.images.patch_positions.size(), 0u);
  const ImageRun plain_ref = run(*whole, ref_prompt, false), chain_ref = run(*whole, ref_prompt, true);
  ASSERT_GT(chain_ref.stats.num_drafts, 0u);
  const uint32_t L = uint32_t(whole->target->config().num_hidden_layers);
  for (uint32_t b = 1; b < L; ++b) {
    const auto split = api::load_model(two, api::plan_load(two, kTarget, options({double(b), double(L - b)})));
    ASSERT_TRUE(split->images) << split->no_images_reason;
    // The tower is with the first part, and the plan charges it to the first device.
    const models::TargetModel& first = *split->target->earlier.front().model;
    EXPECT_TRUE(std::get<models::Llama4Model>(first.family).vision.has_value());
    EXPECT_FALSE(std::get<models::Llama4Model>(split->target->family).vision.has_value());
    EXPECT_EQ(first.weight_bytes(), split->split->devices[0].weights);
    const api::ImagePrompt prompt = api::prepare_images(*split, placeholders, images);
    EXPECT_EQ(prompt.ids, ref_prompt.ids);
    const std::string at = "split at layer " + std::to_string(b);
    const ImageRun plain = run(*split, prompt, false);
    expect_same(plain_ref, plain, "plain, " + at);
    EXPECT_EQ(plain.hops.passes, plain.hops.hops);
    EXPECT_GT(plain.hops.passes, 0u);
    expect_same(chain_ref, run(*split, prompt, true), "chain, " + at);
  }
  // The session path (the tower on the first device's queue) gives the same tokens.
  api::SessionParams p;
  p.max_new_tokens = 8;
  p.ignore_eos = true;
  p.context = kContext;
  const auto split = api::load_model(two, api::plan_load(two, kTarget, options({1, 1})));
  EXPECT_EQ(api::Session(split, p).generate(placeholders, {}, images).tokens,
            api::Session(whole, p).generate(placeholders, {}, images).tokens);
}

}  // namespace
}  // namespace eaglevk::testing
