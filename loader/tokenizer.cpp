#include "loader/tokenizer.h"

#include <algorithm>
#include <deque>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include <eaglevk/error.h>

#include "loader/bpe.h"
#include "loader/json_excerpt.h"
#include "loader/pretokenize.h"
#include "loader/text_file.h"

namespace eaglevk::loader {

using nlohmann::json;

namespace {

// HF's ByteLevel pre-tokenizer regex (use_regex: true); the `tokenizers` library has it built in,
// so tokenizer.json files do not spell it out.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

struct PreTokenizeStep {
  enum Kind { Split, ByteLevel } kind;
  Regex regex;  // Split, or ByteLevel with use_regex
  bool has_regex = false;
  SplitBehavior behavior = SplitBehavior::Isolated;
  bool invert = false;
  bool add_prefix_space = false;  // ByteLevel
};

enum class IdKind : uint8_t { None, Vocab, Added };

}  // namespace

struct TokenizerState {
  BpeModel bpe;
  std::vector<std::string> id_token;  // as written in tokenizer.json
  std::vector<std::string> id_bytes;  // raw bytes
  std::vector<IdKind> id_kind;
  std::vector<bool> id_special;
  StringMap<int32_t> token_to_id;  // vocab strings and added-token contents
  std::deque<AddedTokenSpec> added;  // deque: the matchers point into it
  AddedTokenMatcher match_raw;         // normalized: false
  AddedTokenMatcher match_normalized;  // normalized: true (there is no normalizer, so same text)
  std::vector<PreTokenizeStep> steps;
  std::vector<int32_t> prefix_ids, suffix_ids;  // post-processor template around $A
  int32_t bos = -1;
  std::vector<int32_t> eos;
  BpeCache cache;
  // Ids index dense tables. Vocabularies are dense; this bound stops a corrupt id such as 2^30
  // from allocating gigabytes before anything else is checked.
  size_t id_limit = 0;
  // The most input bytes one token stands for; 0: no bound (Tokenizer::max_input_bytes_per_token).
  size_t max_input_bytes_per_token = 0;
};

namespace {

// Checked before reading, so a huge (or hostile) file is never loaded into memory.
std::string read_tokenizer_file(const std::filesystem::path& path) {
  return read_text_file(path, kMaxTokenizerFileBytes, "tokenizer files");
}

json parse_json(std::string_view text, std::string_view source) {
  if (text.size() > kMaxTokenizerFileBytes)
    fail("{}: {} bytes is over the {}-byte ({} MiB) limit for tokenizer files", source, text.size(),
         kMaxTokenizerFileBytes, kMaxTokenizerFileBytes >> 20);
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    fail("{}: invalid JSON: {}", source, json_parse_error_text(e));
  }
}

// Context for messages: every error names the file and the JSON path.
struct Reader {
  std::string_view source;

