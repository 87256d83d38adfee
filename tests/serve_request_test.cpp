// `eaglevk serve`'s request parser, answer shapes, metrics page and queue, without a model:
// every malformed body is a 400 naming the field, every accepted one fills the request as its
// JSON says (checked field by field against the JSON itself), and the shapes carry what
// OpenAI's clients read.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "apps/cli/serve_metrics.h"
#include "apps/cli/serve_queue.h"
#include "apps/cli/serve_request.h"
#include "apps/cli/serve_response.h"

namespace {

using namespace eaglevk::cli::serve;
using json = nlohmann::json;

json chat_body() { return {{"model", "m"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}}; }
json completion_body() { return {{"model", "m"}, {"prompt", "Once upon"}}; }

// The refusal of `body`, or a failed test when it is accepted.
HttpError refusal(const std::string& body, Endpoint endpoint = Endpoint::Chat) {
  try {
    parse_request(body, endpoint);
  } catch (const RequestRefused& e) {
    return e.error;
  }
  ADD_FAILURE() << "accepted: " << body.substr(0, 300);
  return {};
}

// A body with `key` set to `value` (null removes it).
std::string with(json body, const std::string& key, const json& value) {
  if (value.is_null())
    body.erase(key);
  else
    body[key] = value;
  return body.dump();
}

TEST(ServeRequest, ChatFieldsAsGiven) {
  json body = chat_body();
  body["messages"] = {{{"role", "system"}, {"content", "be brief"}},
                      {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "a"}}, {{"type", "text"}, {"text", "b"}}}}},
                      {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", json::array()}}};
  body["max_completion_tokens"] = 7;
  body["temperature"] = 0.5;
  body["top_p"] = 0.9;
  body["top_k"] = 40;
  body["seed"] = 12345678901234ull;
  body["stop"] = {"x", "yz"};
  body["logprobs"] = true;
  body["top_logprobs"] = 3;
  body["n"] = 1;
  body["user"] = "someone";
  const Request r = parse_request(body.dump(), Endpoint::Chat);
  EXPECT_EQ(r.model, body["model"]);
  ASSERT_EQ(r.messages.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(r.messages[i].role, body["messages"][i]["role"]);
  EXPECT_EQ(r.messages[0].content, body["messages"][0]["content"]);
  ASSERT_EQ(r.messages[1].parts.size(), 2u);
  EXPECT_EQ(r.messages[1].parts[1].text, body["messages"][1]["content"][1]["text"]);
  EXPECT_TRUE(r.messages[2].content_missing);
  EXPECT_TRUE(r.messages[2].extra.contains("tool_calls"));
  EXPECT_EQ(r.max_tokens, body["max_completion_tokens"].get<uint32_t>());
  EXPECT_FLOAT_EQ(r.temperature, body["temperature"].get<float>());
  EXPECT_FLOAT_EQ(r.top_p, body["top_p"].get<float>());
  EXPECT_EQ(r.top_k, body["top_k"].get<int32_t>());
  EXPECT_EQ(r.seed, body["seed"].get<uint64_t>());
  EXPECT_EQ(r.stop, body["stop"].get<std::vector<std::string>>());
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, body["top_logprobs"].get<uint32_t>());
  EXPECT_FALSE(r.stream);
}

TEST(ServeRequest, Defaults) {
  const Request r = parse_request(chat_body().dump(), Endpoint::Chat);
  EXPECT_FALSE(r.max_tokens);
  EXPECT_EQ(r.temperature, 1.0f);  // OpenAI's default
  EXPECT_EQ(r.top_p, 1.0f);
  EXPECT_EQ(r.top_k, 0);
  EXPECT_FALSE(r.seed);
  EXPECT_TRUE(r.stop.empty());
  EXPECT_FALSE(r.logprobs || r.stream || r.include_usage || r.ignore_eos || r.return_token_ids);
}

