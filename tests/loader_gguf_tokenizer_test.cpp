// The tokenizer and chat template of a GGUF file (tokenizer.ggml.* keys): the golden prompt ids
// of both tiny pairs, agreement with the tokenizer.json of the same model on prompts, Unicode
// edge cases and random text, the same chat rendering as tokenizer_config.json, Llama-4's
// split regex, and clear errors for metadata this runtime cannot serve.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>

#include <nlohmann/json.hpp>

#include <eaglevk/error.h>

#include "loader/gguf.h"
#include "loader/gguf_tokenizer.h"
#include "support/loader_test_util.h"

namespace fs = std::filesystem;
using eaglevk::loader::ChatMessage;
using eaglevk::loader::ChatTemplate;
using eaglevk::loader::GgufFile;
using eaglevk::loader::GgufHeader;
using eaglevk::loader::GgufType;
using eaglevk::loader::GgufValue;
using eaglevk::loader::Tokenizer;
using nlohmann::json;

namespace {

const fs::path kAssets = fs::path(EAGLEVK_ASSETS);

struct Pair {
  std::string name;  // tiny-llama3, tiny-llama4
  fs::path dir() const { return kAssets / name; }
  fs::path gguf() const { return kAssets / "gguf" / name / (name + "-f16.gguf"); }
};
const Pair kPairs[] = {{"tiny-llama3"}, {"tiny-llama4"}};

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

const GgufHeader& header(const Pair& p) {
  static std::map<std::string, GgufHeader> cache;
  auto it = cache.find(p.name);
  if (it == cache.end()) it = cache.emplace(p.name, GgufFile::open(p.gguf()).header).first;
  return it->second;
}

// The Unicode edge cases of loader_tokenizer_test, and random text from the same ranges.
std::vector<std::string> corpus() {
  std::vector<std::string> texts = {
      "", " ", "  ", "\t", "\t\tindented\twith tabs\t", "\n", "\n\n\n", "\r\n",
      "line one\r\nline two\r\n\r\n\r\nline five", "   leading spaces", "trailing spaces   ", "trailing newline \n",
      "mixed \t\n \r\n \v\f whitespace    runs\n\n   \n", std::string("embedded\0nul", 12), "👍",
      "👨‍👩‍👧‍👦 family, 🏳️‍🌈 flag, 👍🏽 skin tone, 🇯🇵 regional indicators", "日本語のテキスト、中文文本。한국어 텍스트",
      "1234567890123456789012345678901234567890", "3.14159 1,000,000 -42 1e-10 0x1F ١٢٣٤٥ ४२",
      "I'LL DON'T we'd You'Re it's IT'S they've SHE'D I'm",
      "Привет мир, مرحبا بالعالم, नमस्ते दुनिया, Γειά σου κόσμε, שלום עולם",
      "e\u0301 a\u0308\u0304 Z\u0351\u0308\u0334a\u0336\u0300l\u0337g\u0358o",
      "non\u00a0breaking\u2028line\u2029para\u200bzero\u200dwidth\ufeffbom\u3000ideographic", "tab\u0085nel",
      "def f(x):\n    return {'a': [1, 2, 3]}  # comment\n", "<|begin_of_text|>special in text<|eot_id|>",
      "<|eot_id almost special <|eot_id|><|eot_id|>", "ſ K Å Ω ﬁ ẞ ǅ", "\U0010FFFD private use \U000F0000",
  };
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) texts.push_back(eaglevk::testing::random_utf8_text(rng));
  return texts;
}

GgufValue string_value(const std::string& s) { return {GgufType::STRING, GgufType::U8, json(s)}; }
GgufValue string_array(const std::vector<std::string>& v) { return {GgufType::ARRAY, GgufType::STRING, json(v)}; }
GgufValue int_array(const std::vector<int64_t>& v) { return {GgufType::ARRAY, GgufType::I32, json(v)}; }