  [[noreturn]] void error(std::string_view where, std::string_view what) const {
    fail("{}: {}: {}", source, where, what);
  }
  const json& field(const json& object, const char* key, std::string_view where) const {
    if (!object.is_object()) error(where, "expected a JSON object");
    auto it = object.find(key);
    if (it == object.end()) error(where, fmt::format("missing \"{}\"", key));
    return *it;
  }
  std::string string(const json& value, std::string_view where) const {
    if (!value.is_string()) error(where, fmt::format("expected a string, got {}", value.type_name()));
    return value.get<std::string>();
  }
  bool boolean(const json& object, const char* key, bool fallback, std::string_view where) const {
    auto it = object.find(key);
    if (it == object.end() || it->is_null()) return fallback;
    if (!it->is_boolean()) error(where, fmt::format("\"{}\" must be true or false", key));
    return it->get<bool>();
  }
  int32_t id(const json& value, std::string_view where) const {
    if (!value.is_number_integer()) error(where, fmt::format("expected an integer token id, got {}", json_excerpt(value)));
    const auto v = value.get<int64_t>();
    if (v < 0 || v > INT32_MAX) error(where, fmt::format("token id {} is out of range", v));
    return static_cast<int32_t>(v);
  }
  std::string type(const json& object, std::string_view where) const {
    return string(field(object, "type", where), std::string(where) + ".type");
  }
};

void set_id(const Reader& r, TokenizerState& s, int32_t id, std::string token, std::string bytes, IdKind kind) {
  if (static_cast<size_t>(id) >= s.id_limit)
    r.error(fmt::format("token {:?}", token),
            fmt::format("id {} is far beyond the number of tokens in the file; ids must be dense", id));
  if (static_cast<size_t>(id) >= s.id_kind.size()) {
    s.id_kind.resize(id + 1, IdKind::None);
    s.id_token.resize(id + 1);
    s.id_bytes.resize(id + 1);
    s.id_special.resize(id + 1, false);
  }
  s.id_kind[id] = kind;
  s.id_token[id] = std::move(token);
  s.id_bytes[id] = std::move(bytes);
}

void load_model(TokenizerState& s, const Reader& r, const json& model) {
  if (!model.is_object()) r.error("model", "expected a JSON object");
  // Old files have no "type"; HF then recognises BPE by its vocab + merges.
  if (model.contains("type")) {
    const std::string type = r.type(model, "model");
    if (type != "BPE") r.error("model.type", fmt::format("model type \"{}\" is not supported (only BPE)", type));
  } else if (!model.contains("merges")) {
    r.error("model", "no \"type\" and no \"merges\": not a BPE model");
  }
  if (model.contains("dropout") && !model["dropout"].is_null() &&
      !(model["dropout"].is_number() && model["dropout"].get<double>() == 0.0))
    r.error("model.dropout", "BPE dropout is not supported (it makes encoding random)");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && !model[key].is_null() && model[key] != "")
      r.error(fmt::format("model.{}", key), "not supported by byte-level BPE");
  }
  if (r.boolean(model, "byte_fallback", false, "model"))
    r.error("model.byte_fallback", "byte_fallback (SentencePiece-style BPE) is not supported");
  s.bpe.ignore_merges = r.boolean(model, "ignore_merges", false, "model");

  const json& vocab = r.field(model, "vocab", "model");
  if (!vocab.is_object()) r.error("model.vocab", "expected an object of token -> id");
  if (vocab.empty()) r.error("model.vocab", "the vocabulary is empty");
  for (const auto& [token, value] : vocab.items()) {
    const int32_t id = r.id(value, fmt::format("model.vocab[{:?}]", token));
    if (static_cast<size_t>(id) < s.id_kind.size() && s.id_kind[id] != IdKind::None)
      r.error("model.vocab", fmt::format("id {} is given to both {:?} and {:?}", id, s.id_token[id], token));
    // A token outside the byte-level alphabet decodes to its own UTF-8, as HF's decoder does.
    std::optional<std::string> bytes = byte_level_decode(token);
    if (bytes) s.bpe.bytes_to_id.emplace(*bytes, id);
    s.token_to_id.emplace(token, id);
    set_id(r, s, id, token, bytes ? std::move(*bytes) : token, IdKind::Vocab);
  }
  for (int b = 0; b < 256; ++b) {
    auto it = s.token_to_id.find(byte_level_encode(std::string(1, static_cast<char>(b))));
    s.bpe.byte_id[b] = it == s.token_to_id.end() ? -1 : it->second;
  }
  if (model.contains("unk_token") && !model["unk_token"].is_null()) {
    const std::string unk = r.string(model["unk_token"], "model.unk_token");
    auto it = s.token_to_id.find(unk);
    if (it == s.token_to_id.end()) r.error("model.unk_token", fmt::format("{:?} is not in the vocabulary", unk));
    s.bpe.unk_id = it->second;
  }

  const json& merges = r.field(model, "merges", "model");
  if (!merges.is_array()) r.error("model.merges", "expected an array");
  s.bpe.merges.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const json& m = merges[rank];
    const std::string where = fmt::format("model.merges[{}]", rank);
    std::string left, right;
    if (m.is_string()) {
      const std::string line = m.get<std::string>();
      const size_t space = line.find(' ');
      if (space == std::string::npos || space == 0 || space + 1 == line.size())
        r.error(where, fmt::format("{:?} is not a \"left right\" pair", line));
      left = line.substr(0, space);
      right = line.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      r.error(where, fmt::format("expected \"left right\" or [left, right], got {}", json_excerpt(m)));
    }
    auto find = [&](const std::string& token) {
      auto it = s.token_to_id.find(token);
      if (it == s.token_to_id.end()) r.error(where, fmt::format("merge token {:?} is not in the vocabulary", token));
      return it->second;
    };
    const int32_t l = find(left), rt = find(right), merged = find(left + right);
    // A repeated pair keeps its last rank, as HF's map insertion does.
    s.bpe.merges.insert_or_assign(merge_key(l, rt), BpeMerge{static_cast<uint32_t>(rank), merged});
  }
}

