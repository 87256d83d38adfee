// Tokenizer tests on the tiny Llama-3-style tokenizer (assets/tiny-llama3): golden prompt ids,
// round trips on Unicode edge cases, streaming decode, added-token handling and clear errors for
// malformed tokenizer.json files.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <fstream>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include <eaglevk/error.h>

#include "loader/pretokenize.h"
#include "loader/tokenizer.h"
#include "support/loader_test_util.h"

namespace fs = std::filesystem;
using eaglevk::loader::StreamDecoder;
using eaglevk::loader::Tokenizer;
using nlohmann::json;

namespace {

const fs::path kTinyDir = fs::path(EAGLEVK_ASSETS) / "tiny-llama3";

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

const Tokenizer& tiny() {
  static const Tokenizer tokenizer = Tokenizer::load(kTinyDir);
  return tokenizer;
}

json tiny_json() { return json::parse(read_file(kTinyDir / "tokenizer.json")); }

Tokenizer from(const json& j) { return Tokenizer::from_json(j.dump(), {}, {}, "test tokenizer.json"); }

bool valid_utf8(std::string_view s) { return eaglevk::loader::first_invalid_utf8(s) == std::string_view::npos; }

// The Unicode edge cases every round trip is checked on.
std::vector<std::string> edge_cases() {
  return {
      "",
      " ",
      "  ",
      "\t",
      "\t\tindented\twith tabs\t",
      "\n",
      "\n\n\n",
      "\r\n",
      "line one\r\nline two\r\n\r\n\r\nline five",
      "   leading spaces",
      "trailing spaces   ",
      "trailing newline \n",
      "mixed \t\n \r\n \v\f whitespace    runs\n\n   \n",
      std::string("embedded\0nul", 12),
      "👍",
      "👨‍👩‍👧‍👦 family, 🏳️‍🌈 flag, 👍🏽 skin tone, 🇯🇵 regional indicators",
      "日本語のテキスト、中文文本。한국어 텍스트",
      "1234567890123456789012345678901234567890",
      "3.14159 1,000,000 -42 1e-10 0x1F ١٢٣٤٥ ४२",
      "I'LL DON'T we'd You'Re it's IT'S they've SHE'D I'm",
      "Привет мир, مرحبا بالعالم, नमस्ते दुनिया, Γειά σου κόσμε, שלום עולם",
      "e\u0301 a\u0308\u0304 Z\u0351\u0308\u0334a\u0336\u0300l\u0337g\u0358o",
      "non\u00a0breaking\u2028line\u2029para\u200bzero\u200dwidth\ufeffbom\u3000ideographic",
      "tab\u0085nel",
      "def f(x):\n    return {'a': [1, 2, 3]}  # comment\n",
      "<|begin_of_text|>special in text<|eot_id|>",
      "<|eot_id almost special <|eot_id|><|eot_id|>",
      "ſ K Å Ω ﬁ ẞ ǅ",
      "\U0010FFFD private use \U000F0000",
  };
}

}  // namespace

TEST(Tokenizer, LoadsTinyVocabularyAndSpecialIds) {
  const Tokenizer& t = tiny();
  EXPECT_EQ(t.vocab_size(), 4096);
  EXPECT_EQ(t.bos_id(), 4091);
  EXPECT_EQ(t.eos_ids(), (std::vector<int32_t>{4092, 4095}));
  EXPECT_EQ(t.token_id("<|eot_id|>"), 4095);
  EXPECT_EQ(t.token_id("<|begin_of_text|>"), 4091);
  EXPECT_EQ(t.token_id("Ġ"), 32);  // vocabulary strings are in byte-level form; ids 0-255 are the bytes
  EXPECT_EQ(t.token_id("no such token"), std::nullopt);
  EXPECT_TRUE(t.is_special(4095));
  EXPECT_FALSE(t.is_special(32));
  EXPECT_FALSE(t.is_special(-1));
  EXPECT_FALSE(t.is_special(999999));
  EXPECT_EQ(t.token_bytes(32), " ");
  EXPECT_EQ(t.token(32), "Ġ");
  EXPECT_EQ(t.token_bytes(4095), "<|eot_id|>");
  EXPECT_THROW(t.token_bytes(4096), eaglevk::Error);
  EXPECT_THROW(t.token_bytes(-5), eaglevk::Error);
}

