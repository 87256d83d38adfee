// Image prompts: Hugging Face messages JSON -> chat text with "<|image|>" -> token ids -> the
// Llama-4 image token layout, checked against golden_vision.json's prompts (text and ids) and
// vision-spec.md §2; and the errors of each step.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include <eaglevk/error.h>

#include "loader/chat_messages.h"
#include "loader/chat_template.h"
#include "loader/llama4_image.h"
#include "loader/llama4_image_prompt.h"
#include "loader/text_file.h"
#include "loader/tokenizer.h"
#include "support/loader_test_util.h"

namespace fs = std::filesystem;
using namespace eaglevk::loader;
using eaglevk::testing::expect_error;
using nlohmann::json;

namespace {

const fs::path kModelDir = fs::path(EAGLEVK_ASSETS) / "tiny-llama4-vision";
const fs::path kImageDir = kModelDir / "images";

const json& golden() {
  static const json g = [] {
    std::ifstream in(kModelDir / "golden_vision.json");
    return json::parse(in);
  }();
  return g;
}

const Tokenizer& tokenizer() {
  static const Tokenizer t = Tokenizer::load(kModelDir);
  return t;
}

std::vector<int32_t> ids_of(const json& list) { return list.get<std::vector<int32_t>>(); }

// The tile grid of every image, from the preprocessing plan of the decoded file.
std::vector<TileGrid> grids_of(const std::vector<fs::path>& images) {
  const Llama4ImageConfig config = load_llama4_image_config(kModelDir);
  std::vector<TileGrid> grids;
  for (const fs::path& path : images) {
    const RgbImage image = load_image(path);
    const Llama4ImagePlan plan = plan_llama4_image(image.height, image.width, config);
    grids.push_back({plan.rows, plan.cols});
  }
  return grids;
}

// A scratch model directory holding only the files a test writes.
struct TempDir {
  fs::path path = fs::temp_directory_path() / ("eaglevk_image_prompt_" + std::to_string(getpid()));
  TempDir() { fs::create_directories(path); }
  ~TempDir() { fs::remove_all(path); }
  void write(const std::string& name, const std::string& text) const { std::ofstream(path / name) << text; }
};

}  // namespace

TEST(Llama4ImageTokens, LoadedFromTheModelDirectory) {
  const Llama4ImageTokens tokens = load_llama4_image_tokens(kModelDir, tokenizer());
  const json& special = golden()["special_tokens"];
  EXPECT_EQ(tokens.ids.image_start, special["<|image_start|>"]);
  EXPECT_EQ(tokens.ids.image_end, special["<|image_end|>"]);
  EXPECT_EQ(tokens.ids.image, special["<|image|>"]);
  EXPECT_EQ(tokens.ids.patch, special["<|patch|>"]);
  EXPECT_EQ(tokens.ids.tile_x_sep, special["<|tile_x_separator|>"]);
  EXPECT_EQ(tokens.ids.tile_y_sep, special["<|tile_y_separator|>"]);
  EXPECT_EQ(tokens.ids.image_start, golden()["boi_token_index"]);
  EXPECT_EQ(tokens.ids.image_end, golden()["eoi_token_index"]);
  EXPECT_EQ(tokens.ids.patch, golden()["image_token_index"]);
  EXPECT_EQ(tokens.tokens_per_tile, golden()["tokens_per_tile"]);
}

