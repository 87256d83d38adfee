#pragma once
// Hugging Face `tokenizer.json` tokenizers of the byte-level BPE kind (GPT-2, Llama-3, Llama-4):
// encode text to token ids and decode ids back, matching the `tokenizers` library.
//
// Supported, and anything else is refused with an eaglevk::Error naming it:
//   model          BPE (vocab, merges as "a b" strings or [a, b] pairs, ignore_merges, unk_token);
//   normalizer     none;
//   pre_tokenizer  ByteLevel (use_regex: the GPT-2 regex), Split (Regex or String pattern, any
//                  behavior, invert), and Sequence of those; there must be a ByteLevel step;
//   post_processor TemplateProcessing (the `single` template), ByteLevel, Sequence of those;
//   decoder        ByteLevel.
// Added tokens (special or not) are matched in the raw text before pre-tokenization, longest
// first at the leftmost position, honouring single_word, lstrip and rstrip.
//
// Input text must be valid UTF-8: encode() throws on anything else, naming the byte offset, and
// sanitize_utf8() turns arbitrary bytes into valid UTF-8 (U+FFFD for each bad sequence) for
// callers that would rather substitute than fail. decode() returns valid UTF-8 in the same way
// (as HF's decode does); token_bytes() gives the raw bytes of one token.
// Decoding does not apply transformers' `clean_up_tokenization_spaces`: text -> ids -> text is
// exact, as with the `tokenizers` library itself.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace eaglevk::loader {

// tokenizer.json, tokenizer_config.json and generation_config.json are refused above this size,
// before they are read. The largest real tokenizer.json files are ~30 MB (Llama-3's is ~9 MB,
// Llama-4's ~28 MB); 64 MiB leaves room for those while bounding the memory that parsing takes
// (nlohmann's document is several times the text).
inline constexpr size_t kMaxTokenizerFileBytes = size_t(64) << 20;

struct TokenizerState;  // tokenizer.cpp

struct Tokenizer {
  // Reads dir/tokenizer.json, and bos/eos from dir/tokenizer_config.json and
  // dir/generation_config.json when they exist.
  static Tokenizer load(const std::filesystem::path& dir);
  // The same from file contents; an empty config string means "no such file". `source` names
  // the origin in error messages.
  static Tokenizer from_json(std::string_view tokenizer_json, std::string_view tokenizer_config_json = {},
                             std::string_view generation_config_json = {},
                             std::string_view source = "tokenizer.json");

  // add_special: apply the post-processor template (Llama-3: BOS in front), as HF's
  // encode(add_special_tokens=True). Special-token strings in `text` always map to their ids.
  std::vector<int32_t> encode(std::string_view text, bool add_special) const;
  // skip_special leaves out special added tokens (BOS, EOS, headers...).
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;
  // Raw bytes of one token: not necessarily valid UTF-8 on its own.
  const std::string& token_bytes(int32_t id) const;
  // The token as spelled in tokenizer.json (byte-level form, e.g. "Ġthe"), or an added token's content.
  const std::string& token(int32_t id) const;

  int32_t vocab_size() const;  // largest id + 1, added tokens included
  // The most bytes of input text one token can stand for (the longest token's bytes); 0 when
  // there is no bound (an added token that strips the whitespace beside it). A text of more than
  // N * max_input_bytes_per_token() bytes encodes to more than N tokens, so a prompt that long
  // can be refused before it is encoded (encoding costs memory many times the text's size).
  size_t max_input_bytes_per_token() const;
  int32_t bos_id() const;      // -1 when the tokenizer has no BOS token
  // Ids that end generation: generation_config.json's eos_token_id (int or list), then
  // tokenizer_config.json's eos_token, without duplicates. Empty when neither file names one.
  std::vector<int32_t> eos_ids() const;
  std::optional<int32_t> token_id(std::string_view token) const;  // as token(): "Ġthe", "<|eot_id|>"
  bool is_special(int32_t id) const;
  bool is_valid(int32_t id) const;  // an id that decodes to something

  std::shared_ptr<TokenizerState> state;  // shared: copies are cheap and share the BPE cache
};

// Replaces every invalid UTF-8 sequence in `text` with U+FFFD (maximal-subpart rule).
std::string sanitize_utf8(std::string_view text);

// Decodes a stream of generated ids into text pieces that are always whole UTF-8 characters:
// a character split over several tokens comes out when its last byte arrives. The pieces
// concatenate to decode(all ids, skip_special).
struct StreamDecoder {
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = false);
  std::string push(int32_t id);
  // The bytes still held (an incomplete character at the end), as U+FFFD. Resets the decoder.
  std::string flush();

  Tokenizer tokenizer;
  bool skip_special;
  std::string pending;  // bytes of an incomplete trailing UTF-8 sequence
};

}  // namespace eaglevk::loader
