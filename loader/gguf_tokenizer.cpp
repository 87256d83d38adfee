#include "loader/gguf_tokenizer.h"

#include <algorithm>
#include <array>

#include <eaglevk/error.h>

#include "loader/bpe.h"
#include "loader/pretokenize.h"

namespace eaglevk::loader {

using nlohmann::json;

namespace {

// llama.cpp's token types (llama_token_type in llama.h).
enum TokenType : int64_t { Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6 };

// The split regexes, as Hugging Face's tokenizer.json files spell them (PCRE2 takes the
// (?i:...) groups that llama.cpp has to rewrite for std::regex).
struct PreTokenizer {
  std::string_view name;
  std::string_view regex;
};
constexpr std::array kPreTokenizers = {
    // Llama-3 (tokenizer.json of Meta-Llama-3*); llama.cpp writes "llama-bpe" for it.
    PreTokenizer{"llama-bpe",
                 R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
    // Llama-4: tiktoken's o200k pattern (O200K_PATTERN in llama-models and in transformers'
    // Llama-4 converter); llama.cpp maps "llama4" to the same regex as "gpt-4o".
    PreTokenizer{"llama4",
                 R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
    // Qwen2 and Qwen3 (their tokenizer.json's Split pattern: Llama-3's with digits one at a
    // time). Their tokenizer.json also asks for NFC normalisation, which is not applied here:
    // text that is not in NFC already may split differently from transformers'.
    PreTokenizer{"qwen2",
                 R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
};

// A GGUF stores one eos_token_id, where generation_config.json lists every token that ends a
// turn. Control tokens with these names end generation too (llama.cpp recovers its
// end-of-generation set by name the same way).
constexpr std::array<std::string_view, 5> kEndOfGenerationNames = {"<|end_of_text|>", "<|eot_id|>", "<|eom_id|>",
                                                                   "<|eot|>", "<|eom|>"};

std::string supported_pre_names() {
  std::string out;
  for (const PreTokenizer& p : kPreTokenizers) out += (out.empty() ? "'" : ", '") + std::string(p.name) + "'";
  return out;
}

// A token id key: absent, or an index into the vocabulary.
std::optional<int32_t> token_id_key(const GgufHeader& h, const char* key, size_t vocab) {
  const std::optional<int64_t> id = h.get_int(key);
  if (!id) return std::nullopt;
  if (*id < 0 || static_cast<uint64_t>(*id) >= vocab)
    fail("{}: {} = {} is not a token id (the vocabulary has {} tokens)", h.label, key, *id, vocab);
  return static_cast<int32_t>(*id);
}

struct Vocabulary {
  std::vector<std::string> tokens;
  std::vector<int64_t> types;
};

Vocabulary read_vocabulary(const GgufHeader& h) {
  Vocabulary v;
  auto tokens = h.get_string_array("tokenizer.ggml.tokens");
  if (!tokens) fail("{}: no tokenizer.ggml.tokens: the file carries no vocabulary", h.label);
  if (tokens->empty()) fail("{}: tokenizer.ggml.tokens is empty", h.label);
  if (tokens->size() > static_cast<size_t>(INT32_MAX))
    fail("{}: tokenizer.ggml.tokens has {} entries; token ids are 32-bit", h.label, tokens->size());
  // llama.cpp would take a missing type list as "all normal", which would leave BOS and the
  // chat headers as ordinary text; every converter writes it, so its absence means a bad file.
  auto types = h.get_int_array("tokenizer.ggml.token_type");
  if (!types) fail("{}: no tokenizer.ggml.token_type (needed to tell control tokens from text)", h.label);
  if (types->size() != tokens->size())
    fail("{}: tokenizer.ggml.tokens has {} entries but tokenizer.ggml.token_type has {}", h.label, tokens->size(),
         types->size());
  // Scores (SentencePiece's; a byte-level BPE vocabulary does not use them) are one per token
  // too: another count means the arrays were written for different vocabularies.
  if (auto scores = h.get_float_array("tokenizer.ggml.scores"); scores && scores->size() != tokens->size())
    fail("{}: tokenizer.ggml.tokens has {} entries but tokenizer.ggml.scores has {}", h.label, tokens->size(),
         scores->size());
  StringMap<size_t> seen;
  for (size_t i = 0; i < tokens->size(); ++i) {
    const std::string& token = (*tokens)[i];
    const int64_t type = (*types)[i];
    if (type < Normal || type > Byte)
      fail("{}: tokenizer.ggml.token_type[{}] = {} is not a token type (1 normal ... 6 byte)", h.label, i, type);
    if (token.empty()) fail("{}: tokenizer.ggml.tokens[{}] is empty", h.label, i);
    if (first_invalid_utf8(token) != std::string_view::npos)
      fail("{}: tokenizer.ggml.tokens[{}] is not valid UTF-8", h.label, i);
    // tokenizer.json maps strings to ids, so a repeated string would silently lose an id.
    if (auto [it, fresh] = seen.emplace(token, i); !fresh)
      fail("{}: tokenizer.ggml.tokens[{}] {:?} repeats tokens[{}]", h.label, i, token, it->second);
  }
  v.tokens = std::move(*tokens);
  v.types = std::move(*types);
  return v;
}

bool is_added(int64_t type) { return type == Control || type == UserDefined; }

json read_merges(const GgufHeader& h, const Vocabulary& v) {
  auto merges = h.get_string_array("tokenizer.ggml.merges");
  if (!merges) fail("{}: no tokenizer.ggml.merges (a BPE vocabulary needs its merges)", h.label);
  // Checked here rather than left to from_json so that the message names the GGUF key.
  StringMap<bool> bpe_token;
  for (size_t i = 0; i < v.tokens.size(); ++i)
    if (!is_added(v.types[i])) bpe_token.emplace(v.tokens[i], true);
  json out = json::array();
  for (size_t rank = 0; rank < merges->size(); ++rank) {
    const std::string& m = (*merges)[rank];
    // Byte-level tokens spell a space as "Ġ", so the one space is the separator.
    const size_t space = m.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 == m.size() || m.find(' ', space + 1) != std::string::npos)
      fail("{}: tokenizer.ggml.merges[{}] {:?} is not a \"left right\" pair", h.label, rank, m);
    const std::string left = m.substr(0, space), right = m.substr(space + 1);
    for (const std::string& part : {left, right, left + right})
      if (!bpe_token.contains(part))
        fail("{}: tokenizer.ggml.merges[{}] {:?} needs the token {:?}, which is not in tokenizer.ggml.tokens", h.label,
             rank, m, part);
    out.push_back(m);
  }
  return out;
}

}  // namespace

GgufTokenizerJson gguf_tokenizer_json(const GgufHeader& h) {
  const std::optional<std::string> model = h.get_string("tokenizer.ggml.model");
  if (!model) fail("{}: no tokenizer.ggml.model: the file carries no tokenizer", h.label);
  if (*model != "gpt2")
    fail("{}: tokenizer.ggml.model is '{}'{}; only 'gpt2' (byte-level BPE, as Llama-3 and Llama-4 use) is supported",
         h.label, *model, *model == "llama" ? " (a SentencePiece vocabulary)" : "");
  const std::optional<std::string> pre = h.get_string("tokenizer.ggml.pre");
  if (!pre) fail("{}: no tokenizer.ggml.pre: the pre-tokenizer regex is unknown (supported: {})", h.label, supported_pre_names());
  auto found = std::find_if(kPreTokenizers.begin(), kPreTokenizers.end(),
                            [&](const PreTokenizer& p) { return p.name == *pre; });
  if (found == kPreTokenizers.end())
    fail("{}: tokenizer.ggml.pre is '{}', which this runtime does not know (supported: {})", h.label, *pre,
         supported_pre_names());

  const Vocabulary v = read_vocabulary(h);
  const size_t n = v.tokens.size();
  const json merges = read_merges(h, v);
  const std::optional<int32_t> bos = token_id_key(h, "tokenizer.ggml.bos_token_id", n);
  const std::optional<int32_t> eos = token_id_key(h, "tokenizer.ggml.eos_token_id", n);
  const std::optional<int32_t> unk = token_id_key(h, "tokenizer.ggml.unknown_token_id", n);
  // Both pre-tokenizers belong to Llama tokenizers, whose post-processor writes BOS, and
  // llama.cpp assumes the same when the key is missing.
  const bool add_bos = h.get_bool("tokenizer.ggml.add_bos_token").value_or(true);
  const bool add_eos = h.get_bool("tokenizer.ggml.add_eos_token").value_or(false);

  json vocab = json::object();
  json added = json::array();
  for (size_t i = 0; i < n; ++i) {
    if (is_added(v.types[i])) {
      // As transformers writes Llama's added tokens: matched in the raw text, never stripped.
      added.push_back({{"id", i},
                       {"content", v.tokens[i]},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", false},
                       {"special", v.types[i] == Control}});
    } else {
      vocab[v.tokens[i]] = i;
    }
  }

  json tokenizer;
  tokenizer["version"] = "1.0";
  tokenizer["added_tokens"] = std::move(added);
  tokenizer["normalizer"] = nullptr;
  tokenizer["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       json::array({{{"type", "Split"},
                     {"pattern", {{"Regex", std::string(found->regex)}}},
                     {"behavior", "Isolated"},
                     {"invert", false}},
                    {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}})}};

  json single = json::array();
  json specials = json::object();
  auto special_piece = [&](std::optional<int32_t> id, const char* key) {
    if (!id) fail("{}: tokenizer.ggml.add_{}_token is true but there is no tokenizer.ggml.{}_token_id", h.label, key, key);
    const std::string& name = v.tokens[*id];
    specials[name] = {{"id", name}, {"ids", json::array({*id})}, {"tokens", json::array({name})}};
    return json{{"SpecialToken", {{"id", name}, {"type_id", 0}}}};
  };
  if (add_bos) single.push_back(special_piece(bos, "bos"));
  single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
  if (add_eos) single.push_back(special_piece(eos, "eos"));
  tokenizer["post_processor"] = {{"type", "TemplateProcessing"}, {"single", single}, {"special_tokens", specials}};
  tokenizer["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  tokenizer["model"] = {{"type", "BPE"},
                        {"dropout", nullptr},
                        {"unk_token", unk ? json(v.tokens[*unk]) : json(nullptr)},
                        {"continuing_subword_prefix", nullptr},
                        {"end_of_word_suffix", nullptr},
                        {"fuse_unk", false},
                        {"byte_fallback", false},
                        // Llama-3 and transformers' tiktoken converter (Llama-4) both set it: a
                        // pre-token that is a whole vocabulary entry is that entry.
                        {"ignore_merges", true},
                        {"vocab", std::move(vocab)},
                        {"merges", merges}};

  json generation = json::object();
  if (bos) generation["bos_token_id"] = *bos;
  std::vector<int32_t> eog;
  auto add_eog = [&](std::optional<int32_t> id) {
    if (id && std::find(eog.begin(), eog.end(), *id) == eog.end()) eog.push_back(*id);
  };
  add_eog(eos);
  add_eog(token_id_key(h, "tokenizer.ggml.eot_token_id", n));
  add_eog(token_id_key(h, "tokenizer.ggml.eom_token_id", n));
  for (size_t i = 0; i < n; ++i)
    if (v.types[i] == Control &&
        std::find(kEndOfGenerationNames.begin(), kEndOfGenerationNames.end(), v.tokens[i]) != kEndOfGenerationNames.end())
      add_eog(static_cast<int32_t>(i));
  if (!eog.empty()) generation["eos_token_id"] = eog;
  return {std::move(tokenizer), std::move(generation)};
}