TEST(Tokenizer, RawGoldenPromptsEncodeWithBos) {
  const json golden = json::parse(read_file(kTinyDir / "golden.json"));
  std::ifstream prompts(kTinyDir / "prompts.jsonl");
  std::string line;
  int checked = 0;
  while (std::getline(prompts, line)) {
    const json p = json::parse(line);
    if (p["type"] != "raw") continue;
    const int id = p["id"].get<int>();
    const auto expected = golden["prompts"][id]["prompt_ids"].get<std::vector<int32_t>>();
    const std::string text = p["text"].get<std::string>();
    EXPECT_EQ(tiny().encode(text, true), expected) << "prompt " << id;
    // Without add_special, the same ids minus the BOS.
    EXPECT_EQ(tiny().encode(text, false), std::vector<int32_t>(expected.begin() + 1, expected.end()));
    EXPECT_EQ(tiny().decode(expected, /*skip_special=*/true), text);
    EXPECT_EQ(tiny().decode(expected), "<|begin_of_text|>" + text);
    ++checked;
  }
  EXPECT_EQ(checked, 10);
}

TEST(Tokenizer, RoundTripsEdgeCases) {
  for (const std::string& text : edge_cases()) {
    const auto ids = tiny().encode(text, false);
    EXPECT_EQ(tiny().decode(ids), text) << "text: " << text;
  }
  EXPECT_TRUE(tiny().encode("", false).empty());
  EXPECT_EQ(tiny().encode("", true), std::vector<int32_t>{4091});
}

TEST(Tokenizer, PreTokenizationFollowsTheLlama3Regex) {
  // BPE never merges across pre-tokens, so encoding the expected pre-tokens one by one must give
  // the same ids as encoding the whole text.
  auto joined = [](std::initializer_list<std::string_view> pieces) {
    std::vector<int32_t> ids;
    for (std::string_view p : pieces) {
      const auto part = tiny().encode(p, false);
      ids.insert(ids.end(), part.begin(), part.end());
    }
    return ids;
  };
  // Digits go in groups of at most three; a space before a number stands alone.
  EXPECT_EQ(tiny().encode("x 1234567", false), joined({"x", " ", "123", "456", "7"}));
  // Contractions split off case-insensitively, before the letters that follow them.
  EXPECT_EQ(tiny().encode("I'LLAMA", false), joined({"I", "'LL", "AMA"}));
  EXPECT_EQ(tiny().encode("they'llama", false), joined({"they", "'ll", "ama"}));
  // Whitespace before a word: the last space joins the word; newlines group with spaces before them.
  EXPECT_EQ(tiny().encode("a   b  \n\n  c", false), joined({"a", "  ", " b", "  \n\n", " ", " c"}));
}

TEST(Tokenizer, SpecialTokensInTextMapToTheirIds) {
  const Tokenizer& t = tiny();
  EXPECT_EQ(t.encode("<|eot_id|>", false), std::vector<int32_t>{4095});
  EXPECT_EQ(t.encode("<|begin_of_text|>", true), (std::vector<int32_t>{4091, 4091}));
  const auto ids = t.encode("<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|><|eot_id|>", false);
  ASSERT_GE(ids.size(), 5u);
  EXPECT_EQ(ids.front(), 4093);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 4094), 1);
  EXPECT_EQ(ids[ids.size() - 1], 4095);
  EXPECT_EQ(ids[ids.size() - 2], 4095);
  // Text around a special token is tokenized as if the special token were a boundary.
  auto concat = t.encode("hello", false);
  concat.push_back(4092);
  const auto world = t.encode(" world", false);
  concat.insert(concat.end(), world.begin(), world.end());
  EXPECT_EQ(t.encode("hello<|end_of_text|> world", false), concat);
  // An incomplete marker is plain text.
  for (int32_t id : t.encode("<|eot_id", false)) EXPECT_FALSE(t.is_special(id));
  // skip_special drops them in decode.
  EXPECT_EQ(t.decode(t.encode("a<|eot_id|>b", true), true), "ab");
}

