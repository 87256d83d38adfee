// Hostile JSON nesting: a value nested 100,000 deep in a field that an error message reports.
// nlohmann parses and destroys such a document without recursion, but dump() and copying
// recurse once per level, and 100,000 levels overflow the 8 MiB main-thread stack (the death
// test below checks that this build does crash so, which is what makes the other tests
// meaningful): before json_excerpt, each of these loads died with SIGSEGV.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include <eaglevk/error.h>

#include "loader/eagle3_config.h"
#include "loader/gguf.h"
#include "loader/hf_config.h"
#include "loader/json_excerpt.h"
#include "loader/safetensors.h"
#include "loader/tokenizer.h"
#include "support/loader_test_util.h"

namespace fs = std::filesystem;
using eaglevk::testing::expect_error;
using namespace eaglevk::loader;
using nlohmann::json;

namespace {

constexpr size_t kDepth = 100000;

// "[[[...1...]]]", `depth` brackets deep.
std::string deep_array(size_t depth = kDepth) { return std::string(depth, '[') + "1" + std::string(depth, ']'); }

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// `text` with the JSON string "@DEEP@" replaced by `deep`: the document is built as text,
// because building it as a json value and dumping it would itself recurse.
std::string with_deep(std::string text, const std::string& deep = deep_array()) {
  const size_t at = text.find("\"@DEEP@\"");
  EXPECT_NE(at, std::string::npos);
  return text.replace(at, 8, deep);
}

// Catches the error and checks the message is short and shows the elided value.
void expect_short_error(const std::function<void()>& f, const std::string& word) {
  try {
    f();
    ADD_FAILURE() << "no error (expected one mentioning '" << word << "')";
  } catch (const eaglevk::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(word), std::string::npos) << what;
    EXPECT_LT(what.size(), 600u) << what.substr(0, 600);
  }
}

struct TempDir {
  fs::path path = fs::temp_directory_path() / fmt::format("eaglevk_json_depth_{}", ::getpid());
  TempDir() { fs::create_directories(path); }
  ~TempDir() { fs::remove_all(path); }
};

TEST(JsonDepth, NlohmannParsesAndDestroysDeepDocumentsWithoutRecursion) {
  for (const std::string& text : {deep_array(), std::string(kDepth, '[') + std::string(kDepth, ']'),
                                  [] {
                                    std::string s;
                                    for (size_t i = 0; i < kDepth; ++i) s += "{\"a\":";
                                    return s + "1" + std::string(kDepth, '}');
                                  }()}) {
    json j = json::parse(text);
    EXPECT_TRUE(j.is_structured());
    j = nullptr;  // the destructor runs here
  }
}

// Guards the premise of this file: if dump() stopped recursing, the tests below would pass
// on the old code too.
TEST(JsonDepthDeathTest, DumpOfADeepValueOverflowsTheStack) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const json j = json::parse(deep_array());
  EXPECT_DEATH((void)j.dump(), "");
}

TEST(JsonDepth, ExcerptIsShortAndBounded) {
  const json deep = json::parse(deep_array());
  EXPECT_EQ(json_excerpt(deep), "array [[[[...]]]]");
  EXPECT_EQ(json_text(deep), "[[[[...]]]]");
  // Small values read exactly as dump() writes them.
  for (const char* text : {"1", "-2", "1.5", "true", "null", "\"x\\n\"", "[1,[2,[3]]]", "{\"a\":{\"b\":[1]}}", "[]", "{}"})
    EXPECT_EQ(json_text(json::parse(text)), json::parse(text).dump()) << text;
  EXPECT_EQ(json_excerpt(json::parse("\"abc\"")), "string \"abc\"");
  EXPECT_EQ(json_excerpt(json::parse("8.5")), "number 8.5");
  EXPECT_EQ(json_excerpt(json()), "null");
  // Long strings, long arrays and wide objects are cut near the limit.
  EXPECT_LE(json_excerpt(json(std::string(100000, 'x'))).size(), 100u);
  EXPECT_LE(json_excerpt(json(std::vector<int>(100000, 7))).size(), 100u);
  json wide = json::object();
  for (int i = 0; i < 10000; ++i) wide[std::to_string(i)] = i;
  EXPECT_LE(json_excerpt(wide).size(), 110u);
  // Invalid UTF-8 (possible in a GGUF string) and a multi-byte character cut by the limit.
  EXPECT_NO_THROW(json_excerpt(json(std::string("\xff\xfe"))));
  EXPECT_NO_THROW(json_excerpt(json(std::string(79, 'a') + "\xE2\x82\xAC"), 80));
}

