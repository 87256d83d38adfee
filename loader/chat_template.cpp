#include "loader/chat_template.h"

#include <nlohmann/json.hpp>

#include <eaglevk/error.h>

#include "loader/jinja/eval.h"
#include "loader/jinja/parser.h"
#include "loader/json_excerpt.h"
#include "loader/pretokenize.h"
#include "loader/text_file.h"

namespace eaglevk::loader {

using nlohmann::json;

namespace {

// Every message is checked: `| trim` walks the content by code point, and the rendered prompt
// goes to the tokenizer, which refuses invalid UTF-8 anyway; failing here names the message.
void check_message(const ChatMessage& m, size_t index) {
  if (m.role.empty()) fail("chat message {} has an empty role", index);
  const auto report = [&](std::string_view what, std::string_view text) {
    if (const size_t bad = first_invalid_utf8(text); bad != std::string_view::npos)
      fail("chat message {} is not valid UTF-8 ({} at byte {} of {})", index, what, bad, text.size());
  };
  report("role", m.role);
  report("content", m.content);
  for (const ChatContentPart& part : m.parts) report("a text part", part.text);
  if (!m.extra.is_null() && !m.extra.is_object()) fail("chat message {}: its extra fields must be a JSON object", index);
}

// A message as the dict transformers hands the template: role, content, then the other keys.
jinja::Value message_value(const ChatMessage& m) {
  jinja::Dict d;
  d.emplace_back("role", jinja::Value::from_string(m.role));
  if (m.extra.is_object() && m.extra.contains("content")) {
    d.emplace_back("content", jinja::Value::from_json(m.extra["content"]));
  } else if (m.content_missing) {
  } else if (m.parts.empty()) {
    d.emplace_back("content", jinja::Value::from_string(m.content));
  } else {
    jinja::List parts;
    for (const ChatContentPart& part : m.parts) {
      if (part.type == ChatContentPart::Type::Image) {
        parts.push_back(jinja::Value::from_dict({{"type", jinja::Value::from_string("image")}}));
      } else {
        parts.push_back(jinja::Value::from_dict(
            {{"type", jinja::Value::from_string("text")}, {"text", jinja::Value::from_string(part.text)}}));
      }
    }
    d.emplace_back("content", jinja::Value::from_list(std::move(parts)));
  }
  if (m.extra.is_object())
    for (const auto& [key, value] : m.extra.items()) {
      if (key == "role" || key == "content") continue;
      d.emplace_back(key, jinja::Value::from_json(value));
    }
  return jinja::Value::from_dict(std::move(d));
}

std::tm local_now() {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  return local;
}

}  // namespace

ChatTemplate ChatTemplate::from_string(std::string_view jinja, std::string_view bos_token, std::string_view eos_token) {
  if (const size_t bad = first_invalid_utf8(jinja); bad != std::string_view::npos)
    fail("the chat template is not valid UTF-8 (at byte {} of {})", bad, jinja.size());
  for (std::string_view token : {bos_token, eos_token})
    if (const size_t bad = first_invalid_utf8(token); bad != std::string_view::npos)
      fail("a special token for the chat template is not valid UTF-8 (at byte {} of {})", bad, token.size());
  // Jinja would write an undefined bos_token as nothing and the prompt would silently lack BOS.
  if (bos_token.empty() && jinja.find("bos_token") != std::string_view::npos)
    fail("the chat template writes bos_token, but tokenizer_config.json has none");
  ChatTemplate t;
  t.source = std::string(jinja);
  t.bos_token = std::string(bos_token);
  t.eos_token = std::string(eos_token);
  t.program = std::make_shared<const jinja::Program>(jinja::parse(jinja));
  return t;
}

ChatTemplate chat_template_from_file(const std::filesystem::path& file, std::string_view bos_token,
                                     std::string_view eos_token) {
  const std::string text = read_text_file(file);
  try {
    ChatTemplate t = ChatTemplate::from_string(text, bos_token, eos_token);
    t.origin = file.string();
    return t;
  } catch (const Error& e) {
    fail("{}: {}", file.string(), e.what());
  }
}

namespace {

// tokenizer_config.json's special token: a string, or {"content": ...} (an AddedToken).
std::string special_token(const json& config, const char* key, const std::string& path) {
  auto b = config.find(key);
  if (b == config.end() || b->is_null()) return {};
  if (b->is_string()) return b->get<std::string>();
  if (b->is_object() && b->contains("content") && (*b)["content"].is_string()) return (*b)["content"].get<std::string>();
  fail("{}: {} must be a string or {{\"content\": ...}}", path, key);
}

}  // namespace

ChatTemplate ChatTemplate::load(const std::filesystem::path& dir) {
  const auto config_path = dir / "tokenizer_config.json";
  json config;
  try {
    config = json::parse(read_text_file(config_path));
  } catch (const json::exception& e) {
    fail("{}: invalid JSON: {}", config_path.string(), json_parse_error_text(e));
  }
  if (!config.is_object()) fail("{}: expected a JSON object", config_path.string());

  std::string jinja;
  std::string origin = "tokenizer_config.json";
  auto it = config.find("chat_template");
  if (it != config.end() && it->is_string()) {
    jinja = it->get<std::string>();
  } else if (it != config.end() && it->is_array()) {
    // Several named templates (e.g. "default", "tool_use"): a plain conversation uses "default".
    for (const json& entry : *it)
      if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
          entry["template"].is_string())
        jinja = entry["template"].get<std::string>();
    if (jinja.empty()) fail("{}: chat_template is a list without a \"default\" template", config_path.string());
  } else if (it != config.end() && !it->is_null()) {
    fail("{}: chat_template must be a string or a list of {{name, template}}", config_path.string());
  } else if (std::filesystem::exists(dir / "chat_template.jinja")) {
    jinja = read_text_file(dir / "chat_template.jinja");  // newer transformers save it apart
    origin = "chat_template.jinja";
  } else {
    fail("{} has no chat_template (and there is no chat_template.jinja)", config_path.string());
  }
  const std::string path = config_path.string();
  try {
    ChatTemplate t = from_string(jinja, special_token(config, "bos_token", path), special_token(config, "eos_token", path));
    t.origin = std::move(origin);
    return t;
  } catch (const Error& e) {
    fail("{}: {}", path, e.what());
  }
}

