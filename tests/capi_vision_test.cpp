// Image prompts through the C API: a chat rendered with "<|image|>" where the image goes,
// tokenized, then eaglevk_generate_with_images with the image as PNG bytes or as RGB pixels
// gives golden_vision.json's greedy tokens, plain and with the text-only draft (its acceptance
// counts too); bad images, a mismatched count and models without a vision tower give their
// statuses.
#include <eaglevk/eaglevk.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "loader/image_decode.h"
#include "support/capi.h"
#include "support/vision_gguf.h"

namespace eaglevk::testing {
namespace {

using nlohmann::json;

struct VisionModels {
  eaglevk_model* plain = nullptr;
  eaglevk_model* pair = nullptr;
  json golden;
};

VisionModels& vision_models() {
  static VisionModels* v = [] {
    auto* v = new VisionModels;
    const std::string dir = asset("tiny-llama4-vision");
    EXPECT_STATUS(eaglevk_model_load(shared().runtime, dir.c_str(), nullptr, &v->plain), EAGLEVK_OK);
    EXPECT_STATUS(eaglevk_model_load(shared().runtime, dir.c_str(), asset("tiny-llama4-vision-eagle3").c_str(), &v->pair),
                  EAGLEVK_OK);
    v->golden = json::parse(std::ifstream(dir + "/golden_vision.json"));
    return v;
  }();
  return *v;
}

std::vector<uint8_t> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

// The golden prompt 0 ("<|image|>Describe this image." in one user turn) through the C chat
// template and tokenizer: ids with one <|image|> placeholder.
std::vector<int32_t> placeholder_prompt(eaglevk_model* m) {
  eaglevk_chat_message user{"user", "<|image|>Describe this image."};
  std::vector<char> text(1024);
  size_t len = 0;
  EXPECT_STATUS(eaglevk_apply_chat_template(m, &user, 1, 1, text.data(), text.size(), &len), EAGLEVK_OK);
  return tokenize(m, std::string(text.data(), len), /*bos=*/false);
}

struct ImageRun {
  eaglevk_status status;
  std::string error;
  std::vector<int32_t> tokens;
  eaglevk_spec_stats stats{};
};

ImageRun run(eaglevk_session* s, const std::vector<int32_t>& prompt, const std::vector<eaglevk_image>& images,
             size_t n) {
  ImageRun r;
  r.tokens.assign(n, -1);
  size_t count = 0;
  r.status = eaglevk_generate_with_images(s, prompt.data(), prompt.size(), images.data(), images.size(), nullptr,
                                          nullptr, r.tokens.data(), n, &count);
  r.error = eaglevk_last_error();
  r.tokens.resize(r.status == EAGLEVK_OK ? count : 0);
  EXPECT_STATUS(eaglevk_session_get_stats(s, &r.stats, nullptr, 0), EAGLEVK_OK);
  return r;
}

TEST_F(CApi, ImagePromptAsBytesOrPixelsGivesTheGoldenTokens) {
  VisionModels& v = vision_models();
  const json& g = v.golden["prompts"][0];
  const std::string path = asset("tiny-llama4-vision/images/") + g["images"][0].get<std::string>();
  const std::vector<uint8_t> png = file_bytes(path);
  const loader::RgbImage rgb = loader::load_image(path);
  const std::vector<int32_t> prompt = placeholder_prompt(v.plain);
  const auto greedy = g["greedy_ids"].get<std::vector<int32_t>>();
  int supported = 0;
  EXPECT_STATUS(eaglevk_model_supports_images(v.plain, &supported), EAGLEVK_OK);
  EXPECT_EQ(supported, 1);

  const eaglevk_image as_png{png.data(), png.size(), 0, 0};
  const eaglevk_image as_pixels{rgb.rgb.data(), rgb.rgb.size(), rgb.width, rgb.height};
  for (const eaglevk_image& image : {as_png, as_pixels}) {
    eaglevk_session* plain = session(v.plain, 0, uint32_t(greedy.size()));
    ImageRun r = run(plain, prompt, {image}, greedy.size());
    ASSERT_EQ(r.status, EAGLEVK_OK) << r.error;
    EXPECT_EQ(r.tokens, greedy) << (image.width ? "pixels" : "png");
    eaglevk_session_free(plain);
  }
  // The draft at k = 3: the same tokens, and the golden's acceptance counts.
  eaglevk_session* spec = session(v.pair, 3, uint32_t(greedy.size()));
  ImageRun r = run(spec, prompt, {as_png}, greedy.size());
  ASSERT_EQ(r.status, EAGLEVK_OK) << r.error;
  EXPECT_EQ(r.tokens, greedy);
  EXPECT_EQ(r.stats.num_drafts, g["spec"]["3"]["num_drafts"].get<uint64_t>());
  EXPECT_EQ(r.stats.num_accepted_tokens, g["spec"]["3"]["num_accepted_tokens"].get<uint64_t>());
  eaglevk_session_free(spec);
}

TEST_F(CApi, BadImagesAndModelsWithoutVisionGiveTheirStatus) {
  VisionModels& v = vision_models();
  const std::vector<uint8_t> png = file_bytes(asset("tiny-llama4-vision/images/grad_h56_w56.png"));
  const std::vector<int32_t> prompt = placeholder_prompt(v.plain);
  eaglevk_session* s = session(v.plain, 0, 4);
  const eaglevk_image good{png.data(), png.size(), 0, 0};
  EXPECT_EQ(run(s, prompt, {good}, 4).status, EAGLEVK_OK);
  // Truncated bytes, pixels that do not fill the size given, a NULL image array, one image
  // too many, an expanded prompt that does not fit the context.
  const eaglevk_image cut{png.data(), png.size() / 2, 0, 0};
  ImageRun r = run(s, prompt, {cut}, 4);
  EXPECT_EQ(r.status, EAGLEVK_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(r.error.find("truncated"), std::string::npos) << r.error;
  std::vector<uint8_t> pixels(10 * 10 * 3);
  r = run(s, prompt, {eaglevk_image{pixels.data(), pixels.size() - 1, 10, 10}}, 4);
  EXPECT_EQ(r.status, EAGLEVK_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(r.error.find("300"), std::string::npos) << r.error;
  size_t n = 0;
  EXPECT_FAILS_WITH(eaglevk_generate_with_images(s, prompt.data(), prompt.size(), nullptr, 1, nullptr, nullptr,
                                                 nullptr, 0, &n),
                    EAGLEVK_ERROR_INVALID_ARGUMENT, "images");
  r = run(s, prompt, {good, good}, 4);
  EXPECT_EQ(r.status, EAGLEVK_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(r.error.find("placeholder"), std::string::npos) << r.error;
  eaglevk_session_free(s);
  eaglevk_session* small = session(v.plain, 0, 4, /*context=*/24);  // 20 text tokens + 4 patches + 2 markers
  r = run(small, prompt, {good}, 4);
  EXPECT_EQ(r.status, EAGLEVK_ERROR_CONTEXT_FULL) << r.error;
  eaglevk_session_free(small);
  // tiny-llama3 has no vision tower.
  int supported = 7;
  EXPECT_FAILS_WITH(eaglevk_model_supports_images(shared().plain, &supported), EAGLEVK_ERROR_MODEL, "cannot take images");
  EXPECT_EQ(supported, 0);
  eaglevk_session* text_only = session(shared().plain, 0, 4);
  r = run(text_only, tokenize(shared().plain, "hi"), {good}, 4);
  EXPECT_EQ(r.status, EAGLEVK_ERROR_MODEL);
  EXPECT_NE(r.error.find("no vision tower"), std::string::npos) << r.error;
  eaglevk_session_free(text_only);
}

// A processor config that disagrees with the vision tower (a 112-pixel tile for a 56-pixel
// tower) costs the model its images, with the reason, and not its text: the load succeeds and
// text generates.
TEST_F(CApi, AProcessorThatDisagreesWithTheVisionTowerRefusesImagesOnly) {
  namespace fs = std::filesystem;
  const fs::path source = asset("tiny-llama4-vision");
  const fs::path dir = fs::temp_directory_path() / fmt::format("eaglevk-vision-tile-{}", ::getpid());
  fs::create_directories(dir);
  for (const auto& entry : fs::directory_iterator(source))
    if (entry.path().filename() != "preprocessor_config.json") fs::create_symlink(entry.path(), dir / entry.path().filename());
  json preprocessor = json::parse(std::ifstream(source / "preprocessor_config.json"));
  preprocessor["size"] = {{"height", 112}, {"width", 112}};
  std::ofstream(dir / "preprocessor_config.json") << preprocessor.dump();
  eaglevk_model* model = nullptr;
  EXPECT_STATUS(eaglevk_model_load(shared().runtime, dir.c_str(), nullptr, &model), EAGLEVK_OK);
  ASSERT_NE(model, nullptr);
  int supported = 7;
  EXPECT_FAILS_WITH(eaglevk_model_supports_images(model, &supported), EAGLEVK_ERROR_MODEL, "tile");
  EXPECT_EQ(supported, 0);
  eaglevk_session* s = session(model, 0, 4);
  const std::vector<int32_t> prompt = tokenize(model, "Describe");
  std::vector<int32_t> out(4);
  size_t n = 0;
  EXPECT_STATUS(eaglevk_generate(s, prompt.data(), prompt.size(), nullptr, nullptr, out.data(), out.size(), &n),
                EAGLEVK_OK);
  EXPECT_EQ(n, 4u);
  eaglevk_session_free(s);
  eaglevk_model_free(model);
  fs::remove_all(dir);
}

// What GGUF users download: a Llama-4 GGUF file and llama.cpp's vision file (mmproj, f16 as
// llama.cpp's own uploads ship it) through eaglevk_model_load_with_mmproj. Every golden image
// prompt (its prompt text through the GGUF tokenizer, its images as PNG bytes) gives the
// golden's greedy tokens (f16 weights: a step may differ only where the golden's top two logits
// are within 2e-3), and the draft at k = 3 gives the same tokens with the golden's acceptance
// counts (image features are checked against the golden in vision_mmproj_test). Then the statuses of an
// mmproj that is missing, not a vision file, or given with a model that has no image tokens.
TEST_F(CApi, GgufModelWithItsMmprojGivesTheGoldenTokens) {
  namespace fs = std::filesystem;
  VisionModels& v = vision_models();
  const fs::path dir = fs::temp_directory_path() / fmt::format("eaglevk-vision-gguf-{}", ::getpid());
  const std::string text = write_tiny_llama4_vision_gguf(dir).string();
  const std::string mmproj = asset("gguf/tiny-llama4-vision/mmproj-tiny-llama4-vision-f16.gguf");
  const std::string draft = asset("tiny-llama4-vision-eagle3");
  eaglevk_model* model = nullptr;
  EXPECT_STATUS(eaglevk_model_load_with_mmproj(shared().runtime, text.c_str(), draft.c_str(), mmproj.c_str(), &model),
                EAGLEVK_OK);
  ASSERT_NE(model, nullptr);
  int supported = 0;
  EXPECT_STATUS(eaglevk_model_supports_images(model, &supported), EAGLEVK_OK);
  EXPECT_EQ(supported, 1);
  size_t full = 0;
  for (const json& g : v.golden["prompts"]) {
    const std::string label = fmt::format("prompt {}", g["id"].get<int>());
    std::vector<std::vector<uint8_t>> files;
    std::vector<eaglevk_image> images;
    for (const json& name : g["images"]) files.push_back(file_bytes(asset("tiny-llama4-vision/images/") + name.get<std::string>()));
    for (const auto& f : files) images.push_back({f.data(), f.size(), 0, 0});
    const std::vector<int32_t> prompt = tokenize(model, g["prompt_text"].get<std::string>(), /*bos=*/false);
    const auto greedy = g["greedy_ids"].get<std::vector<int32_t>>();
    const auto margins = g["greedy_top2_margins"].get<std::vector<float>>();
    eaglevk_session* plain = session(model, 0, uint32_t(greedy.size()));
    ImageRun r = run(plain, prompt, images, greedy.size());
    eaglevk_session_free(plain);
    ASSERT_EQ(r.status, EAGLEVK_OK) << label << ": " << r.error;
    size_t step = 0;
    while (step < greedy.size() && step < r.tokens.size() && r.tokens[step] == greedy[step]) ++step;
    if (step == greedy.size())
      ++full;
    else
      EXPECT_LT(margins.at(step), 2e-3f) << label << " left the golden greedy path at step " << step;
    eaglevk_session* spec = session(model, 3, uint32_t(greedy.size()));
    ImageRun s = run(spec, prompt, images, greedy.size());
    eaglevk_session_free(spec);
    ASSERT_EQ(s.status, EAGLEVK_OK) << label << ": " << s.error;
    EXPECT_EQ(s.tokens, r.tokens) << label;
    // The draft reads the target's hidden states at the image positions: on the golden's path,
    // the golden's acceptance counts.
    if (step == greedy.size()) {
      EXPECT_EQ(s.stats.num_drafts, g["spec"]["3"]["num_drafts"].get<uint64_t>()) << label;
      EXPECT_EQ(s.stats.num_accepted_tokens, g["spec"]["3"]["num_accepted_tokens"].get<uint64_t>()) << label;
    }
  }
  fmt::print("GGUF + mmproj: {} of {} image prompts match all 32 golden greedy tokens\n", full,
             v.golden["prompts"].size());
  eaglevk_model_free(model);

  // Without its mmproj the GGUF model runs text only and says what to pass.
  EXPECT_STATUS(eaglevk_model_load(shared().runtime, text.c_str(), nullptr, &model), EAGLEVK_OK);
  ASSERT_NE(model, nullptr);
  EXPECT_FAILS_WITH(eaglevk_model_supports_images(model, &supported), EAGLEVK_ERROR_MODEL,
                    "eaglevk_model_load_with_mmproj's mmproj: this model cannot take images");
  eaglevk_model_free(model);
  EXPECT_FAILS_WITH(eaglevk_model_load_with_mmproj(shared().runtime, text.c_str(), nullptr,
                                                   (dir / "missing.gguf").c_str(), &model),
                    EAGLEVK_ERROR_IO, "missing.gguf");
  EXPECT_EQ(model, nullptr);
  EXPECT_FAILS_WITH(eaglevk_model_load_with_mmproj(shared().runtime, text.c_str(), nullptr, text.c_str(), &model),
                    EAGLEVK_ERROR_MODEL, "not 'clip'");
  EXPECT_FAILS_WITH(eaglevk_model_load_with_mmproj(shared().runtime, asset("gguf/tiny-llama4/tiny-llama4-f16.gguf").c_str(),
                                                   nullptr, mmproj.c_str(), &model),
                    EAGLEVK_ERROR_MODEL, "no <|image_start|> token");
  EXPECT_FAILS_WITH(eaglevk_model_load_with_mmproj(shared().runtime, text.c_str(), nullptr, "", &model),
                    EAGLEVK_ERROR_INVALID_ARGUMENT, "mmproj");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace eaglevk::testing
