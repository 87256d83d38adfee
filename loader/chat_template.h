#pragma once
// Chat prompts as the checkpoint's own chat template writes them. tokenizer_config.json (or
// GGUF's tokenizer.chat_template) carries the template as a Jinja program; it is parsed and run
// by eaglevk's Jinja engine (loader/jinja/), with the variables and settings transformers'
// apply_chat_template renders it under, so the prompt is the one the model was trained on,
// byte for byte: edited role headers, a changed default system prompt or a fine-tune's own
// markers come through as written. A template that uses what the engine does not render is
// refused by name when it is read (never approximated).
//
// Variables the template sees: messages (role, content as a string or a list of parts, and any
// other keys a message had, such as tool_calls), add_generation_prompt, bos_token, eos_token,
// tools (None unless given), documents (None), and whatever extra variables the caller passes
// (date_string, builtin_tools, ...); globals raise_exception and strftime_now as transformers
// defines them, and Jinja's range, namespace and dict.
//
// The rendered text contains BOS already when the template writes it: encode it with
// add_special = false. An image part renders as the template says (Llama-4: '<|image|>'); the
// processor later expands each "<|image|>" into the image's tokens (llama4_image_prompt.h).
#include <ctime>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace eaglevk::loader {

namespace jinja {
struct Program;
}

struct ChatContentPart {
  enum class Type { Text, Image };
  Type type = Type::Text;
  std::string text;             // Type::Text
  std::filesystem::path image;  // Type::Image: the image file (chat_messages.h resolves it)
};

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", "tool", "ipython", ...
  std::string content;
  // When not empty, the content is this list of parts and `content` is ignored (an empty list
  // renders as an empty string would).
  std::vector<ChatContentPart> parts = {};
  // The message's other keys as given (tool_calls, tool_call_id, name, ...): a JSON object, or
  // null for none. They reach the template as they are, in this order.
  nlohmann::ordered_json extra = nullptr;
  // No "content" key at all (an assistant message that only calls tools): the template's
  // message.content is undefined rather than "".
  bool content_missing = false;
};

// What apply_chat_template takes besides the messages.
struct ChatRenderInput {
  bool add_generation_prompt = true;
  nlohmann::ordered_json tools = nullptr;      // a list of tool definitions, or null (None)
  nlohmann::ordered_json variables = nullptr;  // an object of extra template variables, or null
  std::optional<std::tm> now;                  // strftime_now's time; the local time when absent
  size_t max_steps = 0;                        // the renderer's step bound; 0 keeps its default
  size_t max_work = 0;                         // its work bound (jinja/budget.h); 0 keeps the default
  size_t max_memory_bytes = 0;                 // its memory bound; 0 keeps the default
};

struct ChatTemplate {
  std::string source;     // the Jinja text
  std::string bos_token;  // tokenizer_config.json's bos_token text; empty when there is none
  std::string eos_token;
  // Where the template came from ("tokenizer_config.json"), named in render errors; empty when
  // unknown (from_string).
  std::string origin;
  std::shared_ptr<const jinja::Program> program;  // parsed once; shared by copies

  // Reads the template from dir/tokenizer_config.json ("chat_template": a string, or a list of
  // {name, template} where "default" is used), else from dir/chat_template.jinja.
  static ChatTemplate load(const std::filesystem::path& dir);
  // Parses `jinja`; an eaglevk::Error names what the engine does not render.
  static ChatTemplate from_string(std::string_view jinja, std::string_view bos_token, std::string_view eos_token = {});

  // The prompt text. add_generation_prompt appends the assistant header the model continues from.
  std::string render(std::span<const ChatMessage> messages, bool add_generation_prompt) const;
  std::string render(std::span<const ChatMessage> messages, const ChatRenderInput& input) const;
};

// A template read from a Jinja file, rendered with the given special tokens (those of the
// checkpoint whose template it replaces).
ChatTemplate chat_template_from_file(const std::filesystem::path& file, std::string_view bos_token,
                                     std::string_view eos_token);

}  // namespace eaglevk::loader