std::string ChatTemplate::render(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
  ChatRenderInput input;
  input.add_generation_prompt = add_generation_prompt;
  return render(messages, input);
}

std::string ChatTemplate::render(std::span<const ChatMessage> messages, const ChatRenderInput& input) const {
  if (!program) fail("the chat template was never parsed");
  jinja::List list;
  for (size_t i = 0; i < messages.size(); ++i) {
    check_message(messages[i], i);
    list.push_back(message_value(messages[i]));
  }
  if (!input.tools.is_null() && !input.tools.is_array()) fail("chat template tools must be a JSON list");
  if (!input.variables.is_null() && !input.variables.is_object()) fail("chat template variables must be a JSON object");
  // The keyword arguments transformers' apply_chat_template passes to the template.
  std::vector<std::pair<std::string, jinja::Value>> vars = {
      {"messages", jinja::Value::from_list(std::move(list))},
      {"tools", jinja::Value::from_json(input.tools)},
      {"documents", jinja::Value::none()},
      {"add_generation_prompt", jinja::Value::from_bool(input.add_generation_prompt)},
  };
  if (!bos_token.empty()) vars.emplace_back("bos_token", jinja::Value::from_string(bos_token));
  if (!eos_token.empty()) vars.emplace_back("eos_token", jinja::Value::from_string(eos_token));
  if (input.variables.is_object())
    for (const auto& [key, value] : input.variables.items()) vars.emplace_back(key, jinja::Value::from_json(value));
  const std::tm now = input.now ? *input.now : local_now();
  jinja::Limits limits;
  if (input.max_steps) limits.max_steps = input.max_steps;
  if (input.max_work) limits.max_work = input.max_work;
  if (input.max_memory_bytes) limits.max_memory_bytes = input.max_memory_bytes;
  return jinja::render(*program, vars, now, limits, origin);
}

}  // namespace eaglevk::loader
