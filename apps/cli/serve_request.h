#pragma once
// `eaglevk serve`'s requests: the JSON bodies of POST /v1/chat/completions and /v1/completions,
// checked and turned into a plain struct before any model work. Every field OpenAI defines is
// either taken, ignored as OpenAI itself ignores it (user, metadata, store, ...), or refused by
// name when it would change the answer and eaglevk does not do it (n > 1, tools, penalties,
// logit_bias, a JSON response format, echo, best_of); a field OpenAI does not know is refused as
// OpenAI refuses it ("unrecognized request argument"), so that a typo such as "max_token" does
// not pass unnoticed. The parser touches no model and no device (the fuzz target
// tests/fuzz/serve_request_fuzz.cpp runs it alone).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "loader/chat_template.h"

namespace eaglevk::cli::serve {

// An answer other than 200, in OpenAI's error shape: {"error": {"message", "type", "param", "code"}}.
struct HttpError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the request field at fault; empty: none (null)
  std::string code;   // empty: null
};

// What a handler throws to answer with an error.
struct RequestRefused {
  HttpError error;
};

[[noreturn]] void refuse(int status, std::string param, std::string message, std::string code = {});

enum class Endpoint { Chat, Completion };

// An image of a chat message: the bytes of a data URL, or a file path (file:// URL or a plain
// path) that the server resolves against --allowed-image-dir before reading it.
struct ImageInput {
  std::string bytes;
  std::string path;
};

// The request limits the parser enforces (the server's flags set them).
struct RequestLimits {
  uint32_t max_logprobs = 20;   // engine::kMaxLogprobs
  uint32_t max_stop = 4;        // OpenAI's limit on stop strings
  uint32_t max_images = 8;
};

struct Request {
  Endpoint endpoint = Endpoint::Chat;
  std::string model;
  // Chat: the messages as the chat template takes them; an image part keeps its place (its
  // `image` path is empty) and images[i] is the i-th image part in prompt order.
  std::vector<loader::ChatMessage> messages;
  std::vector<ImageInput> images;
  // Completion: the prompt as text (encoded with BOS, as `eaglevk run -p`), or as token ids
  // (used as given, as `eaglevk run --prompt-ids`).
  std::string prompt;
  std::vector<int32_t> prompt_ids;
  std::optional<uint32_t> max_tokens;  // absent: as many as the context holds
  float temperature = 1;               // OpenAI's default
  float top_p = 1;
  int32_t top_k = 0;                   // 0: off (vLLM's extension; -1 is taken as off too)
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;          // stream_options.include_usage
  bool logprobs = false;               // chat: logprobs; completion: logprobs given
  uint32_t top_logprobs = 0;           // chat: top_logprobs; completion: the logprobs count
  bool ignore_eos = false;             // vLLM's extension
  bool return_token_ids = false;       // vLLM's extension: the generated ids in each choice
};

// Parses and checks a body for `endpoint`; throws RequestRefused (400) naming the field and what
// is wrong with it.
Request parse_request(std::string_view body, Endpoint endpoint, const RequestLimits& limits = {});

// base64 (RFC 4648, with padding; whitespace refused) to bytes; nullopt when it is not base64.
std::optional<std::string> decode_base64(std::string_view text);

}  // namespace eaglevk::cli::serve
