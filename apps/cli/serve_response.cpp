#include "apps/cli/serve_response.h"

namespace eaglevk::cli::serve {
namespace {

using json = nlohmann::json;

json bytes_of(const std::string& text) {
  json bytes = json::array();
  for (unsigned char c : text) bytes.push_back(int(c));
  return bytes;
}

// The chat API's logprobs: {"content": [{token, logprob, bytes, top_logprobs}], "refusal": null}.
json chat_logprobs(const Request& r, const std::vector<TokenLogprob>& logprobs) {
  json content = json::array();
  for (const TokenLogprob& t : logprobs) {
    json top = json::array();
    for (size_t i = 0; i < t.top.size() && i < r.top_logprobs; ++i)
      top.push_back({{"token", t.top[i].first}, {"logprob", t.top[i].second}, {"bytes", bytes_of(t.top[i].first)}});
    content.push_back({{"token", t.token}, {"logprob", t.logprob}, {"bytes", bytes_of(t.token)}, {"top_logprobs", top}});
  }
  return {{"content", content}, {"refusal", nullptr}};
}

// The completions API's: parallel lists, the top ones as {token: logprob} objects; text_offset
// counts from `offset` (a streamed chunk's: the token texts before it).
json completion_logprobs(const Request& r, const std::vector<TokenLogprob>& logprobs, size_t offset = 0) {
  json tokens = json::array(), values = json::array(), tops = json::array(), offsets = json::array();
  for (const TokenLogprob& t : logprobs) {
    tokens.push_back(t.token);
    values.push_back(t.logprob);
    offsets.push_back(offset);
    offset += t.token.size();
    json top = json::object();
    for (size_t i = 0; i < t.top.size() && i < r.top_logprobs; ++i) top[t.top[i].first] = t.top[i].second;
    tops.push_back(top);
  }
  return {{"tokens", tokens}, {"token_logprobs", values}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json head(const Request& r, const AnswerId& id, bool chunk) {
  const char* object = r.endpoint == Endpoint::Chat ? (chunk ? "chat.completion.chunk" : "chat.completion")
                                                    : "text_completion";
  return {{"id", id.id}, {"object", object}, {"created", id.created}, {"model", id.model}};
}

}  // namespace

json usage_json(const Usage& u) {
  json j = {{"prompt_tokens", u.prompt_tokens},
            {"completion_tokens", u.completion_tokens},
            {"total_tokens", u.prompt_tokens + u.completion_tokens}};
  if (u.speculative)
    j["eaglevk"] = {{"drafts", u.drafts},
                    {"draft_tokens", u.draft_tokens},
                    {"accepted_tokens", u.accepted_tokens},
                    {"acceptance_length", u.acceptance_length}};
  return j;
}

json error_json(const HttpError& e) {
  return {{"error",
           {{"message", e.message},
            {"type", e.type},
            {"param", e.param.empty() ? json(nullptr) : json(e.param)},
            {"code", e.code.empty() ? json(nullptr) : json(e.code)}}}};
}

json answer_json(const Request& r, const AnswerId& id, const Answer& a) {
  json j = head(r, id, false);
  json choice = {{"index", 0}};
  if (r.endpoint == Endpoint::Chat) {
    choice["message"] = {{"role", "assistant"}, {"content", a.text}};
    choice["logprobs"] = r.logprobs ? chat_logprobs(r, a.logprobs) : json(nullptr);
  } else {
    choice["text"] = a.text;
    choice["logprobs"] = r.logprobs ? completion_logprobs(r, a.logprobs) : json(nullptr);
  }
  choice["finish_reason"] = a.finish_reason;
  if (r.return_token_ids) choice["token_ids"] = a.token_ids;
  j["choices"] = json::array({choice});
  j["usage"] = usage_json(a.usage);
  return j;
}

json chunk_json(const Request& r, const AnswerId& id, std::string_view text, bool first,
                const std::optional<std::string>& finish_reason, const std::vector<int32_t>& token_ids,
                const std::vector<TokenLogprob>& logprobs, size_t text_offset) {
  json j = head(r, id, true);
  json choice = {{"index", 0}};
  if (r.endpoint == Endpoint::Chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!finish_reason || !text.empty()) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  // With logprobs, each chunk carries its tokens' (the finish chunk, which carries none, null).
  if (r.logprobs && (!finish_reason || !logprobs.empty()))
    choice["logprobs"] = r.endpoint == Endpoint::Chat ? chat_logprobs(r, logprobs)
                                                      : completion_logprobs(r, logprobs, text_offset);
  else
    choice["logprobs"] = nullptr;
  choice["finish_reason"] = finish_reason ? json(*finish_reason) : json(nullptr);
  if (r.return_token_ids) choice["token_ids"] = token_ids;
  j["choices"] = json::array({choice});
  if (r.include_usage) j["usage"] = nullptr;
  return j;
}

json usage_chunk_json(const Request& r, const AnswerId& id, const Usage& u) {
  json j = head(r, id, true);
  j["choices"] = json::array();
  j["usage"] = usage_json(u);
  return j;
}

std::string json_text(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string sse_event(const json& j) { return "data: " + json_text(j) + "\n\n"; }

}  // namespace eaglevk::cli::serve