TEST(Tokenizer, StreamDecoderEmitsWholeCharactersOnly) {
  std::vector<std::string> texts = edge_cases();
  std::ifstream prompts(kTinyDir / "prompts.jsonl");
  for (std::string line; std::getline(prompts, line);) {
    const json p = json::parse(line);
    if (p.contains("text")) texts.push_back(p["text"].get<std::string>());
  }
  for (const std::string& text : texts) {
    const auto ids = tiny().encode(text, true);
    StreamDecoder stream(tiny());
    std::string joined;
    for (int32_t id : ids) {
      const std::string piece = stream.push(id);
      EXPECT_TRUE(valid_utf8(piece));
      EXPECT_EQ(piece.find("\xEF\xBF\xBD"), std::string::npos) << "replacement char while streaming " << text;
      joined += piece;
    }
    joined += stream.flush();
    EXPECT_EQ(joined, tiny().decode(ids)) << text;
  }
  // A multi-byte character split over byte tokens comes out only when complete.
  const std::string emoji = "👍";
  const auto ids = tiny().encode(emoji, false);
  ASSERT_GT(ids.size(), 1u) << "the tiny vocabulary should not hold this emoji whole";
  StreamDecoder stream(tiny());
  for (size_t i = 0; i + 1 < ids.size(); ++i) EXPECT_EQ(stream.push(ids[i]), "");
  EXPECT_EQ(stream.push(ids.back()), emoji);
  EXPECT_EQ(stream.flush(), "");
}

TEST(Tokenizer, StreamDecoderMatchesDecodeOnArbitraryIds) {
  // Random ids make invalid UTF-8; the stream must still equal decode (with U+FFFD) and never
  // emit an invalid or incomplete sequence.
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> dist(0, 4095);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<int32_t> ids(1 + trial % 17);
    for (auto& id : ids) id = dist(rng) % 2 ? dist(rng) % 256 : dist(rng);  // many single bytes
    StreamDecoder stream(tiny(), /*skip_special=*/true);
    std::string joined;
    for (int32_t id : ids) {
      const std::string piece = stream.push(id);
      EXPECT_TRUE(valid_utf8(piece));
      joined += piece;
    }
    const std::string rest = stream.flush();
    EXPECT_TRUE(valid_utf8(rest));
    joined += rest;
    EXPECT_EQ(joined, tiny().decode(ids, true));
  }
}