TEST(ServeRequest, CompletionPromptForms) {
  EXPECT_EQ(parse_request(completion_body().dump(), Endpoint::Completion).prompt, completion_body()["prompt"]);
  const std::vector<int32_t> ids = {1, 17, 300};
  EXPECT_EQ(parse_request(with(completion_body(), "prompt", ids), Endpoint::Completion).prompt_ids, ids);
  EXPECT_EQ(parse_request(with(completion_body(), "prompt", json::array({ids})), Endpoint::Completion).prompt_ids, ids);
  EXPECT_EQ(parse_request(with(completion_body(), "prompt", {"one"}), Endpoint::Completion).prompt, "one");
  // The completions API's logprobs is a count.
  const Request r = parse_request(with(completion_body(), "logprobs", 4), Endpoint::Completion);
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 4u);
  // A single stop string, streaming with usage.
  json body = completion_body();
  body["stop"] = "\n";
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  const Request s = parse_request(body.dump(), Endpoint::Completion);
  EXPECT_EQ(s.stop, std::vector<std::string>{"\n"});
  EXPECT_TRUE(s.stream && s.include_usage);
}

TEST(ServeRequest, ImageParts) {
  const std::string bytes = "\x89PNG\r\n\x1a\n raw bytes";
  // base64 of `bytes`, written here by hand from the alphabet (not by the decoder under test).
  const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string b64;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t v = uint32_t(uint8_t(bytes[i])) << 16;
    if (i + 1 < bytes.size()) v |= uint32_t(uint8_t(bytes[i + 1])) << 8;
    if (i + 2 < bytes.size()) v |= uint8_t(bytes[i + 2]);
    b64 += alphabet[v >> 18];
    b64 += alphabet[(v >> 12) & 63];
    b64 += i + 1 < bytes.size() ? alphabet[(v >> 6) & 63] : '=';
    b64 += i + 2 < bytes.size() ? alphabet[v & 63] : '=';
  }
  json body = chat_body();
  body["messages"][0]["content"] = {{{"type", "image_url"}, {"image_url", {{"url", "data:image/png;base64," + b64}}}},
                                    {{"type", "image_url"}, {"image_url", "file:///tmp/cat.png"}},
                                    {{"type", "text"}, {"text", "what?"}}};
  const Request r = parse_request(body.dump(), Endpoint::Chat);
  ASSERT_EQ(r.images.size(), 2u);
  EXPECT_EQ(r.images[0].bytes, bytes);
  EXPECT_EQ(r.images[1].path, "/tmp/cat.png");
  ASSERT_EQ(r.messages[0].parts.size(), 3u);
  EXPECT_EQ(r.messages[0].parts[0].type, eaglevk::loader::ChatContentPart::Type::Image);
  EXPECT_EQ(r.messages[0].parts[2].type, eaglevk::loader::ChatContentPart::Type::Text);
}

TEST(ServeRequest, Base64AgainstAnEncoder) {
  // Random byte strings of every length mod 3, encoded here with the alphabet, decode to themselves.
  const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::mt19937 rng(7);
  for (size_t n = 0; n < 40; ++n) {
    std::string bytes(n, '\0');
    for (char& c : bytes) c = char(rng());
    std::string b64;
    for (size_t i = 0; i < n; i += 3) {
      uint32_t v = uint32_t(uint8_t(bytes[i])) << 16;
      if (i + 1 < n) v |= uint32_t(uint8_t(bytes[i + 1])) << 8;
      if (i + 2 < n) v |= uint8_t(bytes[i + 2]);
      b64 += alphabet[v >> 18];
      b64 += alphabet[(v >> 12) & 63];
      b64 += i + 1 < n ? alphabet[(v >> 6) & 63] : '=';
      b64 += i + 2 < n ? alphabet[v & 63] : '=';
    }
    EXPECT_EQ(decode_base64(b64), bytes) << b64;
  }
  for (const char* bad : {"A", "AB=C", "AB?=", "ABC==", "A===", "AB CD"}) EXPECT_FALSE(decode_base64(bad)) << bad;
}

struct BadCase {
  std::string body;
  std::string param;  // the field the error must name
  std::string words;  // and words its message must hold
  Endpoint endpoint = Endpoint::Chat;
};