void load_added_tokens(TokenizerState& s, const Reader& r, const json& root) {
  auto it = root.find("added_tokens");
  if (it == root.end() || it->is_null()) return;
  if (!it->is_array()) r.error("added_tokens", "expected an array");
  for (size_t i = 0; i < it->size(); ++i) {
    const json& t = (*it)[i];
    const std::string where = fmt::format("added_tokens[{}]", i);
    AddedTokenSpec spec;
    spec.id = r.id(r.field(t, "id", where), where + ".id");
    spec.content = r.string(r.field(t, "content", where), where + ".content");
    if (spec.content.empty()) r.error(where, "empty content");
    if (first_invalid_utf8(spec.content) != std::string_view::npos) r.error(where, "content is not valid UTF-8");
    spec.single_word = r.boolean(t, "single_word", false, where);
    spec.lstrip = r.boolean(t, "lstrip", false, where);
    spec.rstrip = r.boolean(t, "rstrip", false, where);
    spec.normalized = r.boolean(t, "normalized", true, where);
    spec.special = r.boolean(t, "special", false, where);

    if (auto known = s.token_to_id.find(spec.content); known != s.token_to_id.end()) {
      if (known->second != spec.id)
        r.error(where, fmt::format("{:?} has id {} but the vocabulary gives it id {}", spec.content, spec.id,
                                   known->second));
    } else if (static_cast<size_t>(spec.id) < s.id_kind.size() && s.id_kind[spec.id] != IdKind::None) {
      r.error(where, fmt::format("id {} of {:?} already belongs to {:?}", spec.id, spec.content, s.id_token[spec.id]));
    }
    s.token_to_id.emplace(spec.content, spec.id);
    // Added tokens decode to their content verbatim (HF would push it through the byte-level
    // map, which only differs for contents with Latin-1 letters, where it garbles them).
    set_id(r, s, spec.id, spec.content, spec.content, IdKind::Added);
    s.id_special[spec.id] = spec.special;
    s.added.push_back(std::move(spec));
  }
  // HF matches special tokens before other added tokens when both match the same text.
  for (bool special : {true, false})
    for (const AddedTokenSpec& spec : s.added)
      if (spec.special == special) (spec.normalized ? s.match_normalized : s.match_raw).add(spec);
}

