// libFuzzer entry for chat templates (tests/fuzz/run_fuzz.sh chat_template): the Jinja engine's
// lexer, parser and renderer, and the messages reader. The first byte picks what the rest is:
//   even, bit 1 clear: a chat template as text;
//   even, bit 1 set:   a chat template built from Jinja's tokens, one byte each (kTokens), so
//                      that the fuzzer reaches the parser and renderer with well-formed tags;
//   odd:               a conversation for the published templates (tests/data/chat_templates and
//                      the tiny models'): read as Hugging Face messages JSON, and as raw bytes
//                      put in a system and a user message (invalid or truncated UTF-8 included).
// A template renders a fixed conversation with tools and images, under a small step bound.
// Every path must render or give an eaglevk::Error (never hang: the renderer's bounds), and
// whatever renders from valid UTF-8 is valid UTF-8.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include <eaglevk/error.h>

#include "loader/chat_messages.h"
#include "loader/chat_template.h"
#include "loader/pretokenize.h"
#include "loader/text_file.h"

using namespace eaglevk::loader;

namespace {

constexpr std::string_view kBos = "<|begin_of_text|>";
constexpr size_t kMaxSteps = 20000;  // ample for these conversations; keeps every input fast

constexpr std::string_view kTokens[] = {
    "{{ ", " }}", "{% ", " %}", "{{- ", " -}}", "{%- ", " -%}", "{# c #}", "{%+ ", "\n", "  ", "text",
    "if ", "elif ", "else", "endif", "for ", " in ", "endfor", "set ", "endset", "macro ", "endmacro", "break",
    "continue", "not ", " and ", " or ", " is ", "defined", "none", "string", "mapping", "iterable", "equalto ",
    "namespace(", "ns", ".x", "range(", "strftime_now(", "raise_exception(", "'%d %b %Y'", "messages", "message",
    "m", "loop", ".index", ".first", ".last", ".length", "['role']", "['content']", ".content", ".role",
    "tool_calls", "tools", "bos_token", "add_generation_prompt", " + ", " ~ ", " - ", " * ", " / ", " // ",
    " % ", " ** ", " == ", " != ", " < ", " >= ", "(", ")", "[", "]", "{", "}", ":", ",", "=", "|", "trim",
    "length", "tojson", "tojson(indent=4)", "join(', ')", "items", "selectattr(", "map(attribute='role')",
    "default(", "first", "last", "upper", "replace(", "'x'", "\"y\"", "'\\n'", "'é'", "0", "1", "2", "-1",
    "1.5", "true", "false", "[1:]", "[::-1]", "[-1]", "f(", "x", "strip()", "split()", "startswith('a')",
    "10**9", "'ab' * 9", "reject(", "select(", "list", "string", "count"};

std::vector<ChatTemplate> load_published() {
  std::vector<ChatTemplate> out;
  for (const auto& entry : std::filesystem::directory_iterator(EAGLEVK_FUZZ_TEMPLATE_DIR))
    if (entry.path().extension() == ".jinja")
      out.push_back(ChatTemplate::from_string(read_text_file(entry.path()), kBos, "<|eot_id|>"));
  for (const char* model : {"tiny-llama3", "tiny-llama4-vision"})
    out.push_back(ChatTemplate::load(std::filesystem::path(EAGLEVK_FUZZ_ASSETS_DIR) / model));
  return out;
}

const std::vector<ChatTemplate>& published() {
  static const std::vector<ChatTemplate> all = load_published();
  return all;
}

ChatRenderInput input(bool gen, bool tools) {
  ChatRenderInput in;
  in.add_generation_prompt = gen;
  in.max_steps = kMaxSteps;
  in.now = std::tm{};
  in.now->tm_year = 125;
  in.now->tm_mday = 7;
  if (tools)
    in.tools = nlohmann::ordered_json::parse(
        R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "string"}}}}}])");
  return in;
}

void render(const ChatTemplate& t, const std::vector<ChatMessage>& messages, bool valid_input) {
  for (int variant = 0; variant < 3; ++variant) {
    try {
      const std::string out = t.render(messages, input(variant != 1, variant == 2));
      if (valid_input && first_invalid_utf8(out) != std::string_view::npos) std::abort();
    } catch (const eaglevk::Error&) {
    }
  }
}

const std::vector<ChatMessage>& fixed_conversation() {
  static const std::vector<ChatMessage> messages = [] {
    ChatMessage image{"user", ""};
    image.parts = {{ChatContentPart::Type::Image, "", "/images/a.png"}, {ChatContentPart::Type::Text, "What is this?", {}}};
    ChatMessage call{"assistant", ""};
    call.content_missing = true;
    call.extra = nlohmann::ordered_json::parse(R"({"tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"a": "b"}}}]})");
    return std::vector<ChatMessage>{{"system", "  Be brief. "}, {"user", "Hi\n"}, {"assistant", "Hello."},
                                    image, call, {"tool", "{\"ok\": true}"}, {"user", " Why? "}};
  }();
  return messages;
}

void fuzz_template(std::string_view jinja) {
  try {
    const ChatTemplate t = ChatTemplate::from_string(jinja, kBos, "<|eot_id|>");
    render(t, fixed_conversation(), first_invalid_utf8(jinja) == std::string_view::npos);
  } catch (const eaglevk::Error&) {
  }
}

void fuzz_conversation(std::string_view text) {
  try {
    const ParsedChat chat = parse_chat_messages_json(text, "/images", "fuzz messages");
    for (const ChatTemplate& t : published()) render(t, chat.messages, true);
  } catch (const eaglevk::Error&) {
  }
  // Raw bytes as content: `| trim` walks them by code point.
  const std::string raw(text);
  for (const ChatTemplate& t : published()) {
    render(t, {{"system", raw}, {"user", raw}}, false);
    render(t, {{"user", raw}}, false);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 1) {
    fuzz_conversation(rest);
  } else if ((data[0] & 2) == 0) {
    fuzz_template(rest);
  } else {
    std::string jinja;
    for (unsigned char byte : rest) jinja += kTokens[byte % std::size(kTokens)];
    fuzz_template(jinja);
  }
  return 0;
}