TEST(Tokenizer, InvalidUtf8IsRejectedClearly) {
  for (std::string bad : {std::string("abc\xff"), std::string("\xc3"), std::string("\xed\xa0\x80 surrogate"),
                          std::string("\xc0\xaf overlong"), std::string("\xf4\x90\x80\x80 too big")}) {
    try {
      tiny().encode(bad, true);
      ADD_FAILURE() << "no error for invalid UTF-8";
    } catch (const eaglevk::Error& e) {
      EXPECT_NE(std::string(e.what()).find("not valid UTF-8"), std::string::npos) << e.what();
    }
    const std::string clean = eaglevk::loader::sanitize_utf8(bad);
    EXPECT_TRUE(valid_utf8(clean));
    EXPECT_EQ(tiny().decode(tiny().encode(clean, false)), clean);
  }
  EXPECT_EQ(eaglevk::loader::sanitize_utf8("a\xe2\x82z"), "a\xEF\xBF\xBDz");  // one U+FFFD per maximal subpart
  EXPECT_EQ(eaglevk::loader::sanitize_utf8("\xf0\x80\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
}

// Truncated sequences at the end of a view into a longer buffer: the bytes after the view are
// the continuation bytes a reader past the end would find, so an overrun shows as a length
// beyond the view even without ASan.
TEST(Tokenizer, TruncatedUtf8AtTheEndOfAViewStaysInside) {
  using eaglevk::loader::decode_code_point;
  const std::string buffer = "a\xE2\x82\xAC \xF0\x9F\x98\x80 \xC3\xA9";
  struct Cut {
    size_t length;  // the view is buffer[0, length)
    size_t pos;     // where the truncated sequence starts
  };
  for (const Cut cut : {Cut{2, 1}, Cut{3, 1}, Cut{6, 5}, Cut{7, 5}, Cut{8, 5}, Cut{11, 10}}) {
    const std::string_view view(buffer.data(), cut.length);
    size_t n = 0;
    EXPECT_EQ(decode_code_point(view, cut.pos, &n), U'\uFFFD') << "cut at " << cut.length;
    EXPECT_GE(n, 1u);
    EXPECT_LE(cut.pos + n, view.size()) << "cut at " << cut.length;
    // python_strip (the chat templates' trim) walks the same way and ends inside the view.
    const std::string_view stripped = eaglevk::loader::python_strip(view);
    EXPECT_LE(stripped.data() + stripped.size(), view.data() + view.size());
    // encode refuses the text naming the offset; the sanitized text round-trips.
    eaglevk::testing::expect_error([&] { tiny().encode(view, false); }, "not valid UTF-8");
    const std::string clean = eaglevk::loader::sanitize_utf8(view);
    EXPECT_EQ(tiny().decode(tiny().encode(clean, false)), clean);
  }
  // A lone lead byte before a space is one U+FFFD of one byte: the space after it is whitespace.
  size_t n = 0;
  EXPECT_EQ(decode_code_point("\xE2  ", 0, &n), U'\uFFFD');
  EXPECT_EQ(n, 1u);
  EXPECT_EQ(eaglevk::loader::python_strip(std::string_view("x\xE2  ")), "x\xE2");
  EXPECT_EQ(decode_code_point("\xE2\x82\xAC", 0, &n), U'\u20AC');
  EXPECT_EQ(n, 3u);
}

TEST(Tokenizer, LongInputsStayFast) {
  const auto start = std::chrono::steady_clock::now();
  for (const std::string& text : {std::string(200000, ' '), std::string(200000, 'a'), std::string(100000, '='),
                                  std::string(50000, '\n') + "x", std::string(300000, '7')}) {
    const auto ids = tiny().encode(text, false);
    EXPECT_EQ(tiny().decode(ids), text);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
}

TEST(Tokenizer, ConcurrentEncodesAgree) {
  const std::string text = read_file(kTinyDir / "prompts.jsonl");
  const auto expected = tiny().encode(text, true);
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&, i] {
      const Tokenizer copy = tiny();  // copies share state and cache
      for (int r = 0; r < 5; ++r) ok[i] += copy.encode(text, true) == expected;
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok, std::vector<int>(4, 5));
}

TEST(Tokenizer, MergesAsPairListsGiveTheSameIds) {
  json j = tiny_json();
  json pairs = json::array();
  for (const auto& m : j["model"]["merges"]) {
    const std::string s = m.get<std::string>();
    const size_t space = s.find(' ');
    pairs.push_back({s.substr(0, space), s.substr(space + 1)});
  }
  j["model"]["merges"] = pairs;
  const Tokenizer t = from(j);
  for (const std::string& text : edge_cases()) EXPECT_EQ(t.encode(text, true), tiny().encode(text, true));
}

TEST(Tokenizer, IgnoreMergesMapsWholeVocabularyWords) {
  // With ignore_merges false, BPE must reach every word through merges; with it true, a word in
  // the vocabulary is taken whole. Both must agree on words BPE can build.
  json j = tiny_json();
  j["model"]["ignore_merges"] = false;
  const Tokenizer merged = from(j);
  int same = 0, total = 0;
  for (int32_t id = 256; id < 4091; ++id) {
    const std::string& bytes = tiny().token_bytes(id);
    if (!valid_utf8(bytes)) continue;
    const auto pre = tiny().encode(bytes, false);
    if (pre.size() != 1) continue;  // the pre-tokenizer splits it: ignore_merges does not apply
    ++total;
    same += merged.encode(bytes, false) == pre;
  }
  EXPECT_GT(total, 1000);
  EXPECT_GT(same, total * 9 / 10);
}

TEST(Tokenizer, ByteLevelWithGpt2Regex) {
  // A plain ByteLevel pre-tokenizer with use_regex splits with the GPT-2 pattern. Compare with a
  // tokenizer that has no regex at all, fed the expected GPT-2 pieces one by one.
  json gpt2 = tiny_json();
  gpt2["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  json whole = gpt2;
  whole["pre_tokenizer"]["use_regex"] = false;
  const Tokenizer g = from(gpt2), w = from(whole);
  const std::string text = "Hello world's 1234567 numbers!!  \n  x";
  const std::vector<std::string> pieces = {"Hello", " world", "'s", " 1234567", " numbers", "!!", "  \n ", " x"};
  std::vector<int32_t> expected;
  for (const auto& p : pieces) {
    const auto ids = w.encode(p, false);
    expected.insert(expected.end(), ids.begin(), ids.end());
  }
  EXPECT_EQ(g.encode(text, false), expected);
  EXPECT_EQ(g.decode(g.encode(text, false)), text);
}

TEST(Tokenizer, AddedTokenFlags) {
  json j = tiny_json();
  j["added_tokens"].push_back({{"id", 4096}, {"content", "<mask>"}, {"single_word", false}, {"lstrip", true},
                               {"rstrip", false}, {"normalized", false}, {"special", true}});
  j["added_tokens"].push_back({{"id", 4097}, {"content", "qqx"}, {"single_word", true}, {"lstrip", false},
                               {"rstrip", true}, {"normalized", true}, {"special", false}});
  j["added_tokens"].push_back({{"id", 4098}, {"content", "<|eot_id|>x"}, {"single_word", false}, {"lstrip", false},
                               {"rstrip", false}, {"normalized", false}, {"special", true}});
  const Tokenizer t = from(j);
  EXPECT_EQ(t.vocab_size(), 4099);
  auto with = [&](std::string_view a, int32_t id, std::string_view b) {
    auto ids = t.encode(a, false);
    ids.push_back(id);
    const auto rest = t.encode(b, false);
    ids.insert(ids.end(), rest.begin(), rest.end());
    return ids;
  };
  // lstrip swallows the spaces on the left.
  EXPECT_EQ(t.encode("a   <mask> b", false), with("a", 4096, " b"));
  // single_word: only as a whole word; rstrip swallows the spaces after it.
  EXPECT_EQ(t.encode("x qqx  bar", false), with("x ", 4097, "bar"));
  const auto inside = t.encode("qqxbar", false);
  EXPECT_EQ(std::count(inside.begin(), inside.end(), 4097), 0);
  EXPECT_FALSE(t.is_special(4097));
  EXPECT_EQ(t.decode(t.encode("x qqx  bar", false)), "x qqxbar");  // rstrip drops text, as in HF
  // Longest match first.
  EXPECT_EQ(t.encode("<|eot_id|>x", false), std::vector<int32_t>{4098});
  EXPECT_EQ(t.encode("<|eot_id|>y", false), with("", 4095, "y"));
}

namespace {

// Writes `text` as tokenizer.json in a fresh temp dir and returns the load error message.
std::string load_error(const std::string& text) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("eaglevk_tok_{}_{}", ::getpid(), std::rand());
  fs::create_directories(dir);
  std::ofstream(dir / "tokenizer.json", std::ios::binary) << text;
  std::string message;
  try {
    Tokenizer::load(dir);
  } catch (const eaglevk::Error& e) {
    message = e.what();
  }
  fs::remove_all(dir);
  return message;
}

std::string load_error(const json& j) { return load_error(j.dump()); }

}  // namespace

TEST(Tokenizer, MalformedFilesGiveClearErrors) {
  struct Case {
    std::string name;
    std::function<void(json&)> edit;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"wordpiece model", [](json& j) { j["model"]["type"] = "WordPiece"; }, "model type \"WordPiece\" is not supported"},
      {"metaspace", [](json& j) { j["pre_tokenizer"] = {{"type", "Metaspace"}}; }, "pre-tokenizer type \"Metaspace\""},
      {"digits in sequence",
       [](json& j) { j["pre_tokenizer"]["pretokenizers"].push_back({{"type", "Digits"}, {"individual_digits", true}}); },
       "pre-tokenizer type \"Digits\""},
      {"no pre-tokenizer", [](json& j) { j["pre_tokenizer"] = nullptr; }, "needs a pre-tokenizer"},
      {"split only",
       [](json& j) { j["pre_tokenizer"] = j["pre_tokenizer"]["pretokenizers"][0]; }, "no ByteLevel step"},
      {"bad regex", [](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed"; },
       "PCRE2 cannot compile"},
      {"bad behavior", [](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Sideways"; },
       "unknown split behavior"},
      {"unknown merge token", [](json& j) { j["model"]["merges"][5] = "zzzq qqqz"; }, "not in the vocabulary"},
      {"malformed merge", [](json& j) { j["model"]["merges"][3] = "nospace"; }, "model.merges[3]"},
      {"merge not string", [](json& j) { j["model"]["merges"][3] = 42; }, "model.merges[3]"},
      {"vocab array", [](json& j) { j["model"]["vocab"] = json::array({1, 2}); }, "model.vocab"},
      {"vocab negative id", [](json& j) { j["model"]["vocab"]["Ġ"] = -3; }, "out of range"},
      {"vocab string id", [](json& j) { j["model"]["vocab"]["Ġ"] = "x"; }, "expected an integer token id"},
      {"duplicate id", [](json& j) { j["model"]["vocab"]["Ġ"] = 221; }, "is given to both"},
      {"huge id", [](json& j) { j["model"]["vocab"]["Ġ"] = 1 << 30; }, "ids must be dense"},
      {"huge added id", [](json& j) { j["added_tokens"][0]["id"] = 2000000000; }, "ids must be dense"},
      {"no model", [](json& j) { j.erase("model"); }, "missing \"model\""},
      {"normalizer", [](json& j) { j["normalizer"] = {{"type", "NFC"}}; }, "normalizers are not supported"},
      {"wordpiece decoder", [](json& j) { j["decoder"] = {{"type", "WordPiece"}}; }, "decoder type \"WordPiece\""},
      {"no decoder", [](json& j) { j["decoder"] = nullptr; }, "ByteLevel decoder"},
      {"roberta post-processor", [](json& j) { j["post_processor"] = {{"type", "RobertaProcessing"}}; },
       "post-processor type \"RobertaProcessing\""},
      {"template unknown special",
       [](json& j) { j["post_processor"]["processors"][1]["special_tokens"] = json::object(); },
       "not in special_tokens"},
      {"added token id clash", [](json& j) { j["added_tokens"][0]["id"] = 100; }, "already belongs to"},
      {"added token no content", [](json& j) { j["added_tokens"][0].erase("content"); }, "missing \"content\""},
      {"byte fallback", [](json& j) { j["model"]["byte_fallback"] = true; }, "byte_fallback"},
      {"dropout", [](json& j) { j["model"]["dropout"] = 0.1; }, "dropout"},
  };
  for (const Case& c : cases) {
    json j = tiny_json();
    c.edit(j);
    const std::string message = load_error(j);
    EXPECT_NE(message.find(c.expected), std::string::npos) << c.name << ": got \"" << message << "\"";
    EXPECT_NE(message.find("tokenizer.json"), std::string::npos) << c.name << ": error should name the file";
  }
  EXPECT_NE(load_error(std::string("{\"model\": ")).find("invalid JSON"), std::string::npos);
  EXPECT_NE(load_error(std::string("[1, 2]")).find("expected a JSON object"), std::string::npos);
  EXPECT_NE(load_error(std::string("")).find("invalid JSON"), std::string::npos);
  try {
    Tokenizer::load("/nonexistent/eaglevk/dir");
    ADD_FAILURE() << "no error for a missing directory";
  } catch (const eaglevk::Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.json' does not exist"), std::string::npos) << e.what();
  }
}

TEST(Tokenizer, MalformedConfigsGiveClearErrors) {
  const std::string tok = read_file(kTinyDir / "tokenizer.json");
  EXPECT_THROW(Tokenizer::from_json(tok, "{bad json"), eaglevk::Error);
  EXPECT_THROW(Tokenizer::from_json(tok, R"({"bos_token": "<|nope|>"})"), eaglevk::Error);
  EXPECT_THROW(Tokenizer::from_json(tok, {}, R"({"eos_token_id": [4092, 99999]})"), eaglevk::Error);
  EXPECT_THROW(Tokenizer::from_json(tok, {}, R"({"eos_token_id": "x"})"), eaglevk::Error);
  // bos/eos written as transformers' AddedToken objects are understood.
  const Tokenizer t = Tokenizer::from_json(
      tok, R"({"bos_token": {"content": "<|begin_of_text|>", "__type": "AddedToken"}, "eos_token": "<|end_of_text|>"})");
  EXPECT_EQ(t.bos_id(), 4091);
  EXPECT_EQ(t.eos_ids(), std::vector<int32_t>{4092});
  // No configs: no BOS or EOS known, but encoding still works.
  const Tokenizer bare = Tokenizer::from_json(tok);
  EXPECT_EQ(bare.bos_id(), -1);
  EXPECT_TRUE(bare.eos_ids().empty());
  EXPECT_EQ(bare.encode("hi", true).front(), 4091);  // the template still adds BOS
  // A default-constructed tokenizer errors instead of crashing.
  EXPECT_THROW(Tokenizer{}.encode("x", false), eaglevk::Error);
}

TEST(Tokenizer, CorruptedFilesErrorButNeverCrash) {
  // Random leaves of tokenizer.json replaced by values of the wrong type or range: loading
  // either succeeds or throws eaglevk::Error, never anything else.
  const json original = tiny_json();
  const json flat = original.flatten();
  std::vector<std::string> keys;
  for (const auto& [key, value] : flat.items()) keys.push_back(key);
  // Favour the small structural parts over the thousands of vocab and merge entries.
  std::vector<std::string> structural;
  for (const auto& k : keys)
    if (k.rfind("/model/vocab", 0) != 0 && k.rfind("/model/merges", 0) != 0) structural.push_back(k);
  const std::vector<json> values = {nullptr, 0, -1, 1.5, "", "x y", "Ġ Ġ", json::array(), json::object(), true,
                                    4095, 1 << 30, "Isolated", "(?i", "ByteLevel"};
  std::mt19937 rng(77);
  int loaded = 0, refused = 0;
  for (int trial = 0; trial < 150; ++trial) {
    json mutated = original;
    const auto& pool = trial % 3 ? structural : keys;
    for (int edits = 1 + trial % 3; edits > 0; --edits)
      mutated[json::json_pointer(pool[rng() % pool.size()])] = values[rng() % values.size()];
    try {
      const Tokenizer t = from(mutated);
      const auto ids = t.encode("Hello, world! 123 <|eot_id|> 👍", true);
      (void)t.decode(ids);
      ++loaded;
    } catch (const eaglevk::Error&) {
      ++refused;
    }
  }
  EXPECT_EQ(loaded + refused, 150);
  EXPECT_GT(refused, 25);
}

TEST(Tokenizer, RandomTextRoundTrips) {
  std::mt19937 rng(99);
  for (int trial = 0; trial < 500; ++trial) {
    const std::string text = eaglevk::testing::random_utf8_text(rng);
    ASSERT_EQ(tiny().decode(tiny().encode(text, true), true), text);
  }
}

TEST(Tokenizer, SplitBehaviorsMatchHuggingFaceDocs) {
  // The example of HF's SplitDelimiterBehavior documentation: "-" on "the-final--countdown".
  using eaglevk::loader::SplitBehavior;
  const std::string text = "the-final--countdown";
  auto split = [&](const eaglevk::loader::Regex& regex, SplitBehavior behavior, bool invert = false) {
    std::vector<eaglevk::loader::Piece> pieces;
    eaglevk::loader::split_by_regex(regex, text, {0, text.size()}, behavior, invert, pieces);
    std::vector<std::string> out;
    for (const auto& p : pieces) out.push_back(text.substr(p.offset, p.length));
    return out;
  };
  using V = std::vector<std::string>;
  const auto dash = eaglevk::loader::compile_regex(eaglevk::loader::escape_regex("-"));
  EXPECT_EQ(split(dash, SplitBehavior::Removed), (V{"the", "final", "countdown"}));
  EXPECT_EQ(split(dash, SplitBehavior::Isolated), (V{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(split(dash, SplitBehavior::MergedWithPrevious), (V{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(split(dash, SplitBehavior::MergedWithNext), (V{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(split(dash, SplitBehavior::Contiguous), (V{"the", "-", "final", "--", "countdown"}));
  // invert: the words are the delimiters.
  EXPECT_EQ(split(dash, SplitBehavior::Removed, true), (V{"-", "-", "-"}));
  // Literal patterns are quoted, metacharacters included.
  const auto literal = eaglevk::loader::compile_regex(eaglevk::loader::escape_regex("a.*\\E(b"));
  std::vector<eaglevk::loader::Piece> pieces;
  const std::string tricky = "xa.*\\E(by";
  eaglevk::loader::split_by_regex(literal, tricky, {0, tricky.size()}, SplitBehavior::Isolated, false, pieces);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(tricky.substr(pieces[1].offset, pieces[1].length), "a.*\\E(b");
}

// tokenizer.json over 64 MiB is refused before it is read (the real Llama-3 one is ~9 MB), and
// the same limit holds for text handed to from_json. Sparse files: no disk space is used.
TEST(Tokenizer, FilesOverTheSizeLimitAreRefusedUnread) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("eaglevk_tok_cap_{}", ::getpid());
  fs::create_directories(dir);
  fs::copy_file(kTinyDir / "tokenizer.json", dir / "tokenizer.json", fs::copy_options::overwrite_existing);
  EXPECT_NO_THROW(Tokenizer::load(dir));
  fs::resize_file(dir / "tokenizer.json", eaglevk::loader::kMaxTokenizerFileBytes + 1);
  eaglevk::testing::expect_error([&] { Tokenizer::load(dir); }, "over the 67108864-byte (64 MiB) limit");
  fs::copy_file(kTinyDir / "tokenizer.json", dir / "tokenizer.json", fs::copy_options::overwrite_existing);
  std::ofstream(dir / "tokenizer_config.json") << "{}";
  fs::resize_file(dir / "tokenizer_config.json", eaglevk::loader::kMaxTokenizerFileBytes + 1);
  eaglevk::testing::expect_error([&] { Tokenizer::load(dir); }, "tokenizer_config.json: 67108865 bytes is over");
  fs::remove_all(dir);
  const std::string big(eaglevk::loader::kMaxTokenizerFileBytes + 1, ' ');
  eaglevk::testing::expect_error([&] { Tokenizer::from_json(big, {}, {}, "mem"); }, "64 MiB");
}
