#include "apps/cli/serve_request.h"

#include <cmath>
#include <limits>
#include <set>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

namespace eaglevk::cli::serve {
namespace {

using json = nlohmann::json;

// Real requests nest 5 levels (messages, a message, content, a part, image_url); the parser
// refuses deeper bodies while it reads them, before a hostile nesting is built.
constexpr int kMaxDepth = 16;
struct TooDeep {};

// Fields each endpoint takes (or checks and ignores); anything else is refused by name.
const std::set<std::string, std::less<>> kCommonFields = {
    "model", "max_tokens", "temperature", "top_p", "top_k", "seed", "stop", "stream", "stream_options", "logprobs",
    "n", "user", "frequency_penalty", "presence_penalty", "logit_bias", "metadata", "store", "service_tier",
    "ignore_eos", "return_token_ids"};
const std::set<std::string, std::less<>> kChatFields = {
    "messages", "max_completion_tokens", "top_logprobs", "tools", "tool_choice", "parallel_tool_calls",
    "response_format", "functions", "function_call", "reasoning_effort", "modalities", "prediction", "audio"};
const std::set<std::string, std::less<>> kCompletionFields = {"prompt", "echo", "best_of", "suffix"};

std::string type_name(const json& v) {
  if (v.is_number_integer()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_boolean()) return "a boolean";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "null";
}

[[noreturn]] void wrong_type(const std::string& param, const json& v, std::string_view wanted) {
  refuse(400, param, fmt::format("'{}' must be {}, not {}", param, wanted, type_name(v)));
}

bool given(const json& body, const char* key) { return body.contains(key) && !body[key].is_null(); }

bool get_bool(const json& v, const std::string& param) {
  if (!v.is_boolean()) wrong_type(param, v, "a boolean");
  return v.get<bool>();
}

double get_number(const json& v, const std::string& param, double min, double max) {
  if (!v.is_number()) wrong_type(param, v, "a number");
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < min || x > max)
    refuse(400, param, fmt::format("'{}' is {}; it must be within {}..{}", param, x, min, max));
  return x;
}

// An integer (an integral float such as 8.0 too) in [min, max].
int64_t get_integer(const json& v, const std::string& param, int64_t min, int64_t max) {
  int64_t x = 0;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > uint64_t(max))
      refuse(400, param, fmt::format("'{}' is {}; it must be within {}..{}", param, u, min, max));
    x = int64_t(u);
  } else if (v.is_number_integer()) {
    x = v.get<int64_t>();
  } else if (v.is_number_float() && std::isfinite(v.get<double>()) && v.get<double>() == std::floor(v.get<double>()) &&
             std::fabs(v.get<double>()) < 9e18) {
    x = int64_t(v.get<double>());
  } else {
    wrong_type(param, v, "an integer");
  }
  if (x < min || x > max) refuse(400, param, fmt::format("'{}' is {}; it must be within {}..{}", param, x, min, max));
  return x;
}

std::string get_string(const json& v, const std::string& param) {
  if (!v.is_string()) wrong_type(param, v, "a string");
  return v.get<std::string>();
}

// A data URL (data:image/...;base64,...) becomes bytes; file:// URLs and plain paths stay paths;
// http(s) URLs are refused (the server fetches nothing).
ImageInput parse_image_url(const std::string& url, const std::string& param) {
  ImageInput image;
  if (url.starts_with("data:")) {
    const size_t comma = url.find(',');
    if (comma == std::string::npos) refuse(400, param, fmt::format("'{}' is a data URL without a comma", param));
    const std::string_view header = std::string_view(url).substr(5, comma - 5);
    if (!header.ends_with(";base64"))
      refuse(400, param, fmt::format("'{}' is a data URL that is not base64 (data:image/png;base64,...)", param));
    std::optional<std::string> bytes = decode_base64(std::string_view(url).substr(comma + 1));
    if (!bytes) refuse(400, param, fmt::format("'{}' holds data that is not valid base64", param));
    if (bytes->empty()) refuse(400, param, fmt::format("'{}' holds no data", param));
    image.bytes = std::move(*bytes);
  } else if (url.starts_with("http://") || url.starts_with("https://")) {
    refuse(400, param, fmt::format("'{}': the server fetches no URLs; send the image as a data URL", param));
  } else {
    image.path = url.starts_with("file://") ? url.substr(7) : url;
    if (image.path.empty()) refuse(400, param, fmt::format("'{}' is an empty path", param));
    if (image.path.find('\0') != std::string::npos) refuse(400, param, fmt::format("'{}' holds a NUL byte", param));
  }
  return image;
}

