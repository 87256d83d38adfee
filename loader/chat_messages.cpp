// Error messages name a JSON value's type, never its text: the input may be large or hostile.
#include "loader/chat_messages.h"

#include <nlohmann/json.hpp>

#include <eaglevk/error.h>

#include "loader/hf_config.h"
#include "loader/json_excerpt.h"

namespace eaglevk::loader {
namespace {

using json = nlohmann::ordered_json;

const std::string& string_field(const json& object, const char* key, const std::string& where) {
  auto it = object.find(key);
  if (it == object.end()) fail("{}: missing \"{}\"", where, key);
  if (!it->is_string()) fail("{}: \"{}\" must be a string, got {}", where, key, it->type_name());
  return it->get_ref<const std::string&>();
}

ChatContentPart parse_part(const json& part, const std::string& where, const std::filesystem::path& image_dir) {
  if (!part.is_object()) fail("{}: a content part must be an object, got {}", where, part.type_name());
  const std::string& type = string_field(part, "type", where);
  ChatContentPart out;
  if (type == "text") {
    out.type = ChatContentPart::Type::Text;
    out.text = string_field(part, "text", where);
  } else if (type == "image") {
    out.type = ChatContentPart::Type::Image;
    const std::string& path = string_field(part, "image", where);
    if (path.empty()) fail("{}: \"image\" is an empty path", where);
    out.image = image_dir / std::filesystem::path(path);
  } else {
    // Quoted with a length cap: the type is user input.
    fail("{}: unsupported content part type \"{}\" (only \"text\" and \"image\")", where,
         type.size() > 40 ? type.substr(0, 40) + "..." : type);
  }
  return out;
}

}  // namespace

bool is_known_chat_role(std::string_view role) {
  return role == "system" || role == "user" || role == "assistant" || role == "tool" || role == "ipython";
}

ParsedChat parse_chat_messages(const json& messages, const std::filesystem::path& image_dir) {
  if (!messages.is_array()) fail("chat messages must be a JSON list, got {}", messages.type_name());
  ParsedChat chat;
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string where = fmt::format("messages[{}]", i);
    const json& m = messages[i];
    if (!m.is_object()) fail("{}: a message must be an object, got {}", where, m.type_name());
    ChatMessage message;
    message.role = string_field(m, "role", where);
    if (message.role.empty()) fail("{}: empty \"role\"", where);
    auto content = m.find("content");
    if (content == m.end() || content->is_null()) {
      // Tool calls come without content; the template sees the key missing (or None).
      message.content_missing = content == m.end();
      if (!m.contains("tool_calls")) fail("{}: missing \"content\" (only a message with tool_calls may omit it)", where);
      if (content != m.end()) message.extra["content"] = nullptr;
    } else if (content->is_string()) {
      message.content = content->get<std::string>();
    } else if (content->is_array()) {
      for (size_t k = 0; k < content->size(); ++k) {
        ChatContentPart part = parse_part((*content)[k], fmt::format("{}.content[{}]", where, k), image_dir);
        if (part.type == ChatContentPart::Type::Image) chat.images.push_back(part.image);
        message.parts.push_back(std::move(part));
      }
    } else {
      fail("{}: \"content\" must be a string or a list of parts, got {}", where, content->type_name());
    }
    for (const auto& [key, value] : m.items())
      if (key != "role" && key != "content") message.extra[key] = value;
    chat.messages.push_back(std::move(message));
  }
  return chat;
}

ParsedChat parse_chat_messages(const nlohmann::json& messages, const std::filesystem::path& image_dir) {
  // The copy into an ordered value goes through dump(), which recurses once per level: a
  // hostile line nested 100,000 deep (which nlohmann parses without recursing) is refused first.
  if (json_nested_deeper_than(messages, json_field::kMaxJsonFileDepth))
    fail("\"messages\" nests arrays and objects more than {} levels deep", json_field::kMaxJsonFileDepth);
  return parse_chat_messages(json::parse(messages.dump()), image_dir);
}

ParsedChat parse_chat_messages_json(std::string_view json_text, const std::filesystem::path& image_dir,
                                    std::string_view source) {
  json messages;
  try {
    messages = json::parse(json_text);
  } catch (const json::exception& e) {
    fail("{}: invalid JSON: {}", source, json_parse_error_text(e));
  }
  try {
    return parse_chat_messages(messages, image_dir);
  } catch (const Error& e) {
    fail("{}: {}", source, e.what());
  }
}

}  // namespace eaglevk::loader