TEST(ServeRequest, EveryMalformedBodyIsA400NamingTheField) {
  const json chat = chat_body(), completion = completion_body();
  json image = chat;
  image["messages"][0]["content"] = {{{"type", "image_url"}, {"image_url", {{"url", "data:image/png;base64,@@"}}}}};
  json remote = chat;
  remote["messages"][0]["content"] = {{{"type", "image_url"}, {"image_url", {{"url", "https://example.invalid/a.png"}}}}};
  json audio_part = chat;
  audio_part["messages"][0]["content"] = {{{"type", "input_audio"}}};
  json no_role = chat;
  no_role["messages"][0].erase("role");
  json number_content = chat;
  number_content["messages"][0]["content"] = 5;
  json user_null = chat;
  user_null["messages"][0]["content"] = nullptr;
  const std::vector<BadCase> cases = {
      {"", "", "not valid JSON"},
      {"{\"model\": \"m\",", "", "not valid JSON"},
      {"[1, 2]", "", "must be a JSON object"},
      {"{\"model\": \"m\", \"prompt\": [1e400]}", "", "out of range", Endpoint::Completion},  // found by the fuzzer
      {std::string(100, '[') + std::string(100, ']'), "", "levels deep"},
      {"{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}", "model", "required"},
      {with(chat, "model", 5), "model", "must be a string"},
      {with(chat, "messages", nullptr), "messages", "required"},
      {with(chat, "messages", json::array()), "messages", "empty"},
      {with(chat, "messages", "hi"), "messages", "must be an array"},
      {no_role.dump(), "messages[0].role", "no 'role'"},
      {number_content.dump(), "messages[0].content", "a string or an array"},
      {user_null.dump(), "messages[0].content", "no 'content'"},
      {image.dump(), "messages[0].content[0].image_url.url", "not valid base64"},
      {remote.dump(), "messages[0].content[0].image_url.url", "fetches no URLs"},
      {audio_part.dump(), "messages[0].content[0].type", "input_audio"},
      {with(chat, "max_tokens", 0), "max_tokens", "0"},
      {with(chat, "max_tokens", -3), "max_tokens", "-3"},
      {with(chat, "max_tokens", 2.5), "max_tokens", "an integer"},
      {with(chat, "max_tokens", "10"), "max_tokens", "an integer"},
      {with(chat, "temperature", 3), "temperature", "0..2"},
      {with(chat, "temperature", -0.1), "temperature", "0..2"},
      {with(chat, "top_p", 0), "top_p", "above 0"},
      {with(chat, "top_p", 1.5), "top_p", "0..1"},
      {with(chat, "top_k", -2), "top_k", "-2"},
      {with(chat, "seed", -5), "seed", "-5"},
      {with(chat, "seed", "7"), "seed", "an integer"},
      {with(chat, "stop", 5), "stop", "a string or an array"},
      {with(chat, "stop", {"a", ""}), "stop", "empty string"},
      {with(chat, "stop", {"a", "b", "c", "d", "e"}), "stop", "at most 4"},
      {with(chat, "stop", {"a", 1}), "stop[1]", "a string"},
      {with(chat, "stream", "yes"), "stream", "a boolean"},
      {with(chat, "stream_options", {{"include_usage", true}}), "stream_options", "'stream': true"},
      {with(chat, "n", 2), "n", "must be 1"},
      {with(chat, "logprobs", 1), "logprobs", "a boolean"},
      {with(chat, "top_logprobs", 2), "top_logprobs", "needs 'logprobs'"},
      {with(json::parse(with(chat, "logprobs", true)), "top_logprobs", 21), "top_logprobs", "0..20"},
      {with(chat, "frequency_penalty", 0.5), "frequency_penalty", "not supported"},
      {with(chat, "presence_penalty", 1), "presence_penalty", "not supported"},
      {with(chat, "logit_bias", {{"5", 10}}), "logit_bias", "not supported"},
      {with(chat, "tools", {{{"type", "function"}}}), "tools", "no tool calling"},
      {with(chat, "response_format", {{"type", "json_object"}}), "response_format", "text"},
      {with(chat, "max_tokens", 5).insert(1, "\"max_completion_tokens\": 6, "), "max_completion_tokens", "differ"},
      {with(chat, "max_token", 5), "max_token", "unrecognized request argument"},
      {with(chat, "prompt", "x"), "prompt", "unrecognized request argument"},
      {with(completion, "prompt", nullptr), "prompt", "required", Endpoint::Completion},
      {with(completion, "prompt", ""), "prompt", "empty", Endpoint::Completion},
      {with(completion, "prompt", {"a", "b"}), "prompt", "several prompts", Endpoint::Completion},
      {with(completion, "prompt", {1, -2}), "prompt[1]", "-2", Endpoint::Completion},
      {with(completion, "prompt", {1, 2.5}), "prompt[1]", "an integer", Endpoint::Completion},
      {with(completion, "logprobs", 30), "logprobs", "0..20", Endpoint::Completion},
      {with(completion, "logprobs", true), "logprobs", "an integer", Endpoint::Completion},
      {with(completion, "echo", true), "echo", "not supported", Endpoint::Completion},
      {with(completion, "best_of", 3), "best_of", "must be 1", Endpoint::Completion},
      {with(completion, "messages", json::array()), "messages", "unrecognized", Endpoint::Completion},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.body.substr(0, 200));
    const HttpError e = refusal(c.body, c.endpoint);
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.type, "invalid_request_error");
    EXPECT_EQ(e.param, c.param);
    EXPECT_NE(e.message.find(c.words), std::string::npos) << e.message;
  }
}