loader::ChatContentPart parse_part(const json& part, const std::string& param, Request& r, const RequestLimits& limits) {
  if (!part.is_object()) wrong_type(param, part, "an object");
  if (!part.contains("type")) refuse(400, param + ".type", fmt::format("'{}' has no 'type'", param));
  const std::string type = get_string(part["type"], param + ".type");
  if (type == "text") {
    if (!part.contains("text")) refuse(400, param + ".text", fmt::format("'{}' has no 'text'", param));
    return {loader::ChatContentPart::Type::Text, get_string(part["text"], param + ".text"), {}};
  }
  if (type == "image_url") {
    if (!part.contains("image_url")) refuse(400, param + ".image_url", fmt::format("'{}' has no 'image_url'", param));
    const json& image = part["image_url"];
    std::string url;
    if (image.is_string()) {
      url = image.get<std::string>();
    } else if (image.is_object()) {
      if (!image.contains("url")) refuse(400, param + ".image_url.url", fmt::format("'{}.image_url' has no 'url'", param));
      url = get_string(image["url"], param + ".image_url.url");
    } else {
      wrong_type(param + ".image_url", image, "an object {\"url\": ...}");
    }
    if (r.images.size() >= limits.max_images)
      refuse(400, param, fmt::format("a request holds at most {} images", limits.max_images));
    r.images.push_back(parse_image_url(url, param + ".image_url.url"));
    return {loader::ChatContentPart::Type::Image, "", {}};
  }
  refuse(400, param + ".type",
         fmt::format("'{}.type' is \"{}\"; eaglevk takes \"text\" and \"image_url\" parts", param, type.substr(0, 40)));
}

void parse_messages(const json& body, Request& r, const RequestLimits& limits) {
  if (!given(body, "messages")) refuse(400, "messages", "'messages' is required");
  const json& messages = body["messages"];
  if (!messages.is_array()) wrong_type("messages", messages, "an array");
  if (messages.empty()) refuse(400, "messages", "'messages' is empty: give at least one message");
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    const std::string param = fmt::format("messages[{}]", i);
    if (!m.is_object()) wrong_type(param, m, "an object");
    if (!m.contains("role")) refuse(400, param + ".role", fmt::format("'{}' has no 'role'", param));
    loader::ChatMessage message;
    message.role = get_string(m["role"], param + ".role");
    if (message.role.empty()) refuse(400, param + ".role", fmt::format("'{}.role' is empty", param));
    const json* content = m.contains("content") ? &m["content"] : nullptr;
    if (!content || content->is_null()) {
      // Only an assistant message that calls tools may go without content.
      if (message.role != "assistant") refuse(400, param + ".content", fmt::format("'{}' has no 'content'", param));
      message.content_missing = true;
    } else if (content->is_string()) {
      message.content = content->get<std::string>();
    } else if (content->is_array()) {
      for (size_t k = 0; k < content->size(); ++k)
        message.parts.push_back(parse_part((*content)[k], fmt::format("{}.content[{}]", param, k), r, limits));
    } else {
      wrong_type(param + ".content", *content, "a string or an array of parts");
    }
    // name, tool_calls, tool_call_id, ...: kept for the template, as the messages file keeps them.
    nlohmann::ordered_json extra = nlohmann::ordered_json::object();
    for (auto it = m.begin(); it != m.end(); ++it)
      if (it.key() != "role" && it.key() != "content") extra[it.key()] = nlohmann::ordered_json::parse(it.value().dump());
    if (!extra.empty()) message.extra = std::move(extra);
    r.messages.push_back(std::move(message));
  }
}

void parse_prompt(const json& body, Request& r) {
  if (!given(body, "prompt")) refuse(400, "prompt", "'prompt' is required");
  const json* p = &body["prompt"];
  // One prompt: a string, a list of token ids, or a list holding one of those.
  if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array())) p = &(*p)[0];
  if (p->is_string()) {
    r.prompt = p->get<std::string>();
    if (r.prompt.empty()) refuse(400, "prompt", "'prompt' is empty");
    return;
  }
  if (!p->is_array()) wrong_type("prompt", *p, "a string or an array of token ids");
  if (p->empty()) refuse(400, "prompt", "'prompt' is empty");
  for (size_t i = 0; i < p->size(); ++i) {
    const json& id = (*p)[i];
    if (id.is_string() || id.is_array())
      refuse(400, "prompt", "'prompt' holds several prompts; eaglevk takes one per request (send one request each)");
    r.prompt_ids.push_back(int32_t(get_integer(id, fmt::format("prompt[{}]", i), 0, INT32_MAX)));
  }
}

