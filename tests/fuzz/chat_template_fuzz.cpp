// libFuzzer entry for chat templates (tests/fuzz/run_fuzz.sh chat_template). The first byte
// picks what the rest of the input is:
//   even: a chat template (Jinja text); whatever is recognised renders a fixed conversation.
//   odd:  a conversation for four fixed templates (the Llama-3.0 style with `| trim`, the
//         Llama-3.1 style with its system block, Llama-4 with image parts, and the first Llama-3
//         release): read as Hugging Face messages JSON, and as raw bytes put in a system and a
//         user message (invalid or truncated UTF-8 included).
// Every path must render or give an eaglevk::Error, and whatever renders is valid UTF-8.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <eaglevk/error.h>

#include "loader/chat_messages.h"
#include "loader/chat_template.h"
#include "loader/pretokenize.h"

using namespace eaglevk::loader;

namespace {

constexpr std::string_view kBos = "<|begin_of_text|>";

// Short stand-ins with the markers the renderer recognises (chat_template.h lists them).
const std::vector<ChatTemplate>& templates() {
  static const std::vector<ChatTemplate> all = {
      ChatTemplate::from_string("{{ bos_token }}{% for message in messages %}{% set content = '<|start_header_id|>' + "
                                "message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' "
                                "%}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ "
                                "content }}{% endfor %}{% if add_generation_prompt %}{% endif %}",
                                kBos),
      ChatTemplate::from_string("{{- bos_token }}{%- set date_string = \"26 Jul 2024\" %}<|start_header_id|>"
                                "<|end_header_id|>Cutting Knowledge Date: December 2023\n<|eot_id|> "
                                "message['content'] | trim add_generation_prompt",
                                kBos),
      ChatTemplate::from_string("{{ bos_token }}<|header_start|><|header_end|><|eot|><|image|> add_generation_prompt", kBos),
      ChatTemplate::from_string("<|start_header_id|><|end_header_id|><|eot_id|> message['content'] | trim "
                                "loop.index0 == 0 bos_token",
                                kBos),
  };
  return all;
}

void render(const ChatTemplate& t, const std::vector<ChatMessage>& messages) {
  for (bool gen : {false, true}) {
    try {
      const std::string out = t.render(messages, gen);
      if (first_invalid_utf8(out) != std::string_view::npos) std::abort();
    } catch (const eaglevk::Error&) {
    }
  }
}

void fuzz_template(std::string_view jinja) {
  try {
    const ChatTemplate t = ChatTemplate::from_string(jinja, kBos);
    render(t, {{"system", "  Be brief. "}, {"user", "Hi\n"}, {"assistant", "Hello."}, {"user", " Why? "}});
  } catch (const eaglevk::Error&) {
  }
}

void fuzz_conversation(std::string_view text) {
  try {
    const ParsedChat chat = parse_chat_messages_json(text, "/images", "fuzz messages");
    for (const ChatTemplate& t : templates()) render(t, chat.messages);
  } catch (const eaglevk::Error&) {
  }
  // Raw bytes as content: the `| trim` path walks them by code point.
  const std::string raw(text);
  for (const ChatTemplate& t : templates()) {
    render(t, {{"system", raw}, {"user", raw}});
    render(t, {{"user", raw}});
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) fuzz_template(rest);
  else fuzz_conversation(rest);
  return 0;
}