TEST(Llama4ImageTokens, GoldenPromptsRenderTokenizeAndExpandExactly) {
  const ChatTemplate chat = ChatTemplate::load(kModelDir);
  const Llama4ImageTokens tokens = load_llama4_image_tokens(kModelDir, tokenizer());
  ASSERT_EQ(golden()["prompts"].size(), 8u);
  for (const json& prompt : golden()["prompts"]) {
    SCOPED_TRACE(prompt["note"].get<std::string>());
    // The golden prompts end with the assistant header: add_generation_prompt.
    const ParsedChat parsed = parse_chat_messages(prompt["messages"], kImageDir);
    const std::string text = chat.render(parsed.messages, /*add_generation_prompt=*/true);
    EXPECT_EQ(text, prompt["prompt_text"]);
    ASSERT_EQ(parsed.images.size(), prompt["images"].size());
    for (size_t k = 0; k < parsed.images.size(); ++k)
      EXPECT_EQ(parsed.images[k], kImageDir / prompt["images"][k].get<std::string>());

    const std::vector<int32_t> ids = tokenizer().encode(text, /*add_special=*/false);
    const ExpandedPrompt expanded = expand_llama4_image_tokens(ids, grids_of(parsed.images), tokens);
    EXPECT_EQ(expanded.ids, ids_of(prompt["prompt_ids"]));
    EXPECT_EQ(expanded.patch_positions, prompt["image_token_positions"].get<std::vector<uint32_t>>());
    EXPECT_EQ(expanded.patch_positions.size(), prompt["num_image_tokens"]);
    EXPECT_EQ(tokenizer().decode(expanded.ids), prompt["expanded_prompt_text"]);

    // The same conversation without its images.
    const json& text_only = prompt["text_only"];
    const ParsedChat plain = parse_chat_messages(text_only["messages"], kImageDir);
    EXPECT_TRUE(plain.images.empty());
    const std::string plain_text = chat.render(plain.messages, true);
    EXPECT_EQ(plain_text, text_only["prompt_text"]);
    const std::vector<int32_t> plain_ids = tokenizer().encode(plain_text, false);
    const ExpandedPrompt plain_expanded = expand_llama4_image_tokens(plain_ids, {}, tokens);
    EXPECT_EQ(plain_expanded.ids, ids_of(text_only["prompt_ids"]));
    EXPECT_TRUE(plain_expanded.patch_positions.empty());
  }
}

TEST(Llama4ImageTokens, ScoutLayoutFromTheSpec) {
  // §1/§2: Scout (t = 336, patch 14, pixel shuffle 0.5): 144 tokens per tile; an h500 x w300
  // photo is a 2 x 1 grid + global tile = 432 <|patch|> tokens, 437 tokens with the layout.
  EXPECT_EQ(llama4_tokens_per_tile(336, 14, 0.5f), 144u);
  const Llama4ImagePlan plan = plan_llama4_image(500, 300, Llama4ImageConfig{.tile = 336, .max_patches = 16});
  Llama4ImageTokens scout;
  scout.ids = {200080, 200081, 200090, 200092, 200084, 200085};  // §2's Scout ids
  scout.tokens_per_tile = 144;
  const std::vector<int32_t> layout = llama4_image_layout({plan.rows, plan.cols}, scout);
  EXPECT_EQ(layout.size(), 437u);
  EXPECT_EQ(std::count(layout.begin(), layout.end(), 200092), 432);
  // §2: a 2 x 2 image has 5n patches, 2 x-separators, 2 y-separators; a 1-tile image is n + 3 tokens.
  const std::vector<int32_t> two_by_two = llama4_image_layout({2, 2}, scout);
  EXPECT_EQ(std::count(two_by_two.begin(), two_by_two.end(), 200092), 5 * 144);
  EXPECT_EQ(std::count(two_by_two.begin(), two_by_two.end(), 200084), 2);
  EXPECT_EQ(std::count(two_by_two.begin(), two_by_two.end(), 200085), 2);
  EXPECT_EQ(llama4_image_layout({1, 1}, scout).size(), 144u + 3);
  // The tiny model: (56/14)^2 / 4 = 4.
  EXPECT_EQ(llama4_tokens_per_tile(56, 14, 0.5f), 4u);
  expect_error([] { llama4_tokens_per_tile(50, 14, 0.5f); }, "whole number");
  expect_error([] { llama4_tokens_per_tile(42, 14, 0.5f); }, "pixel shuffle");
}