SplitBehavior parse_behavior(const Reader& r, const json& value, std::string_view where) {
  const std::string b = r.string(value, where);
  if (b == "Isolated") return SplitBehavior::Isolated;
  if (b == "Removed") return SplitBehavior::Removed;
  if (b == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (b == "Contiguous") return SplitBehavior::Contiguous;
  r.error(where, fmt::format("unknown split behavior {:?}", b));
}

// Sequences nest (a Sequence may hold a Sequence) and each level recurses here with a longer
// `where`; real files nest at most twice, and a hostile one 100,000 times would exhaust the stack.
constexpr int kMaxSequenceDepth = 16;
void check_sequence_depth(const Reader& r, int depth, const std::string& where) {
  if (depth >= kMaxSequenceDepth)
    r.error(where, fmt::format("Sequence nested more than {} deep", kMaxSequenceDepth));
}

// A reference, never a copy: copying a JSON value recurses once per level of its nesting.
const json& member_or_null(const json& object, const char* key) {
  static const json null_value;
  auto it = object.find(key);
  return it == object.end() ? null_value : *it;
}

void load_pre_tokenizer(TokenizerState& s, const Reader& r, const json& p, const std::string& where, int depth = 0) {
  if (p.is_null()) r.error(where, "a byte-level BPE needs a pre-tokenizer, and there is none");
  const std::string type = r.type(p, where);
  if (type == "Sequence") {
    check_sequence_depth(r, depth, where);
    const json& list = r.field(p, "pretokenizers", where);
    if (!list.is_array()) r.error(where + ".pretokenizers", "expected an array");
    for (size_t i = 0; i < list.size(); ++i)
      load_pre_tokenizer(s, r, list[i], fmt::format("{}.pretokenizers[{}]", where, i), depth + 1);
  } else if (type == "Split") {
    PreTokenizeStep step{PreTokenizeStep::Split, {}, true};
    const json& pattern = r.field(p, "pattern", where);
    std::string regex;
    if (pattern.is_object() && pattern.contains("Regex")) {
      regex = r.string(pattern["Regex"], where + ".pattern.Regex");
    } else if (pattern.is_object() && pattern.contains("String")) {
      regex = escape_regex(r.string(pattern["String"], where + ".pattern.String"));
    } else {
      r.error(where + ".pattern", "expected {\"Regex\": ...} or {\"String\": ...}");
    }
    try {
      step.regex = compile_regex(regex);
    } catch (const Error& e) {
      r.error(where + ".pattern", e.what());
    }
    step.behavior = parse_behavior(r, r.field(p, "behavior", where), where + ".behavior");
    step.invert = r.boolean(p, "invert", false, where);
    s.steps.push_back(std::move(step));
  } else if (type == "ByteLevel") {
    PreTokenizeStep step{PreTokenizeStep::ByteLevel, {}, false};
    step.add_prefix_space = r.boolean(p, "add_prefix_space", true, where);
    if (r.boolean(p, "use_regex", true, where)) {
      step.regex = compile_regex(kGpt2Pattern);
      step.has_regex = true;
    }
    s.steps.push_back(std::move(step));
  } else {
    r.error(where + ".type", fmt::format("pre-tokenizer type {:?} is not supported (only ByteLevel, Split, Sequence)", type));
  }
}

// Post-processor: only the ids around the single sequence $A matter for encode().
void load_post_processor(TokenizerState& s, const Reader& r, const json& p, const std::string& where, int depth = 0) {
  if (p.is_null()) return;
  const std::string type = r.type(p, where);
  if (type == "ByteLevel") return;  // adjusts offsets only
  if (type == "Sequence") {
    check_sequence_depth(r, depth, where);
    const json& list = r.field(p, "processors", where);
    if (!list.is_array()) r.error(where + ".processors", "expected an array");
    for (size_t i = 0; i < list.size(); ++i)
      load_post_processor(s, r, list[i], fmt::format("{}.processors[{}]", where, i), depth + 1);
    return;
  }
  if (type != "TemplateProcessing")
    r.error(where + ".type", fmt::format("post-processor type {:?} is not supported (only TemplateProcessing, ByteLevel, Sequence)", type));

  // Both branches are references: a ternary with a temporary json would copy the file's value.
  static const json no_specials = json::object();
  const json& specials = p.contains("special_tokens") ? p["special_tokens"] : no_specials;
  auto special_ids = [&](const std::string& name, const std::string& w) {
    if (!specials.is_object() || !specials.contains(name))
      r.error(w, fmt::format("template token {:?} is not in special_tokens", name));
    const json& ids = r.field(specials[name], "ids", w);
    if (!ids.is_array()) r.error(w, "special_tokens ids must be an array");
    std::vector<int32_t> out;
    for (const json& id : ids) out.push_back(r.id(id, w));
    return out;
  };
  // A later template in a Sequence wraps the output of the earlier one.
  std::vector<int32_t> prefix, suffix;
  bool seen_sequence = false;
  const json& single = r.field(p, "single", where);
  if (!single.is_array()) r.error(where + ".single", "expected an array");
  for (size_t i = 0; i < single.size(); ++i) {
    const json& piece = single[i];
    const std::string w = fmt::format("{}.single[{}]", where, i);
    std::vector<int32_t> ids;
    bool is_sequence = false;
    if (piece.is_object() && piece.contains("Sequence")) {
      const std::string id = r.string(r.field(piece["Sequence"], "id", w), w);
      if (id != "A") r.error(w, fmt::format("sequence {:?} in the single-sequence template", id));
      is_sequence = true;
    } else if (piece.is_object() && piece.contains("SpecialToken")) {
      ids = special_ids(r.string(r.field(piece["SpecialToken"], "id", w), w), w);
    } else if (piece.is_string()) {
      // The string form: "$A", "$0", "$A:0" for the sequence, "name" or "name:1" for a token.
      std::string text = piece.get<std::string>();
      if (auto colon = text.rfind(':'); colon != std::string::npos && colon + 1 < text.size() &&
                                       text.find_first_not_of("0123456789", colon + 1) == std::string::npos)
        text.resize(colon);
      if (text == "$A" || text == "$0" || text == "$") is_sequence = true;
      else ids = special_ids(text, w);
    } else {
      r.error(w, fmt::format("unrecognised template piece {}", json_excerpt(piece)));
    }
    if (is_sequence) {
      if (seen_sequence) r.error(w, "the template has $A twice");
      seen_sequence = true;
    } else {
      (seen_sequence ? suffix : prefix).insert((seen_sequence ? suffix : prefix).end(), ids.begin(), ids.end());
    }
  }
  if (!seen_sequence) r.error(where + ".single", "the template has no $A");
  s.prefix_ids.insert(s.prefix_ids.begin(), prefix.begin(), prefix.end());
  s.suffix_ids.insert(s.suffix_ids.end(), suffix.begin(), suffix.end());
}

void check_decoder(const Reader& r, const json& d, const std::string& where, int depth = 0) {
  if (d.is_null()) r.error(where, "a byte-level BPE needs the ByteLevel decoder, and there is none");
  const std::string type = r.type(d, where);
  if (type == "ByteLevel") return;
  if (type == "Sequence") {
    check_sequence_depth(r, depth, where);
    const json& list = r.field(d, "decoders", where);
    if (!list.is_array() || list.empty()) r.error(where + ".decoders", "expected a non-empty array");
    for (size_t i = 0; i < list.size(); ++i)
      check_decoder(r, list[i], fmt::format("{}.decoders[{}]", where, i), depth + 1);
    return;
  }
  r.error(where + ".type", fmt::format("decoder type {:?} is not supported (only ByteLevel)", type));
}

// "bos_token": "<s>" or {"content": "<s>", ...} (transformers' serialized AddedToken) or null.
std::optional<std::string> config_token(const Reader& r, const json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content")) return r.string((*it)["content"], std::string(key) + ".content");
  r.error(key, "expected a string or {\"content\": ...}");
}

void load_bos_eos(TokenizerState& s, std::string_view config_text, std::string_view generation_text) {
  auto lookup = [&](const Reader& r, const std::string& token, const char* key) {
    auto it = s.token_to_id.find(token);
    if (it == s.token_to_id.end()) r.error(key, fmt::format("{:?} is not a token of tokenizer.json", token));
    return it->second;
  };
  auto check_range = [&](const Reader& r, int32_t id, const char* key) {
    if (static_cast<size_t>(id) >= s.id_kind.size() || s.id_kind[id] == IdKind::None)
      r.error(key, fmt::format("token id {} is not in tokenizer.json", id));
    return id;
  };
  std::vector<int32_t> eos;
  if (!generation_text.empty()) {
    const Reader r{"generation_config.json"};
    const json g = parse_json(generation_text, r.source);
    if (!g.is_object()) r.error("(root)", "expected a JSON object");
    if (auto it = g.find("eos_token_id"); it != g.end() && !it->is_null()) {
      if (it->is_array()) {
        for (const json& id : *it) eos.push_back(check_range(r, r.id(id, "eos_token_id"), "eos_token_id"));
      } else {
        eos.push_back(check_range(r, r.id(*it, "eos_token_id"), "eos_token_id"));
      }
    }
    if (auto it = g.find("bos_token_id"); it != g.end() && !it->is_null())
      s.bos = check_range(r, r.id(*it, "bos_token_id"), "bos_token_id");
  }
  if (!config_text.empty()) {
    const Reader r{"tokenizer_config.json"};
    const json c = parse_json(config_text, r.source);
    if (!c.is_object()) r.error("(root)", "expected a JSON object");
    // tokenizer_config names the token the chat template writes; prefer it over the id.
    if (auto bos = config_token(r, c, "bos_token")) s.bos = lookup(r, *bos, "bos_token");
    if (auto token = config_token(r, c, "eos_token")) eos.push_back(lookup(r, *token, "eos_token"));
  }
  for (int32_t id : eos)
    if (std::find(s.eos.begin(), s.eos.end(), id) == s.eos.end()) s.eos.push_back(id);
}

const TokenizerState& checked(const std::shared_ptr<TokenizerState>& state) {
  if (!state) fail("tokenizer used before Tokenizer::load");
  return *state;
}

}  // namespace