Tokenizer tokenizer_from_gguf(const GgufHeader& h) {
  const GgufTokenizerJson j = gguf_tokenizer_json(h);
  // A round trip through text: from_json takes the file contents. For a 128k vocabulary that
  // costs a fraction of a second, once per load.
  return Tokenizer::from_json(j.tokenizer.dump(), {}, j.generation_config.dump(),
                              fmt::format("{} (tokenizer.ggml.*)", h.label));
}

std::optional<ChatTemplate> chat_template_from_gguf(const GgufHeader& h, const Tokenizer& tokenizer) {
  const std::optional<std::string> jinja = h.get_string("tokenizer.chat_template");
  if (!jinja) return std::nullopt;
  const std::string bos = tokenizer.bos_id() >= 0 ? tokenizer.token(tokenizer.bos_id()) : std::string();
  // Checked here so that the message names the GGUF key rather than tokenizer_config.json.
  if (bos.empty() && jinja->find("bos_token") != std::string::npos)
    fail("{}: tokenizer.chat_template writes bos_token, but there is no tokenizer.ggml.bos_token_id", h.label);
  // eos_token as transformers would pass it: the tokenizer's first end-of-sequence token.
  const std::vector<int32_t> eos_ids = tokenizer.eos_ids();
  const std::string eos = eos_ids.empty() ? std::string() : tokenizer.token(eos_ids[0]);
  try {
    ChatTemplate t = ChatTemplate::from_string(*jinja, bos, eos);
    t.origin = fmt::format("{} tokenizer.chat_template", h.label);
    return t;
  } catch (const Error& e) {
    fail("{}: tokenizer.chat_template: {}", h.label, e.what());
  }
}

}  // namespace eaglevk::loader