TEST(ServeRequest, RandomBytesNeverEscapeAsAnotherError) {
  // Mutations of a valid body: each either parses or is refused with a 400, nothing else.
  const std::string valid = with(json::parse(with(chat_body(), "stop", {"a"})), "max_tokens", 3);
  std::mt19937 rng(11);
  for (int i = 0; i < 3000; ++i) {
    std::string body = valid;
    for (int k = 0; k < 1 + int(rng() % 4); ++k) body[rng() % body.size()] = char(rng());
    try {
      parse_request(body, i % 2 ? Endpoint::Chat : Endpoint::Completion);
    } catch (const RequestRefused& e) {
      EXPECT_EQ(e.error.status, 400);
    }
  }
}

TEST(ServeResponse, ChatAnswerShape) {
  Request r = parse_request(with(json::parse(with(chat_body(), "logprobs", true)), "top_logprobs", 1), Endpoint::Chat);
  r.return_token_ids = true;
  Answer a;
  a.text = "Hello";
  a.finish_reason = "stop";
  a.token_ids = {5, 6};
  a.logprobs = {{"Hel", -0.5f, {{"Hel", -0.5f}, {"He", -1.5f}}}, {"lo", -0.25f, {{"lo", -0.25f}}}};
  a.usage = {11, 2, true, 1, 3, 1, 2.0};
  const json j = answer_json(r, {"chatcmpl-1", 1700000000, "tiny"}, a);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["id"], "chatcmpl-1");
  EXPECT_EQ(j["model"], "tiny");
  ASSERT_EQ(j["choices"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["message"]["content"], a.text);
  EXPECT_EQ(j["choices"][0]["finish_reason"], a.finish_reason);
  EXPECT_EQ(j["choices"][0]["token_ids"].get<std::vector<int32_t>>(), a.token_ids);
  const json& content = j["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 2u);
  EXPECT_EQ(content[0]["token"], "Hel");
  EXPECT_FLOAT_EQ(content[0]["logprob"].get<float>(), -0.5f);
  EXPECT_EQ(content[0]["bytes"].get<std::vector<int>>(), (std::vector<int>{'H', 'e', 'l'}));
  EXPECT_EQ(content[0]["top_logprobs"].size(), 1u);  // top_logprobs 1 of the 2 given
  EXPECT_EQ(j["usage"]["prompt_tokens"], 11);
  EXPECT_EQ(j["usage"]["completion_tokens"], 2);
  EXPECT_EQ(j["usage"]["total_tokens"], 13);
  EXPECT_EQ(j["usage"]["eaglevk"]["accepted_tokens"], 1);
  EXPECT_EQ(j["usage"]["eaglevk"]["acceptance_length"], 2.0);
}

TEST(ServeResponse, CompletionAnswerAndChunks) {
  const Request r = parse_request(with(completion_body(), "logprobs", 2), Endpoint::Completion);
  Answer a;
  a.text = "ab";
  a.finish_reason = "length";
  a.logprobs = {{"a", -1, {{"a", -1}, {"b", -2}}}, {"b", -3, {{"c", -0.5f}, {"b", -3}}}};
  a.usage = {4, 2};
  const json j = answer_json(r, {"cmpl-2", 1, "tiny"}, a);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["choices"][0]["text"], "ab");
  EXPECT_FALSE(j["usage"].contains("eaglevk"));  // no draft
  const json& lp = j["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"].get<std::vector<std::string>>(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(lp["text_offset"].get<std::vector<int>>(), (std::vector<int>{0, 1}));
  EXPECT_FLOAT_EQ(lp["top_logprobs"][1]["c"].get<float>(), -0.5f);

  // Streamed with logprobs, one token a chunk: the chunks' lists, joined, are the whole answer's.
  const Request rs = parse_request(with(json::parse(with(completion_body(), "logprobs", 2)), "stream", true),
                                   Endpoint::Completion);
  ASSERT_TRUE(rs.stream && rs.logprobs);
  const json c0 = chunk_json(rs, {"cmpl-2", 1, "tiny"}, "a", true, std::nullopt, {}, {a.logprobs[0]}, 0);
  const json c1 = chunk_json(rs, {"cmpl-2", 1, "tiny"}, "b", false, std::nullopt, {}, {a.logprobs[1]},
                             a.logprobs[0].token.size());
  json joined = c0["choices"][0]["logprobs"];
  for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
    for (const json& v : c1["choices"][0]["logprobs"][key]) joined[key].push_back(v);
  EXPECT_EQ(joined, lp);
  EXPECT_TRUE(chunk_json(rs, {"cmpl-2", 1, "tiny"}, "", false, "length")["choices"][0]["logprobs"].is_null());
  // The chat API's the same way: the chunks' content lists joined are the answer's.
  json chat_lp = chat_body();
  chat_lp["logprobs"] = true;
  chat_lp["top_logprobs"] = 2;
  const json whole =
      answer_json(parse_request(chat_lp.dump(), Endpoint::Chat), {"c", 1, "tiny"}, a)["choices"][0]["logprobs"];
  chat_lp["stream"] = true;
  const Request cs = parse_request(chat_lp.dump(), Endpoint::Chat);
  json content = json::array();
  for (const TokenLogprob& t : a.logprobs) {
    const json chunk = chunk_json(cs, {"c", 1, "tiny"}, t.token, false, std::nullopt, {}, {t});
    for (const json& v : chunk["choices"][0]["logprobs"]["content"]) content.push_back(v);
  }
  EXPECT_EQ(content, whole["content"]);

  json body = chat_body();
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  const Request s = parse_request(body.dump(), Endpoint::Chat);
  const AnswerId id{"chatcmpl-3", 1, "tiny"};
  const json first = chunk_json(s, id, "He", true, std::nullopt);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(first["choices"][0]["delta"]["content"], "He");
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  EXPECT_TRUE(first.contains("usage") && first["usage"].is_null());
  EXPECT_TRUE(first["choices"][0]["logprobs"].is_null());  // not asked for
  const json last = chunk_json(s, id, "", false, "stop");
  EXPECT_FALSE(last["choices"][0]["delta"].contains("role"));
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  const json usage = usage_chunk_json(s, id, {3, 4});
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["total_tokens"], 7);
  EXPECT_EQ(sse_event(json{{"a", 1}}), "data: {\"a\":1}\n\n");
  // A lone byte of a token's text is sent as U+FFFD, not as an exception.
  EXPECT_EQ(json_text(json("\xe2\x82")), "\"\xef\xbf\xbd\"");
}