// The message of the Error that building a tokenizer from `h` throws ("" when none).
std::string error_of(const GgufHeader& h) {
  try {
    eaglevk::loader::tokenizer_from_gguf(h);
  } catch (const eaglevk::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(GgufTokenizer, GoldenPromptsEncodeToTheGoldenIds) {
  for (const Pair& p : kPairs) {
    const Tokenizer t = eaglevk::loader::tokenizer_from_gguf(header(p));
    const std::string bos = t.token(t.bos_id());
    const json golden = json::parse(read_file(p.dir() / "golden.json"));
    int checked = 0;
    for (const json& prompt : golden["prompts"]) {
      const std::string text = prompt["prompt_text"].get<std::string>();
      const auto expected = prompt["prompt_ids"].get<std::vector<int32_t>>();
      // Chat prompts were rendered with the template, which writes BOS itself.
      const bool has_bos = text.starts_with(bos);
      EXPECT_EQ(t.encode(text, !has_bos), expected) << p.name << " prompt " << prompt["id"];
      EXPECT_EQ(t.decode(expected), has_bos ? text : bos + text) << p.name << " prompt " << prompt["id"];
      ++checked;
    }
    EXPECT_EQ(checked, 15) << p.name;
  }
}

TEST(GgufTokenizer, AgreesWithTokenizerJson) {
  const std::vector<std::string> texts = corpus();
  for (const Pair& p : kPairs) {
    const Tokenizer g = eaglevk::loader::tokenizer_from_gguf(header(p));
    const Tokenizer hf = Tokenizer::load(p.dir());
    ASSERT_EQ(g.vocab_size(), hf.vocab_size()) << p.name;
    EXPECT_EQ(g.bos_id(), hf.bos_id()) << p.name;
    auto sorted = [](std::vector<int32_t> v) {
      std::sort(v.begin(), v.end());
      return v;
    };
    // A set: generation_config.json lists them in its own order.
    EXPECT_EQ(sorted(g.eos_ids()), sorted(hf.eos_ids())) << p.name;
    EXPECT_EQ(g.eos_ids().front(), 4095) << "tokenizer.ggml.eos_token_id comes first";
    for (int32_t id = 0; id < g.vocab_size(); ++id) {
      ASSERT_EQ(g.token(id), hf.token(id)) << p.name << " id " << id;
      ASSERT_EQ(g.token_bytes(id), hf.token_bytes(id)) << p.name << " id " << id;
      ASSERT_EQ(g.is_special(id), hf.is_special(id)) << p.name << " id " << id;
    }
    std::vector<std::string> all = texts;
    const json golden = json::parse(read_file(p.dir() / "golden.json"));
    for (const json& prompt : golden["prompts"]) all.push_back(prompt["prompt_text"].get<std::string>());
    for (const std::string& text : all) {
      for (bool add_special : {true, false}) {
        const auto ids = g.encode(text, add_special);
        ASSERT_EQ(ids, hf.encode(text, add_special)) << p.name << " text: " << text;
        EXPECT_EQ(g.decode(ids), hf.decode(ids)) << p.name;
        EXPECT_EQ(g.decode(ids, true), hf.decode(ids, true)) << p.name;
        if (!add_special) {
          EXPECT_EQ(g.decode(ids), text) << p.name;
        }
      }
    }
  }
}

TEST(GgufTokenizer, ChatTemplateRendersAsTokenizerConfig) {
  for (const Pair& p : kPairs) {
    const Tokenizer t = eaglevk::loader::tokenizer_from_gguf(header(p));
    const std::optional<ChatTemplate> g = eaglevk::loader::chat_template_from_gguf(header(p), t);
    ASSERT_TRUE(g.has_value()) << p.name;
    const ChatTemplate hf = ChatTemplate::load(p.dir());
    EXPECT_EQ(g->source, hf.source) << p.name;
    EXPECT_EQ(g->bos_token, hf.bos_token) << p.name;
    const json golden = json::parse(read_file(p.dir() / "golden.json"));
    std::ifstream lines(p.dir() / "prompts.jsonl");
    int chats = 0;
    for (std::string line; std::getline(lines, line);) {
      const json row = json::parse(line);
      if (!row.contains("messages")) continue;
      std::vector<ChatMessage> messages;
      for (const json& m : row["messages"]) messages.push_back({m["role"], m["content"]});
      for (bool gen : {true, false}) EXPECT_EQ(g->render(messages, gen), hf.render(messages, gen)) << p.name;
      // The rendered text is the golden prompt, and it tokenizes to the golden ids.
      const json& prompt = golden["prompts"][row["id"].get<size_t>()];
      const std::string text = g->render(messages, true);
      EXPECT_EQ(text, prompt["prompt_text"].get<std::string>()) << p.name << " prompt " << row["id"];
      EXPECT_EQ(t.encode(text, false), prompt["prompt_ids"].get<std::vector<int32_t>>()) << p.name;
      ++chats;
    }
    EXPECT_EQ(chats, 5) << p.name;
  }
  // No template key: no template.
  GgufHeader h = header(kPairs[0]);
  h.metadata.erase("tokenizer.chat_template");
  EXPECT_FALSE(eaglevk::loader::chat_template_from_gguf(h, eaglevk::loader::tokenizer_from_gguf(h)).has_value());
  // A template the engine does not render: the error names the key.
  h.metadata["tokenizer.chat_template"] = string_value("{% include 'chat.jinja' %}");
  try {
    eaglevk::loader::chat_template_from_gguf(h, eaglevk::loader::tokenizer_from_gguf(h));
    ADD_FAILURE() << "no error for an unknown template";
  } catch (const eaglevk::Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.chat_template"), std::string::npos) << e.what();
  }
}

TEST(GgufTokenizer, Llama4PreTokenizerUsesTheO200kRegex) {
  // The tiny pairs both say 'llama-bpe'; the Llama-4 regex must give what a tokenizer.json
  // with Llama-4's Split pattern gives, and differ from Llama-3's where the regexes differ
  // (case changes inside a word, contractions kept on the word, '/' after punctuation).
  GgufHeader h = header(kPairs[1]);
  h.metadata["tokenizer.ggml.pre"] = string_value("llama4");
  const Tokenizer llama4 = eaglevk::loader::tokenizer_from_gguf(h);
  json j = json::parse(read_file(kPairs[1].dir() / "tokenizer.json"));
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] =
      R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  const Tokenizer reference = Tokenizer::from_json(j.dump(), {}, {}, "llama4 tokenizer.json");
  const Tokenizer llama3 = eaglevk::loader::tokenizer_from_gguf(header(kPairs[1]));
  for (const std::string& text : corpus()) ASSERT_EQ(llama4.encode(text, true), reference.encode(text, true)) << text;
  // " ValueError" is one token of the tiny vocabulary, which Llama-3's regex keeps whole and
  // Llama-4's splits at the case change.
  const std::string differs = "raise ValueError";
  EXPECT_EQ(llama4.encode(differs, true), reference.encode(differs, true));
  EXPECT_EQ(llama3.encode(differs, false).back(), *llama3.token_id("ĠValueError"));
  EXPECT_NE(llama4.encode(differs, false), llama3.encode(differs, false));
  // One pre-token per camel-case word: the ids of the parts, concatenated.
  auto joined = [&](std::initializer_list<std::string_view> parts) {
    std::vector<int32_t> ids;
    for (std::string_view part : parts) {
      const auto p = llama4.encode(part, false);
      ids.insert(ids.end(), p.begin(), p.end());
    }
    return ids;
  };
  EXPECT_EQ(llama4.encode("getElementById", false), joined({"get", "Element", "By", "Id"}));
}

TEST(GgufTokenizer, Qwen2PreTokenizerSplitsDigitsOneByOne) {
  // Qwen2's and Qwen3's GGUF files say 'qwen2': their tokenizer.json's Split pattern, which
  // is Llama-3's with every digit a pre-token of its own.
  GgufHeader h = header(kPairs[0]);
  h.metadata["tokenizer.ggml.pre"] = string_value("qwen2");
  const Tokenizer qwen = eaglevk::loader::tokenizer_from_gguf(h);
  json j = json::parse(read_file(kPairs[0].dir() / "tokenizer.json"));
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  const Tokenizer reference = Tokenizer::from_json(j.dump(), {}, {}, "qwen2 tokenizer.json");
  for (const std::string& text : corpus()) ASSERT_EQ(qwen.encode(text, true), reference.encode(text, true)) << text;
  std::vector<int32_t> digits;
  for (const char* d : {"2", "0", "2", "6"}) {
    const std::vector<int32_t> one = qwen.encode(d, false);
    digits.insert(digits.end(), one.begin(), one.end());
  }
  EXPECT_EQ(qwen.encode("2026", false), digits);
}

TEST(GgufTokenizer, AddBosAndEosFollowTheKeys) {
  GgufHeader h = header(kPairs[0]);
  h.metadata["tokenizer.ggml.add_bos_token"] = {GgufType::BOOL, GgufType::U8, json(false)};
  const Tokenizer no_bos = eaglevk::loader::tokenizer_from_gguf(h);
  const Tokenizer with_bos = eaglevk::loader::tokenizer_from_gguf(header(kPairs[0]));
  EXPECT_EQ(with_bos.encode("hi", true).front(), 4091);
  EXPECT_EQ(no_bos.encode("hi", true), no_bos.encode("hi", false));
  EXPECT_EQ(no_bos.bos_id(), 4091);  // still known, just not added
  h.metadata["tokenizer.ggml.add_eos_token"] = {GgufType::BOOL, GgufType::U8, json(true)};
  EXPECT_EQ(eaglevk::loader::tokenizer_from_gguf(h).encode("hi", true).back(), 4095);
}

TEST(GgufTokenizer, BadMetadataGivesClearErrors) {
  const GgufHeader& good = header(kPairs[0]);
  auto expect_error = [&](const std::function<void(GgufHeader&)>& edit, std::initializer_list<std::string> needles) {
    GgufHeader h = good;
    edit(h);
    const std::string message = error_of(h);
    ASSERT_FALSE(message.empty()) << "no error; expected one mentioning " << *needles.begin();
    EXPECT_NE(message.find(good.label), std::string::npos) << message;
    for (const std::string& needle : needles) EXPECT_NE(message.find(needle), std::string::npos) << message;
  };
  auto set = [](const std::string& key, GgufValue value) {
    return [key, value](GgufHeader& h) { h.metadata[key] = value; };
  };
  auto erase = [](const std::string& key) { return [key](GgufHeader& h) { h.metadata.erase(key); }; };
  const auto tokens = *good.get_string_array("tokenizer.ggml.tokens");
  const auto types = *good.get_int_array("tokenizer.ggml.token_type");
  const auto merges = *good.get_string_array("tokenizer.ggml.merges");

  expect_error(set("tokenizer.ggml.model", string_value("llama")), {"'llama'", "SentencePiece", "gpt2"});
  expect_error(set("tokenizer.ggml.model", string_value("bert")), {"'bert'"});
  expect_error(erase("tokenizer.ggml.model"), {"tokenizer.ggml.model"});
  expect_error(set("tokenizer.ggml.pre", string_value("deepseek-llm")), {"'deepseek-llm'", "llama-bpe", "llama4", "qwen2"});
  expect_error(erase("tokenizer.ggml.pre"), {"tokenizer.ggml.pre"});
  expect_error(erase("tokenizer.ggml.tokens"), {"tokenizer.ggml.tokens"});
  expect_error(erase("tokenizer.ggml.token_type"), {"tokenizer.ggml.token_type"});
  expect_error(erase("tokenizer.ggml.merges"), {"tokenizer.ggml.merges"});
  expect_error(set("tokenizer.ggml.token_type", int_array(std::vector<int64_t>(types.begin(), types.end() - 1))),
               {"4096", "4095", "token_type"});
  {
    auto bad_types = types;
    bad_types[17] = 9;
    expect_error(set("tokenizer.ggml.token_type", int_array(bad_types)), {"token_type[17]", "9"});
  }
  {
    auto dup = tokens;
    dup[300] = dup[200];
    expect_error(set("tokenizer.ggml.tokens", string_array(dup)), {"tokens[300]", "tokens[200]"});
  }
  {
    auto empty = tokens;
    empty[5].clear();
    expect_error(set("tokenizer.ggml.tokens", string_array(empty)), {"tokens[5]", "empty"});
  }
  {
    auto bad = merges;
    bad[3] = "Ġ zzqx";
    expect_error(set("tokenizer.ggml.merges", string_array(bad)), {"merges[3]", "zzqx", "not in tokenizer.ggml.tokens"});
    bad[3] = "nospace";
    expect_error(set("tokenizer.ggml.merges", string_array(bad)), {"merges[3]", "\"left right\""});
    // A merge may not produce a special token either.
    bad[3] = "<|eot_id|> Ġ";
    expect_error(set("tokenizer.ggml.merges", string_array(bad)), {"merges[3]", "<|eot_id|>"});
  }
  expect_error(set("tokenizer.ggml.bos_token_id", {GgufType::U32, GgufType::U8, json(5000)}),
               {"bos_token_id", "5000"});
  expect_error(set("tokenizer.ggml.eos_token_id", {GgufType::I32, GgufType::U8, json(-1)}), {"eos_token_id", "-1"});
  expect_error(erase("tokenizer.ggml.bos_token_id"), {"add_bos_token", "bos_token_id"});
  // Wrong value types are reported by the GGUF accessors, naming the key.
  expect_error(set("tokenizer.ggml.tokens", int_array({1, 2})), {"tokenizer.ggml.tokens"});
  // Scores, one per token like the types: a list of another length is refused by both counts,
  // one of the right length is accepted (a byte-level BPE vocabulary does not use them).
  {
    const GgufValue short_scores{GgufType::ARRAY, GgufType::F32, json(std::vector<double>(tokens.size() - 3, 0.5))};
    expect_error(set("tokenizer.ggml.scores", short_scores),
                 {"tokenizer.ggml.tokens has 4096 entries but tokenizer.ggml.scores has 4093"});
    GgufHeader h = good;
    h.metadata["tokenizer.ggml.scores"] = {GgufType::ARRAY, GgufType::F32, json(std::vector<double>(tokens.size(), 0.5))};
    EXPECT_EQ(error_of(h), "");
  }
}