void parse_stop(const json& v, Request& r, const RequestLimits& limits) {
  if (v.is_string()) {
    r.stop.push_back(v.get<std::string>());
  } else if (v.is_array()) {
    for (size_t i = 0; i < v.size(); ++i) r.stop.push_back(get_string(v[i], fmt::format("stop[{}]", i)));
  } else {
    wrong_type("stop", v, "a string or an array of strings");
  }
  if (r.stop.size() > limits.max_stop) refuse(400, "stop", fmt::format("'stop' holds at most {} strings", limits.max_stop));
  for (const std::string& s : r.stop)
    if (s.empty()) refuse(400, "stop", "'stop' holds an empty string");
}

// Fields OpenAI defines that would change the answer when not at their default: refused by name.
void refuse_unsupported(const json& body, Endpoint endpoint) {
  auto zero = [&](const char* key) {
    if (given(body, key) && get_number(body[key], key, -2, 2) != 0)
      refuse(400, key, fmt::format("'{}' is not supported by eaglevk (only 0)", key));
  };
  zero("frequency_penalty");
  zero("presence_penalty");
  if (given(body, "n") && get_integer(body["n"], "n", 1, 128) != 1)
    refuse(400, "n", "'n' must be 1: eaglevk generates one choice per request (send several requests)");
  if (given(body, "logit_bias")) {
    if (!body["logit_bias"].is_object()) wrong_type("logit_bias", body["logit_bias"], "an object");
    if (!body["logit_bias"].empty()) refuse(400, "logit_bias", "'logit_bias' is not supported by eaglevk");
  }
  if (endpoint == Endpoint::Chat) {
    for (const char* key : {"tools", "functions"})
      if (given(body, key) && !(body[key].is_array() && body[key].empty()))
        refuse(400, key, fmt::format("'{}' is not supported by eaglevk (no tool calling)", key));
    for (const char* key : {"audio", "prediction"})
      if (given(body, key)) refuse(400, key, fmt::format("'{}' is not supported by eaglevk", key));
    if (given(body, "modalities")) {
      const json& m = body["modalities"];
      if (!m.is_array() || std::any_of(m.begin(), m.end(), [](const json& x) { return x != "text"; }))
        refuse(400, "modalities", "'modalities' may only be [\"text\"]");
    }
    if (given(body, "response_format")) {
      const json& f = body["response_format"];
      if (!f.is_object() || !f.contains("type")) wrong_type("response_format", f, "an object {\"type\": \"text\"}");
      if (f["type"] != "text") refuse(400, "response_format", "'response_format' may only be {\"type\": \"text\"}");
    }
  } else {
    if (given(body, "echo") && get_bool(body["echo"], "echo")) refuse(400, "echo", "'echo' is not supported by eaglevk");
    if (given(body, "best_of") && get_integer(body["best_of"], "best_of", 1, 128) != 1)
      refuse(400, "best_of", "'best_of' must be 1");
    if (given(body, "suffix")) refuse(400, "suffix", "'suffix' is not supported by eaglevk");
  }
}

void parse_logprobs(const json& body, Request& r, const RequestLimits& limits) {
  if (r.endpoint == Endpoint::Chat) {
    if (given(body, "logprobs")) r.logprobs = get_bool(body["logprobs"], "logprobs");
    if (given(body, "top_logprobs")) {
      r.top_logprobs = uint32_t(get_integer(body["top_logprobs"], "top_logprobs", 0, limits.max_logprobs));
      if (!r.logprobs) refuse(400, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
    }
  } else if (given(body, "logprobs")) {
    // The completions API's logprobs is the count of most likely tokens to list.
    r.logprobs = true;
    r.top_logprobs = uint32_t(get_integer(body["logprobs"], "logprobs", 0, limits.max_logprobs));
  }
}

}  // namespace

void refuse(int status, std::string param, std::string message, std::string code) {
  throw RequestRefused{HttpError{status, std::move(message), "invalid_request_error", std::move(param), std::move(code)}};
}

std::optional<std::string> decode_base64(std::string_view text) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+' || c == '-') return 62;  // standard and URL-safe alphabets
    if (c == '/' || c == '_') return 63;
    return -1;
  };
  size_t end = text.size();
  while (end > 0 && text[end - 1] == '=' && text.size() - end < 2) --end;
  // Padding, when present, completes the last group of four.
  if (end != text.size() && text.size() % 4 != 0) return std::nullopt;
  if (end % 4 == 1) return std::nullopt;
  std::string out;
  out.reserve(end / 4 * 3 + 2);
  uint32_t bits = 0;
  int count = 0;
  for (size_t i = 0; i < end; ++i) {
    const int v = value(text[i]);
    if (v < 0) return std::nullopt;
    bits = (bits << 6) | uint32_t(v);
    if (++count == 4) {
      out.push_back(char(bits >> 16));
      out.push_back(char(bits >> 8));
      out.push_back(char(bits));
      bits = 0;
      count = 0;
    }
  }
  if (count == 2) out.push_back(char(bits >> 4));
  if (count == 3) {
    out.push_back(char(bits >> 10));
    out.push_back(char(bits >> 2));
  }
  return out;
}