TEST(ServeResponse, ErrorShape) {
  const json e = error_json({404, "no such model", "invalid_request_error", "model", "model_not_found"});
  EXPECT_EQ(e["error"]["message"], "no such model");
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  EXPECT_EQ(e["error"]["param"], "model");
  EXPECT_EQ(e["error"]["code"], "model_not_found");
  const json bare = error_json({400, "bad", "invalid_request_error", "", ""});
  EXPECT_TRUE(bare["error"]["param"].is_null() && bare["error"]["code"].is_null());
}

// The value of a metric line in a Prometheus page (the whole name with its labels).
double metric(const std::string& page, const std::string& name) {
  const size_t at = page.find("\n" + name + " ");
  if (at == std::string::npos) {
    ADD_FAILURE() << name << " missing from\n" << page;
    return -1;
  }
  return std::stod(page.substr(at + name.size() + 2));
}

TEST(ServeMetrics, CountersAddUp) {
  Metrics m;
  eaglevk::engine::SpecStats a, b;
  a.record_round(3, 2);
  a.record_round(3, 0);
  b.record_round(3, 3);
  m.count_generation(10, 5, a, false);
  m.count_generation(7, 4, b, true);
  m.add_busy_seconds(3);
  m.count_request("/v1/completions", 200);
  m.count_request("/v1/completions", 200);
  m.count_request("/v1/chat/completions", 429);
  m.count_request("/random/path/1", 404);
  m.count_request("/random/path/2", 404);
  const std::string page = "\n" + m.text({2, 3, 4, 64});
  EXPECT_EQ(metric(page, "eaglevk_requests_total{endpoint=\"/v1/completions\",status=\"200\"}"), 2);
  EXPECT_EQ(metric(page, "eaglevk_requests_total{endpoint=\"/v1/chat/completions\",status=\"429\"}"), 1);
  EXPECT_EQ(metric(page, "eaglevk_requests_total{endpoint=\"other\",status=\"404\"}"), 2);
  EXPECT_EQ(page.find("/random"), std::string::npos);
  EXPECT_EQ(metric(page, "eaglevk_queue_length"), 2);
  EXPECT_EQ(metric(page, "eaglevk_sequences_running"), 3);
  EXPECT_EQ(metric(page, "eaglevk_sequences_capacity"), 4);
  EXPECT_EQ(metric(page, "eaglevk_queue_capacity"), 64);
  EXPECT_EQ(metric(page, "eaglevk_prompt_tokens_total"), 17);
  EXPECT_EQ(metric(page, "eaglevk_generated_tokens_total"), 9);
  EXPECT_EQ(metric(page, "eaglevk_sequences_total"), 2);
  EXPECT_EQ(metric(page, "eaglevk_sequences_cancelled_total"), 1);
  EXPECT_DOUBLE_EQ(metric(page, "eaglevk_generated_tokens_per_second"), 3);
  EXPECT_EQ(metric(page, "eaglevk_drafts_total"), 3);
  EXPECT_EQ(metric(page, "eaglevk_draft_tokens_total"), 9);
  EXPECT_EQ(metric(page, "eaglevk_accepted_tokens_total"), 5);
  EXPECT_NEAR(metric(page, "eaglevk_acceptance_length"), 1 + 5.0 / 3, 1e-6);
  // Position 0 was accepted in 2 of 3 drafts, position 2 in 1 of 3.
  EXPECT_NEAR(metric(page, "eaglevk_acceptance_rate_by_position{position=\"0\"}"), 2.0 / 3, 1e-6);
  EXPECT_NEAR(metric(page, "eaglevk_acceptance_rate_by_position{position=\"2\"}"), 1.0 / 3, 1e-6);
}

TEST(ServeQueue, BoundedFirstInFirstOut) {
  BoundedQueue<int> q(2);
  auto a = std::make_shared<int>(1), b = std::make_shared<int>(2), c = std::make_shared<int>(3);
  EXPECT_TRUE(q.push(a));
  EXPECT_TRUE(q.push(b));
  EXPECT_FALSE(q.push(c));  // full: the caller answers 429
  EXPECT_EQ(q.size(), 2u);
  EXPECT_EQ(q.front(), a);
  q.pop(b);  // not the front: nothing happens
  EXPECT_EQ(q.front(), a);
  q.pop(a);
  EXPECT_EQ(q.front(), b);
  EXPECT_TRUE(q.push(c));
  // A waiting consumer wakes when an item arrives.
  BoundedQueue<int> empty(1);
  std::thread producer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    empty.push(a);
  });
  empty.wait(std::chrono::seconds(20));
  EXPECT_EQ(empty.front(), a);
  producer.join();
  const auto left = q.close();
  EXPECT_EQ(left.size(), 2u);
  EXPECT_FALSE(q.push(a));  // closed
}

}  // namespace