Tokenizer Tokenizer::load(const std::filesystem::path& dir) {
  const auto tokenizer_path = dir / "tokenizer.json";
  const std::string tokenizer_text = read_tokenizer_file(tokenizer_path);
  std::string config_text, generation_text;
  if (std::filesystem::exists(dir / "tokenizer_config.json")) config_text = read_tokenizer_file(dir / "tokenizer_config.json");
  if (std::filesystem::exists(dir / "generation_config.json"))
    generation_text = read_tokenizer_file(dir / "generation_config.json");
  return from_json(tokenizer_text, config_text, generation_text, tokenizer_path.string());
}

Tokenizer Tokenizer::from_json(std::string_view tokenizer_json, std::string_view tokenizer_config_json,
                               std::string_view generation_config_json, std::string_view source) {
  const Reader r{source};
  const json root = parse_json(tokenizer_json, source);
  auto s = std::make_shared<TokenizerState>();
  try {
    if (!root.is_object()) r.error("(root)", "expected a JSON object");
    {
      const json& model = r.field(root, "model", "(root)");
      const size_t vocab = model.is_object() && model.contains("vocab") ? model["vocab"].size() : 0;
      const size_t added = root.contains("added_tokens") ? root["added_tokens"].size() : 0;
      s->id_limit = 2 * (vocab + added) + 65536;
    }
    load_model(*s, r, r.field(root, "model", "(root)"));
    load_added_tokens(*s, r, root);
    if (auto it = root.find("normalizer"); it != root.end() && !it->is_null()) {
      // An empty Sequence normalizes nothing; anything else would change the text.
      if (!(it->is_object() && it->value("type", "") == "Sequence" && it->contains("normalizers") &&
            (*it)["normalizers"].is_array() && (*it)["normalizers"].empty()))
        r.error("normalizer", fmt::format("normalizers are not supported (got {})", json_excerpt(*it)));
    }
    load_pre_tokenizer(*s, r, member_or_null(root, "pre_tokenizer"), "pre_tokenizer");
    if (std::none_of(s->steps.begin(), s->steps.end(),
                     [](const PreTokenizeStep& st) { return st.kind == PreTokenizeStep::ByteLevel; }))
      r.error("pre_tokenizer", "no ByteLevel step: only byte-level BPE is supported");
    load_post_processor(*s, r, member_or_null(root, "post_processor"), "post_processor");
    check_decoder(r, member_or_null(root, "decoder"), "decoder");
    for (const auto* ids : {&s->prefix_ids, &s->suffix_ids})
      for (int32_t id : *ids)
        if (static_cast<size_t>(id) >= s->id_kind.size() || s->id_kind[id] == IdKind::None)
          r.error("post_processor", fmt::format("template token id {} is not in the vocabulary", id));
    load_bos_eos(*s, tokenizer_config_json, generation_config_json);
    // A byte-level piece is one byte a symbol, so a token stands for its own bytes (an unknown
    // byte's unk token for one), an added token for its content, unless it also swallows the
    // whitespace beside it: then there is no bound.
    size_t longest = 4;
    for (const std::string& bytes : s->id_bytes) longest = std::max(longest, bytes.size());
    for (const AddedTokenSpec& a : s->added) longest = std::max(longest, a.content.size());
    const bool strips = std::any_of(s->added.begin(), s->added.end(), [](const auto& a) { return a.lstrip || a.rstrip; });
    s->max_input_bytes_per_token = strips ? 0 : longest;
  } catch (const json::exception& e) {
    // Belt and braces: a shape the checks above missed still ends as a clear error.
    fail("{}: unexpected structure: {}", source, e.what());
  }
  return Tokenizer{std::move(s)};
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special) const {
  const TokenizerState& s = checked(state);
  if (const size_t bad = first_invalid_utf8(text); bad != std::string_view::npos)
    fail("cannot tokenize: the text is not valid UTF-8 at byte {} of {} (sanitize_utf8() replaces invalid "
         "bytes with U+FFFD)",
         bad, text.size());

  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + s.prefix_ids.size() + s.suffix_ids.size() + 1);
  if (add_special) ids = s.prefix_ids;

  // Added tokens first: those matched on raw text, then the "normalized" ones on what is left.
  std::vector<Segment> raw_segments, segments;
  split_added_tokens(s.match_raw, text, {0, text.size(), -1}, raw_segments);
  for (const Segment& seg : raw_segments) {
    if (seg.token_id >= 0) segments.push_back(seg);
    else split_added_tokens(s.match_normalized, text, seg, segments);
  }

  std::vector<std::string_view> pieces, next;
  std::vector<Piece> split;
  std::deque<std::string> owned;  // pieces that got a prefix space
  for (const Segment& seg : segments) {
    if (seg.token_id >= 0) {
      ids.push_back(seg.token_id);
      continue;
    }
    pieces.assign(1, text.substr(seg.offset, seg.length));
    for (const PreTokenizeStep& step : s.steps) {
      next.clear();
      for (std::string_view piece : pieces) {
        if (step.kind == PreTokenizeStep::ByteLevel && step.add_prefix_space && piece.front() != ' ') {
          piece = owned.emplace_back(" " + std::string(piece));
        }
        if (!step.has_regex) {
          next.push_back(piece);
          continue;
        }
        split.clear();
        split_by_regex(step.regex, piece, {0, piece.size()}, step.behavior, step.invert, split);
        for (const Piece& p : split) next.push_back(piece.substr(p.offset, p.length));
      }
      pieces.swap(next);
    }
    for (std::string_view piece : pieces) bpe_encode_cached(s.bpe, state->cache, piece, ids);
  }
  if (add_special) ids.insert(ids.end(), s.suffix_ids.begin(), s.suffix_ids.end());
  return ids;
}