TEST(JsonDepth, ConfigFieldNestedDeepGivesAShortError) {
  std::string config = read_file(fs::path(EAGLEVK_ASSETS) / "tiny-llama3" / "config.json");
  json j = json::parse(config);
  for (const char* field : {"hidden_size", "rms_norm_eps", "tie_word_embeddings", "rope_scaling"}) {
    j[field] = "@DEEP@";
    const std::string text = with_deep(j.dump());
    j = json::parse(config);
    // Parsed JSON reaches the field reader, whose message shows an excerpt.
    const json parsed = json::parse(text);
    expect_short_error([&] { parse_llama_config(parsed, "config.json"); }, "got array [[[[...]]]]");
    // A file is refused as it is read: code beyond the readers copies and prints config values.
    TempDir dir;
    std::ofstream(dir.path / "config.json", std::ios::binary) << text;
    expect_short_error([&] { load_llama_config(dir.path); }, "config.json: JSON nested more than 64 levels deep");
  }
}

TEST(JsonDepth, NestingDepthIsMeasuredWithoutRecursion) {
  EXPECT_FALSE(json_nested_deeper_than(json(1), 0));
  EXPECT_TRUE(json_nested_deeper_than(json::parse("[]"), 0));
  EXPECT_FALSE(json_nested_deeper_than(json::parse("[[1], {\"a\": [2]}]"), 3));
  EXPECT_TRUE(json_nested_deeper_than(json::parse("[[1], {\"a\": [2]}]"), 2));
  EXPECT_FALSE(json_nested_deeper_than(json::parse(deep_array(64)), 64));
  EXPECT_TRUE(json_nested_deeper_than(json::parse(deep_array(65)), 64));
  EXPECT_TRUE(json_nested_deeper_than(json::parse(deep_array()), 64));
  // The real files are far from the limit.
  for (const char* file : {"tiny-llama4/config.json", "tiny-llama4-eagle3/config.json", "tiny-llama3/tokenizer.json"})
    EXPECT_FALSE(json_nested_deeper_than(json::parse(read_file(fs::path(EAGLEVK_ASSETS) / file)), 8)) << file;
}

TEST(JsonDepth, Eagle3ConfigsWithDeepValues) {
  const json base = json::parse(read_file(fs::path(EAGLEVK_ASSETS) / "tiny-llama3-eagle3" / "config.json"));
  // A deep value in a field nobody reads: the old loader copied the whole config to rename its
  // architecture, and the copy recursed once per level.
  json j = base;
  j["unused"] = "@DEEP@";
  const Eagle3Config c = parse_eagle3_config(json::parse(with_deep(j.dump())), "config.json");
  EXPECT_EQ(c.layer.architecture, "LlamaForCausalLM");
  EXPECT_EQ(c.layer.hidden_size, 256);
  for (const char* field : {"eagle_aux_hidden_state_layer_ids", "draft_vocab_size"}) {
    j = base;
    j[field] = "@DEEP@";
    const json parsed = json::parse(with_deep(j.dump()));
    expect_short_error([&] { parse_eagle3_config(parsed, "config.json"); }, "array [[[[...]]]]");
  }
  j = base;
  j["eagle_aux_hidden_state_layer_ids"] = {1, "@DEEP@", 3};
  const json parsed = json::parse(with_deep(j.dump()));
  expect_short_error([&] { parse_eagle3_config(parsed, "config.json"); }, "holds array [[[[...]]]], not a layer id");
}