TEST(Llama4ImageTokens, ExpansionErrors) {
  const Llama4ImageTokens tokens = load_llama4_image_tokens(kModelDir, tokenizer());
  const std::vector<int32_t> one_placeholder = {1, 2, tokens.ids.image, 3};
  expect_error([&] { expand_llama4_image_tokens(one_placeholder, {}, tokens); }, "1 image placeholder(s)");
  const std::vector<TileGrid> two = {{1, 1}, {2, 2}};
  expect_error([&] { expand_llama4_image_tokens(one_placeholder, two, tokens); }, "but 2 image(s)");
  const std::vector<int32_t> typed_patch = {1, tokens.ids.patch, 3};
  expect_error([&] { expand_llama4_image_tokens(typed_patch, {}, tokens); }, "already holds a <|patch|>");
}

TEST(Llama4ImageTokens, ConfigCrossChecks) {
  TempDir dir;
  const std::string vision = R"("vision_config": {"image_size": 56, "patch_size": 14, "pixel_shuffle_ratio": 0.5})";
  dir.write("config.json", "{\"boi_token_index\": 4097, " + vision + "}");
  expect_error([&] { load_llama4_image_tokens(dir.path, tokenizer()); }, "boi_token_index is 4097");
  dir.write("config.json", "{\"image_token_index\": 4098, " + vision + "}");
  expect_error([&] { load_llama4_image_tokens(dir.path, tokenizer()); }, "image_token_index is 4098");
  dir.write("config.json", "{}");
  expect_error([&] { load_llama4_image_tokens(dir.path, tokenizer()); }, "vision_config");
  dir.write("config.json", "{" + vision + "}");
  EXPECT_EQ(load_llama4_image_tokens(dir.path, tokenizer()).tokens_per_tile, 4u);
  dir.write("processor_config.json", R"({"patch_token": "<|no_such_token|>"})");
  expect_error([&] { load_llama4_image_tokens(dir.path, tokenizer()); }, "no image patch token \"<|no_such_token|>\"");
  dir.write("processor_config.json", R"({"patch_size": 16})");
  expect_error([&] { load_llama4_image_tokens(dir.path, tokenizer()); }, "patch_size 16 differs");
  dir.write("processor_config.json", "{}");
  dir.write("preprocessor_config.json", R"({"size": {"height": 112, "width": 112}})");
  expect_error([&] { load_llama4_image_tokens(dir.path, tokenizer()); }, "preprocessor's tile size 112");
}

// ---- Chat content parts -----------------------------------------------------------------------

TEST(ChatContentParts, TextPartsAreNotTrimmedWhereStringsAre) {
  const ChatTemplate chat = ChatTemplate::load(kModelDir);
  ChatMessage as_string{"user", "  padded  "};
  ChatMessage as_parts{"user", "", {{ChatContentPart::Type::Text, "  padded  ", {}}}};
  const std::string header = "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n";
  EXPECT_EQ(chat.render(std::span(&as_string, 1), false), header + "padded<|eot_id|>");
  EXPECT_EQ(chat.render(std::span(&as_parts, 1), false), header + "  padded  <|eot_id|>");
}

// A template that writes content as a string writes a list of parts as Python's str() of it, as
// Jinja does: no image placeholder, so the image-prompt step refuses the image later.
TEST(ChatContentParts, TemplatesWithoutImagesWriteThePartsAsPythonDoes) {
  const ChatTemplate text_only = ChatTemplate::load(fs::path(EAGLEVK_ASSETS) / "tiny-llama3");
  ChatMessage m{"user", "", {{ChatContentPart::Type::Image, "", "a.png"}, {ChatContentPart::Type::Text, "it's", {}}}};
  EXPECT_EQ(text_only.render(std::span(&m, 1), false),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n"
            "[{'type': 'image'}, {'type': 'text', 'text': \"it's\"}]<|eot_id|>");
}

