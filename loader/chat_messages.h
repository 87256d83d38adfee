#pragma once
// Hugging Face chat messages as JSON, the form transformers' apply_chat_template takes:
//   [{"role": "user", "content": "Hello"},
//    {"role": "user", "content": [{"type": "image", "image": "cat.png"},
//                                 {"type": "text", "text": "What is this?"}]}]
// Content is a string or a list of parts; a part is {"type": "text", "text": STRING} or
// {"type": "image", "image": PATH}; an assistant message that calls tools may have no content,
// or null. A message's other keys (tool_calls, tool_call_id, name, ...) are kept, in order, for
// the template. Any other part type, a missing field or a field of the wrong JSON type is an
// eaglevk::Error naming the message and part.
#include <filesystem>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "loader/chat_template.h"

namespace eaglevk::loader {

// The roles chat templates know: Llama-3's system, user, assistant, and ipython and tool for
// tool results. The templates eaglevk ships (and Llama's own) render any other role as a header
// like these, so another role is no error; the CLI warns about it.
inline constexpr std::string_view kKnownChatRoles = "system, user, assistant, tool, ipython";
bool is_known_chat_role(std::string_view role);

struct ParsedChat {
  std::vector<ChatMessage> messages;
  std::vector<std::filesystem::path> images;  // every image part's path, in prompt order
};

// Relative image paths are taken relative to `image_dir` (absolute ones are kept). The files are
// not opened here.
ParsedChat parse_chat_messages(const nlohmann::ordered_json& messages, const std::filesystem::path& image_dir);
// The same from nlohmann::json, whose objects are sorted by key: the messages' extra keys reach
// the template in that order.
ParsedChat parse_chat_messages(const nlohmann::json& messages, const std::filesystem::path& image_dir);
// The same from JSON text; `source` names it in errors.
ParsedChat parse_chat_messages_json(std::string_view json_text, const std::filesystem::path& image_dir,
                                    std::string_view source = "messages");

}  // namespace eaglevk::loader