Request parse_request(std::string_view body_text, Endpoint endpoint, const RequestLimits& limits) {
  json body;
  try {
    body = json::parse(body_text, [](int depth, json::parse_event_t, json&) {
      if (depth > kMaxDepth) throw TooDeep{};
      return true;
    });
  } catch (const TooDeep&) {
    refuse(400, "", fmt::format("the request body nests more than {} levels deep", kMaxDepth));
  } catch (const json::parse_error& e) {
    refuse(400, "", fmt::format("the request body is not valid JSON (at byte {})", e.byte));
  } catch (const json::exception&) {
    // nlohmann reports a number beyond double's range (1e400) as out_of_range, not a parse error.
    refuse(400, "", "the request body is not valid JSON: it holds a number out of range");
  }
  if (!body.is_object()) refuse(400, "", fmt::format("the request body must be a JSON object, not {}", type_name(body)));
  const auto& own = endpoint == Endpoint::Chat ? kChatFields : kCompletionFields;
  for (auto it = body.begin(); it != body.end(); ++it)
    if (!kCommonFields.contains(it.key()) && !own.contains(it.key()))
      refuse(400, it.key().substr(0, 60), fmt::format("unrecognized request argument: '{}'", it.key().substr(0, 60)));

  Request r;
  r.endpoint = endpoint;
  if (!given(body, "model")) refuse(400, "model", "'model' is required");
  r.model = get_string(body["model"], "model");
  refuse_unsupported(body, endpoint);
  if (endpoint == Endpoint::Chat)
    parse_messages(body, r, limits);
  else
    parse_prompt(body, r);

  // max_completion_tokens is the chat API's newer name; both together must agree.
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    if (!given(body, key)) continue;
    const uint32_t n = uint32_t(get_integer(body[key], key, 1, INT32_MAX));
    if (r.max_tokens && *r.max_tokens != n)
      refuse(400, key, "'max_tokens' and 'max_completion_tokens' differ: give one");
    r.max_tokens = n;
  }
  if (given(body, "temperature")) r.temperature = float(get_number(body["temperature"], "temperature", 0, 2));
  if (given(body, "top_p")) {
    r.top_p = float(get_number(body["top_p"], "top_p", 0, 1));
    if (r.top_p <= 0) refuse(400, "top_p", "'top_p' must be above 0 (1 keeps the whole distribution)");
  }
  if (given(body, "top_k")) {
    r.top_k = int32_t(get_integer(body["top_k"], "top_k", -1, INT32_MAX));
    if (r.top_k < 0) r.top_k = 0;
  }
  if (given(body, "seed")) {
    // -1 (llama.cpp's "random") is taken as no seed.
    const json& s = body["seed"];
    if (s.is_number_unsigned())
      r.seed = s.get<uint64_t>();
    else if (const int64_t v = get_integer(s, "seed", -1, INT64_MAX); v >= 0)
      r.seed = uint64_t(v);
  }
  if (given(body, "stop")) parse_stop(body["stop"], r, limits);
  if (given(body, "stream")) r.stream = get_bool(body["stream"], "stream");
  if (given(body, "stream_options")) {
    const json& o = body["stream_options"];
    if (!o.is_object()) wrong_type("stream_options", o, "an object");
    if (!r.stream) refuse(400, "stream_options", "'stream_options' goes with 'stream': true");
    for (auto it = o.begin(); it != o.end(); ++it) {
      if (it.key() != "include_usage")
        refuse(400, "stream_options", fmt::format("unrecognized stream option: '{}'", it.key().substr(0, 60)));
      if (!it.value().is_null()) r.include_usage = get_bool(it.value(), "stream_options.include_usage");
    }
  }
  parse_logprobs(body, r, limits);
  if (given(body, "ignore_eos")) r.ignore_eos = get_bool(body["ignore_eos"], "ignore_eos");
  if (given(body, "return_token_ids")) r.return_token_ids = get_bool(body["return_token_ids"], "return_token_ids");
  for (const char* key : {"user", "service_tier"})
    if (given(body, key)) get_string(body[key], key);
  for (const char* key : {"store", "parallel_tool_calls"})
    if (given(body, key)) get_bool(body[key], key);
  return r;
}

}  // namespace eaglevk::cli::serve
