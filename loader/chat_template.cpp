#include "loader/chat_template.h"

#include <ctime>
#include <fstream>
#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>

#include <eaglevk/error.h>

#include "loader/pretokenize.h"
#include "loader/text_file.h"

namespace eaglevk::loader {

using nlohmann::json;

std::string_view chat_format_name(ChatFormat format) {
  switch (format) {
    case ChatFormat::Llama3: return "Llama-3";
    case ChatFormat::Llama4: return "Llama-4";
  }
  return "?";
}

namespace {

bool contains(std::string_view text, std::string_view needle) { return text.find(needle) != std::string_view::npos; }

// The first line of a template, for error messages: enough to tell which one it was.
std::string excerpt(std::string_view text) {
  std::string out(text.substr(0, 120));
  for (char& c : out)
    if (c == '\n' || c == '\r') c = ' ';
  return text.size() > 120 ? out + "..." : out;
}

// The text of a Jinja string literal that follows `key` in the template, e.g. the "December 2023"
// of "Cutting Knowledge Date: December 2023\n". Stops at the literal's escape or quote.
std::string literal_after(std::string_view text, std::string_view key) {
  const size_t at = text.find(key);
  if (at == std::string_view::npos) return {};
  size_t end = at + key.size();
  while (end < text.size() && text[end] != '\\' && text[end] != '"' && text[end] != '\'' && text[end] != '\n') ++end;
  return std::string(text.substr(at + key.size(), end - at - key.size()));
}

std::string today_date_string() {
  // strftime_now("%d %b %Y") in transformers: the local date, English month abbreviation.
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  static constexpr const char* kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                            "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  return fmt::format("{:02d} {} {}", local.tm_mday, kMonths[local.tm_mon], local.tm_year + 1900);
}

// Every template checks this: `| trim` walks the content by code point, and the rendered prompt
// goes to the tokenizer, which refuses invalid UTF-8 anyway; failing here names the message.
void check_utf8(const ChatMessage& m, size_t index) {
  const auto report = [&](std::string_view what, std::string_view text) {
    if (const size_t bad = first_invalid_utf8(text); bad != std::string_view::npos)
      fail("chat message {} is not valid UTF-8 ({} at byte {} of {})", index, what, bad, text.size());
  };
  report("role", m.role);
  report("content", m.content);
  for (const ChatContentPart& part : m.parts) report("a text part", part.text);
}

void check_message(const ChatMessage& m, size_t index, ChatFormat format) {
  if (m.role.empty()) fail("chat message {} has an empty role", index);
  // Tool results and calls take other paths through the official templates; they are not modelled.
  if (m.role == "tool" || m.role == "ipython")
    fail("chat message {}: role \"{}\" (tool use) is not supported by the {} chat renderer", index, m.role,
         chat_format_name(format));
}

// List content as the templates write it: '<|image|>' per image part, text parts as they are.
std::string render_parts(const ChatMessage& m) {
  std::string out;
  for (const ChatContentPart& part : m.parts)
    out += part.type == ChatContentPart::Type::Image ? std::string("<|image|>") : part.text;
  return out;
}

}  // namespace

ChatTemplate ChatTemplate::from_string(std::string_view jinja, std::string_view bos_token) {
  // Rendering copies pieces of the template (the knowledge cutoff, the date) into the prompt; a
  // template from chat_template.jinja or GGUF metadata has never been checked as UTF-8.
  if (const size_t bad = first_invalid_utf8(jinja); bad != std::string_view::npos)
    fail("the chat template is not valid UTF-8 (at byte {} of {})", bad, jinja.size());
  if (const size_t bad = first_invalid_utf8(bos_token); bad != std::string_view::npos)
    fail("the bos_token for the chat template is not valid UTF-8 (at byte {} of {})", bad, bos_token.size());
  ChatTemplate t;
  t.source = std::string(jinja);
  const bool llama3 = contains(jinja, "<|start_header_id|>") && contains(jinja, "<|end_header_id|>") &&
                      contains(jinja, "<|eot_id|>");
  const bool llama4 = contains(jinja, "<|header_start|>") && contains(jinja, "<|header_end|>") &&
                      contains(jinja, "<|eot|>");
  if (llama3 == llama4)
    fail("unsupported chat template (neither Llama-3 nor Llama-4 style): \"{}\"", excerpt(jinja));
  t.format = llama3 ? ChatFormat::Llama3 : ChatFormat::Llama4;

  if (contains(jinja, "bos_token")) {
    if (bos_token.empty()) fail("the chat template writes bos_token, but tokenizer_config.json has none");
    t.bos_token = std::string(bos_token);
  }
  t.always_generation_prompt = !contains(jinja, "add_generation_prompt");
  t.image_parts = contains(jinja, "<|image|>");
  if (t.format == ChatFormat::Llama3) {
    static const std::regex trim_pattern(R"(message(\[\s*['"]content['"]\s*\]|\.content)\s*\|\s*trim)");
    t.trim_content = std::regex_search(t.source, trim_pattern);
    // The tiny and Llama-3.0 templates prepend BOS to the first message inside the loop.
    t.bos_before_first_message_only = contains(jinja, "loop.index0 == 0");
    t.knowledge_date_preamble = contains(jinja, "Cutting Knowledge Date");
    if (t.knowledge_date_preamble) {
      t.knowledge_cutoff = literal_after(jinja, "Cutting Knowledge Date: ");
      if (t.knowledge_cutoff.empty()) fail("chat template: cannot read the knowledge cutoff date");
      if (contains(jinja, "strftime_now")) {
        t.date_string = today_date_string();
      } else {
        t.date_string = literal_after(jinja, "set date_string = \"");
        if (t.date_string.empty()) fail("chat template: cannot read the default date_string");
      }
    }
  }
  return t;
}

ChatTemplate ChatTemplate::load(const std::filesystem::path& dir) {
  const auto config_path = dir / "tokenizer_config.json";
  json config;
  try {
    config = json::parse(read_text_file(config_path));
  } catch (const json::exception& e) {
    fail("{}: invalid JSON: {}", config_path.string(), e.what());
  }
  if (!config.is_object()) fail("{}: expected a JSON object", config_path.string());

  std::string jinja;
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
  } else {
    fail("{} has no chat_template (and there is no chat_template.jinja)", config_path.string());
  }

  std::string bos;
  if (auto b = config.find("bos_token"); b != config.end()) {
    if (b->is_string()) bos = b->get<std::string>();
    else if (b->is_object() && b->contains("content") && (*b)["content"].is_string()) bos = (*b)["content"].get<std::string>();
    else if (!b->is_null()) fail("{}: bos_token must be a string or {{\"content\": ...}}", config_path.string());
  }
  return from_string(jinja, bos);
}

std::string ChatTemplate::render(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
  for (size_t i = 0; i < messages.size(); ++i) {
    check_utf8(messages[i], i);
    // The tiny Llama-3 template renders any role verbatim; only the official ones route tools.
    if (format == ChatFormat::Llama4 || knowledge_date_preamble) check_message(messages[i], i, format);
    else if (messages[i].role.empty()) fail("chat message {} has an empty role", i);
    if (!messages[i].parts.empty() && !image_parts)
      fail("chat message {}: the {} chat template takes string content only (it does not render images)", i,
           chat_format_name(format));
  }
  const bool gen_prompt = add_generation_prompt || always_generation_prompt;
  std::string out;

  if (format == ChatFormat::Llama3) {
    auto content = [&](const ChatMessage& m) {
      if (!m.parts.empty()) return render_parts(m);  // list content is never trimmed
      return trim_content ? std::string(python_strip(m.content)) : m.content;
    };
    size_t first = 0;
    if (!bos_before_first_message_only) out += bos_token;
    if (knowledge_date_preamble) {
      // messages[0] if it is the system message: Jinja would fail on an empty list, so do we.
      if (messages.empty()) fail("the {} chat template needs at least one message", chat_format_name(format));
      std::string system;
      if (messages[0].role == "system") {
        if (!messages[0].parts.empty())
          fail("the {} chat template takes the system message as a string only", chat_format_name(format));
        system = std::string(python_strip(messages[0].content));
        first = 1;
      }
      out += "<|start_header_id|>system<|end_header_id|>\n\n";
      out += "Cutting Knowledge Date: " + knowledge_cutoff + "\n";
      out += "Today Date: " + date_string + "\n\n";
      out += system + "<|eot_id|>";
    }
    for (size_t i = first; i < messages.size(); ++i) {
      if (bos_before_first_message_only && i == 0) out += bos_token;
      out += "<|start_header_id|>" + messages[i].role + "<|end_header_id|>\n\n" + content(messages[i]) + "<|eot_id|>";
    }
    if (gen_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
    return out;
  }

  // Llama-4.
  if (messages.empty()) fail("the {} chat template needs at least one message", chat_format_name(format));
  out += bos_token;
  size_t first = 0;
  if (messages[0].role == "system") {
    // Meta's template: the string trimmed, or the text of the first part trimmed.
    const ChatMessage& system = messages[0];
    if (!system.parts.empty() && system.parts[0].type != ChatContentPart::Type::Text)
      fail("the {} chat template needs the system message's first part to be text", chat_format_name(format));
    const std::string& text = system.parts.empty() ? system.content : system.parts[0].text;
    out += "<|header_start|>system<|header_end|>\n\n" + std::string(python_strip(text)) + "<|eot|>";
    first = 1;
  }
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    out += "<|header_start|>" + m.role + "<|header_end|>\n\n" + (m.parts.empty() ? m.content : render_parts(m)) +
           "<|eot|>";
  }
  if (gen_prompt) out += "<|header_start|>assistant<|header_end|>\n\n";
  return out;
}

}  // namespace eaglevk::loader