bool Tokenizer::is_valid(int32_t id) const {
  const TokenizerState& s = checked(state);
  return id >= 0 && static_cast<size_t>(id) < s.id_kind.size() && s.id_kind[id] != IdKind::None;
}

const std::string& Tokenizer::token_bytes(int32_t id) const {
  if (!is_valid(id)) fail("token id {} is not in the vocabulary (size {})", id, vocab_size());
  return state->id_bytes[id];
}

const std::string& Tokenizer::token(int32_t id) const {
  if (!is_valid(id)) fail("token id {} is not in the vocabulary (size {})", id, vocab_size());
  return state->id_token[id];
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string bytes;
  for (int32_t id : ids) {
    if (skip_special && is_special(id)) continue;
    bytes += token_bytes(id);
  }
  return sanitize_utf8(bytes);
}

size_t Tokenizer::max_input_bytes_per_token() const { return checked(state).max_input_bytes_per_token; }
int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(checked(state).id_kind.size()); }
int32_t Tokenizer::bos_id() const { return checked(state).bos; }
std::vector<int32_t> Tokenizer::eos_ids() const { return checked(state).eos; }

std::optional<int32_t> Tokenizer::token_id(std::string_view token) const {
  const TokenizerState& s = checked(state);
  auto it = s.token_to_id.find(token);
  if (it == s.token_to_id.end()) return std::nullopt;
  return it->second;
}

bool Tokenizer::is_special(int32_t id) const {
  return is_valid(id) && state->id_special[id];
}

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer(tokenizer), skip_special(skip_special) {}

std::string StreamDecoder::push(int32_t id) {
  std::string out;
  if (skip_special && tokenizer.is_special(id)) return out;
  pending += tokenizer.token_bytes(id);
  // Emit every whole character; hold back only a trailing sequence that later bytes could
  // still complete. Bytes that can never become valid come out as U+FFFD right away, exactly
  // where decode() would put them.
  const size_t used = append_utf8_lossy(out, pending, /*keep_incomplete_tail=*/true);
  pending.erase(0, used);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out;
  append_utf8_lossy(out, pending, false);
  pending.clear();
  return out;
}

}  // namespace eaglevk::loader
