#pragma once
// `eaglevk serve`'s answers in OpenAI's shapes: chat.completion and text_completion objects,
// their streamed chunks (server-sent events), usage with an `eaglevk` object (drafts, accepted
// tokens, acceptance length), and errors. Plain data in, JSON out: no model, no device.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/cli/serve_request.h"

namespace eaglevk::cli::serve {

// One generated token's log-probability, its text (the token alone, special tokens included),
// and the most likely tokens at its position.
struct TokenLogprob {
  std::string token;
  float logprob = 0;
  std::vector<std::pair<std::string, float>> top;
};

struct Usage {
  uint64_t prompt_tokens = 0, completion_tokens = 0;
  bool speculative = false;  // with a draft: the eaglevk object carries the speculation counters
  uint64_t drafts = 0, draft_tokens = 0, accepted_tokens = 0;
  double acceptance_length = 0;  // 1 + accepted / drafts (vLLM's mean acceptance length)
};

// One request's outcome.
struct Answer {
  std::string text;
  std::string finish_reason;  // "stop" (end of sequence, a stop string) or "length"
  std::vector<int32_t> token_ids;
  std::vector<TokenLogprob> logprobs;  // with Request::logprobs
  Usage usage;
};

// What names one answer: "chatcmpl-N" / "cmpl-N", its creation time, the served model's name.
struct AnswerId {
  std::string id;
  int64_t created = 0;
  std::string model;
};

nlohmann::json usage_json(const Usage& u);
nlohmann::json error_json(const HttpError& e);
// The whole answer of a request that did not stream.
nlohmann::json answer_json(const Request& r, const AnswerId& id, const Answer& a);
// A streamed chunk: text (and for the first chat chunk, the assistant role), and at the end the
// finish reason. With include_usage every chunk carries "usage": null, as OpenAI's do. With
// Request::logprobs it carries the log-probabilities of its tokens (`logprobs`; a completion's
// text_offset counts from `text_offset`, the length of the token texts streamed before).
nlohmann::json chunk_json(const Request& r, const AnswerId& id, std::string_view text, bool first,
                          const std::optional<std::string>& finish_reason, const std::vector<int32_t>& token_ids = {},
                          const std::vector<TokenLogprob>& logprobs = {}, size_t text_offset = 0);
// The last chunk of include_usage: no choices, the usage.
nlohmann::json usage_chunk_json(const Request& r, const AnswerId& id, const Usage& u);

// JSON text as sent: compact, invalid UTF-8 (a lone byte of a token's text) as U+FFFD.
std::string json_text(const nlohmann::json& j);
// One server-sent event: "data: JSON\n\n".
std::string sse_event(const nlohmann::json& j);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

}  // namespace eaglevk::cli::serve