TEST(ChatContentParts, Llama4TemplateRendersImagesAndTrimsTheSystemText) {
  // Meta's Llama-4 instruct template, as transformers ships it.
  const std::string jinja = read_text_file(fs::path(EAGLEVK_ASSETS).parent_path() /
                                           "tests/data/chat_templates/transformers-Llama4Processor.jinja");
  const ChatTemplate chat = ChatTemplate::from_string(jinja, "<|begin_of_text|>");
  const std::vector<ChatMessage> messages = {
      {"system", "", {{ChatContentPart::Type::Text, "  Be brief. ", {}}}},
      {"user", "", {{ChatContentPart::Type::Image, "", "x.png"}, {ChatContentPart::Type::Text, " Describe. ", {}}}}};
  EXPECT_EQ(chat.render(messages, true),
            "<|begin_of_text|><|header_start|>system<|header_end|>\n\nBe brief.<|eot|>"
            "<|header_start|>user<|header_end|>\n\n<|image|> Describe. <|eot|>"
            "<|header_start|>assistant<|header_end|>\n\n");
}

// ---- Messages JSON ----------------------------------------------------------------------------

TEST(ChatMessagesJson, ParsesStringsPartsAndImagePaths) {
  const ParsedChat chat = parse_chat_messages_json(
      R"([{"role": "system", "content": "Be brief."},
          {"role": "user", "content": [{"type": "text", "text": "A: "}, {"type": "image", "image": "a.png"},
                                       {"type": "image", "image": "/abs/b.jpg", "extra": 1}]}])",
      "/base/dir");
  ASSERT_EQ(chat.messages.size(), 2u);
  EXPECT_EQ(chat.messages[0].content, "Be brief.");
  EXPECT_TRUE(chat.messages[0].parts.empty());
  ASSERT_EQ(chat.messages[1].parts.size(), 3u);
  EXPECT_EQ(chat.messages[1].parts[0].text, "A: ");
  EXPECT_EQ(chat.images, (std::vector<fs::path>{"/base/dir/a.png", "/abs/b.jpg"}));
}

TEST(ChatMessagesJson, ErrorsNameTheMessageAndPartButNeverEchoTheInput) {
  auto parse = [](const std::string& text) { return parse_chat_messages_json(text, "/base"); };
  expect_error([&] { parse(R"({"role": "user"})"); }, "must be a JSON list, got object");
  expect_error([&] { parse(R"([{"content": "hi"}])"); }, "messages[0]: missing \"role\"");
  expect_error([&] { parse(R"([{"role": 7, "content": "hi"}])"); }, "\"role\" must be a string, got number");
  expect_error([&] { parse(R"([{"role": "user"}])"); }, "missing \"content\"");
  expect_error([&] { parse(R"([{"role": "user", "content": {"SECRET": 1}}])"); },
               "\"content\" must be a string or a list of parts, got object");
  expect_error([&] { parse(R"([{"role": "user", "content": ["SECRET"]}])"); }, "content[0]: a content part must be");
  expect_error([&] { parse(R"([{"role": "user", "content": [{"type": "video", "video": "v.mp4"}]}])"); },
               "unsupported content part type \"video\"");
  expect_error([&] { parse(R"([{"role": "user", "content": [{"text": "x"}]}])"); }, "missing \"type\"");
  expect_error([&] { parse(R"([{"role": "user", "content": [{"type": "text"}]}])"); }, "missing \"text\"");
  expect_error([&] { parse(R"([{"role": "user", "content": [{"type": "image", "image": ["SECRET"]}]}])"); },
               "\"image\" must be a string, got array");
  expect_error([&] { parse(R"([{"role": "user", "content": [{"type": "image", "image": ""}]}])"); }, "empty path");
  expect_error([&] { parse("[{"); }, "invalid JSON");
  // No message repeats the offending value.
  for (const char* text : {R"([{"role": "user", "content": {"SECRET": 1}}])",
                           R"([{"role": "user", "content": ["SECRET"]}])",
                           R"([{"role": "user", "content": [{"type": "image", "image": ["SECRET"]}]}])"}) {
    try {
      parse(text);
      ADD_FAILURE() << "no error for " << text;
    } catch (const eaglevk::Error& e) {
      EXPECT_EQ(std::string(e.what()).find("SECRET"), std::string::npos) << e.what();
    }
  }
}
