#pragma once
// Chat prompts for the model families this runtime serves. tokenizer_config.json carries the
// chat template as a Jinja program; rather than run Jinja, the template is recognised by its
// distinctive markers and the conversation is rendered by C++ that writes exactly what that
// template writes. Anything not recognised is refused with an eaglevk::Error.
//
// Llama3: '<|start_header_id|>' + role + '<|end_header_id|>\n\n' + content + '<|eot_id|>' per
//   message, bos_token in front. Variants read from the template text:
//   - `message['content'] | trim` trims each content (Python str.strip);
//   - "Cutting Knowledge Date" (Llama-3.1/3.2/3.3): a leading system block is always written,
//     holding the knowledge cutoff, "Today Date: " + date_string, then the system message;
//   - no `add_generation_prompt` in the template (the first Llama-3 release): the assistant
//     header is always appended.
// Llama4: '<|header_start|>' + role + '<|header_end|>\n\n' + content + '<|eot|>', bos_token in
//   front; a system message is trimmed, other contents are written as they are.
// The rendered text contains BOS already: encode it with add_special = false.
//
// Content may also be a list of parts (Hugging Face's multimodal messages), for templates that
// render images (their text contains '<|image|>'): an image part is written as "<|image|>" and a
// text part as its text, never trimmed, even where string content is; for Llama-4 a system
// message's first part (text) is trimmed, as Meta's template does. The processor later expands
// each "<|image|>" into the image's tokens (llama4_image_prompt.h).
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace eaglevk::loader {

struct ChatContentPart {
  enum class Type { Text, Image };
  Type type = Type::Text;
  std::string text;             // Type::Text
  std::filesystem::path image;  // Type::Image: the image file (chat_messages.h resolves it)
};

struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
  // When not empty, the content is this list of parts and `content` is ignored (an empty list
  // renders as an empty string would).
  std::vector<ChatContentPart> parts = {};
};

enum class ChatFormat { Llama3, Llama4 };
std::string_view chat_format_name(ChatFormat format);

struct ChatTemplate {
  ChatFormat format = ChatFormat::Llama3;
  std::string bos_token;             // written in front; empty when the template has no bos_token
  bool bos_before_first_message_only = false;  // tiny/Llama-3.0: BOS is part of message 0
  bool trim_content = false;         // Llama3: content | trim
  bool always_generation_prompt = false;  // template ignores add_generation_prompt
  bool knowledge_date_preamble = false;   // Llama-3.1 style system block
  bool image_parts = false;          // list content accepted: image parts render as '<|image|>'
  std::string knowledge_cutoff;      // "December 2023"
  std::string date_string;           // "26 Jul 2024"; today's date when the template asks for strftime_now
  std::string source;                // the Jinja text it was recognised from

  // Reads the template from dir/tokenizer_config.json ("chat_template": a string, or a list of
  // {name, template} where "default" is used), else from dir/chat_template.jinja.
  static ChatTemplate load(const std::filesystem::path& dir);
  // Recognises `jinja`. `bos_token` is the text of tokenizer_config.json's bos_token.
  static ChatTemplate from_string(std::string_view jinja, std::string_view bos_token);

  // The prompt text. add_generation_prompt appends the assistant header the model continues from.
  std::string render(std::span<const ChatMessage> messages, bool add_generation_prompt) const;
};

}  // namespace eaglevk::loader