TEST(JsonDepth, TokenizerFieldsNestedDeepGiveShortErrors) {
  const std::string tokenizer = read_file(fs::path(EAGLEVK_ASSETS) / "tiny-llama3" / "tokenizer.json");
  const json base = json::parse(tokenizer);
  struct Case {
    std::function<void(json&)> edit;
    std::string expected;
  };
  const Case cases[] = {
      {[](json& j) { j["added_tokens"][0]["id"] = "@DEEP@"; }, "expected an integer token id, got array [[[[...]]]]"},
      {[](json& j) { j["normalizer"] = "@DEEP@"; }, "normalizers are not supported (got array [[[[...]]]])"},
      {[](json& j) { j["post_processor"] = {{"type", "TemplateProcessing"}, {"single", {"@DEEP@"}}, {"pair", json::array()},
                                            {"special_tokens", json::object()}}; },
       "unrecognised template piece array [[[[...]]]]"},
  };
  for (const Case& c : cases) {
    json j = base;
    c.edit(j);
    const std::string text = with_deep(j.dump());
    expect_short_error([&] { Tokenizer::from_json(text, {}, {}, "tokenizer.json"); }, c.expected);
  }
  // A deep value nobody reports: the post-processor's special_tokens used to be copied.
  {
    json j = base;
    j["post_processor"] = {{"type", "TemplateProcessing"}, {"single", {"$A"}}, {"special_tokens", "@DEEP@"}};
    const std::string text = with_deep(j.dump());
    EXPECT_NO_THROW(Tokenizer::from_json(text, {}, {}, "tokenizer.json"));
  }
  // Sequences nested 50,000 deep: each level used to recurse with a longer JSON path.
  for (const char* key : {"pre_tokenizer", "post_processor", "decoder"}) {
    const std::string list = std::string(key) == "pre_tokenizer"    ? "pretokenizers"
                             : std::string(key) == "post_processor" ? "processors"
                                                                    : "decoders";
    std::string deep;
    for (size_t i = 0; i < kDepth / 2; ++i) deep += "{\"type\":\"Sequence\",\"" + list + "\":[";
    deep += "{\"type\":\"ByteLevel\"}";
    for (size_t i = 0; i < kDepth / 2; ++i) deep += "]}";
    json j = base;
    j[key] = "@DEEP@";
    const std::string text = with_deep(j.dump(), deep);
    expect_short_error([&] { Tokenizer::from_json(text, {}, {}, "tokenizer.json"); }, "Sequence nested more than 16 deep");
  }
}

TEST(JsonDepth, SafetensorsHeaderAndIndexWithDeepValues) {
  const std::string header = with_deep(R"({"w": {"dtype": "F32", "shape": [2, "@DEEP@"], "data_offsets": [0, 8]}})");
  std::string file(8, '\0');
  const uint64_t length = header.size();
  std::memcpy(file.data(), &length, 8);
  file += header + std::string(8, '\0');
  expect_short_error(
      [&] { parse_safetensors({reinterpret_cast<const std::byte*>(file.data()), file.size()}, "model.safetensors"); },
      "shape entry array [[[[...]]]] is not an integer");
  // Index metadata keeps non-string values as JSON text, bounded.
  const SafetensorsIndex index = parse_safetensors_index(
      with_deep(R"({"metadata": {"total_size": 8, "deep": "@DEEP@"}, "weight_map": {"w": "model.safetensors"}})"),
      "model.safetensors.index.json");
  EXPECT_EQ(index.metadata.at("total_size"), "8");
  EXPECT_EQ(index.metadata.at("deep"), "[[[[...]]]]");
  EXPECT_EQ(index.weight_map.at("w"), "model.safetensors");
}

TEST(JsonDepth, GgufMetadataValueNestedDeepGivesAShortError) {
  TempDir dir;
  for (GgufType type : {GgufType::U32, GgufType::F32, GgufType::BOOL, GgufType::STRING}) {
    std::vector<std::pair<std::string, GgufValue>> metadata;
    // Moved in, never copied: a copy of the deep value would recurse.
    GgufValue value{type, GgufType::U8, json::parse(deep_array())};
    metadata.emplace_back("general.deep", std::move(value));
    expect_short_error([&] { write_gguf(dir.path / "deep.gguf", metadata, {}); }, "'general.deep': array [[[[...]]]]");
  }
}

}  // namespace
