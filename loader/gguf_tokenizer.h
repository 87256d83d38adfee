#pragma once
// The tokenizer and chat template a GGUF file carries in its metadata, for the byte-level BPE
// vocabularies this runtime serves (Llama-3, Llama-4, Qwen3). The keys are turned into the
// tokenizer.json they came from, and that goes through Tokenizer::from_json, so a GGUF and a
// Hugging Face folder tokenize with one code path.
//
// Keys read (llama.cpp's convert_hf_to_gguf.py writes them):
//   tokenizer.ggml.model        "gpt2" (byte-level BPE); anything else is refused, naming it
//   tokenizer.ggml.pre          "llama-bpe" (Llama-3's split regex), "llama4" (Llama-4's,
//                               tiktoken's o200k pattern) or "qwen2" (Qwen2's and Qwen3's);
//                               anything else is refused
//   tokenizer.ggml.tokens       [string], byte-level form ("Ġthe"); added tokens as written
//   tokenizer.ggml.token_type   [int]: 1 normal, 2 unknown, 3 control, 4 user-defined,
//                               5 unused, 6 byte. Control tokens become special added tokens,
//                               user-defined ones plain added tokens, the rest the BPE vocabulary
//   tokenizer.ggml.merges       ["left right"], by rank
//   tokenizer.ggml.bos_token_id, eos_token_id, eot_token_id, eom_token_id, unknown_token_id
//   tokenizer.ggml.add_bos_token, add_eos_token   (the post-processor template)
//   tokenizer.chat_template
#include <optional>

#include <nlohmann/json.hpp>

#include "loader/chat_template.h"
#include "loader/gguf.h"
#include "loader/tokenizer.h"

namespace eaglevk::loader {

// The Hugging Face tokenizer.json equivalent to the header's tokenizer.ggml.* keys, and the
// generation_config.json that carries its BOS and end-of-generation ids. Every key is checked
// first; a bad one gives an eaglevk::Error naming the file and the key.
struct GgufTokenizerJson {
  nlohmann::json tokenizer;
  nlohmann::json generation_config;
};
GgufTokenizerJson gguf_tokenizer_json(const GgufHeader& h);

Tokenizer tokenizer_from_gguf(const GgufHeader& h);

// tokenizer.chat_template parsed as ChatTemplate::from_string does, with the BOS text taken
// from `tokenizer` (the one tokenizer_from_gguf made from the same header). nullopt when the
// file has no template.
std::optional<ChatTemplate> chat_template_from_gguf(const GgufHeader& h, const Tokenizer& tokenizer);

}  // namespace eaglevk::loader
