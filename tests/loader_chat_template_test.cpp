// Chat templates: the tiny Llama-3 template must reproduce the golden chat prompts exactly; the
// official Llama-3.1 and Llama-4 template styles render their header formats; anything else is
// refused.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include <eaglevk/error.h>

#include "loader/chat_template.h"
#include "loader/tokenizer.h"

namespace fs = std::filesystem;
using eaglevk::loader::ChatFormat;
using eaglevk::loader::ChatMessage;
using eaglevk::loader::ChatTemplate;
using eaglevk::loader::Tokenizer;
using nlohmann::json;

namespace {

const fs::path kTinyDir = fs::path(EAGLEVK_ASSETS) / "tiny-llama3";

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// In the style of Meta's Llama-4 instruct template (tools elided to their branches).
const char* kLlama4Template = R"JINJA({{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}
{%- if messages[0]['role'] == 'system' %}
    {%- if messages[0]['content'] is string %}
        {%- set system_message = messages[0]['content']|trim %}
    {%- else %}
        {%- set system_message = messages[0]['content'][0]['text']|trim %}
    {%- endif %}
    {%- set messages = messages[1:] %}
    {%- set user_supplied_system_message = true %}
{%- else %}
    {%- set system_message = "" %}
    {%- set user_supplied_system_message = false %}
{%- endif %}
{%- if user_supplied_system_message %}
    {{- "<|header_start|>system<|header_end|>\n\n" }}
    {%- if tools is not none %}
        {{- "Environment: ipython\n" }}
    {%- endif %}
    {{- system_message }}
    {{- "<|eot|>" }}
{%- endif %}
{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
    {{- '<|header_start|>' + message['role'] + '<|header_end|>\n\n' }}
        {%- if message['content'] is string %}
            {{- message['content'] }}
        {%- else %}
            {%- for content in message['content'] %}
                {%- if content['type'] == 'image' %}
                    {{- '<|image|>' }}
                {%- elif content['type'] == 'text' %}
                    {{- content['text'] }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {{- "<|eot|>" }}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|header_start|>ipython<|header_end|>\n\n" }}
        {{- message.content }}
        {{- "<|eot|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|header_start|>assistant<|header_end|>\n\n' }}
{%- endif %}
)JINJA";

// In the style of Meta's Llama-3.1 instruct template (tool branches elided).
const char* kLlama31Template = R"JINJA({{- bos_token }}
{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- for message in messages %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
)JINJA";

}  // namespace

TEST(ChatTemplate, TinyTemplateIsLlama3WithTrimAndBosOnFirstMessage) {
  const ChatTemplate t = ChatTemplate::load(kTinyDir);
  EXPECT_EQ(t.format, ChatFormat::Llama3);
  EXPECT_EQ(t.bos_token, "<|begin_of_text|>");
  EXPECT_TRUE(t.trim_content);
  EXPECT_TRUE(t.bos_before_first_message_only);
  EXPECT_FALSE(t.knowledge_date_preamble);  // the tiny template injects no dates
  EXPECT_FALSE(t.always_generation_prompt);

  const std::vector<ChatMessage> messages = {{"system", "  Be brief.\n"}, {"user", "Hi there! "}};
  EXPECT_EQ(t.render(messages, true),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi there!<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(t.render(std::span(messages).first(1), false),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>");
  // As the Jinja loop: nothing but the generation prompt for an empty conversation.
  EXPECT_EQ(t.render({}, true), "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplate, GoldenChatPromptsRenderAndEncode) {
  const ChatTemplate t = ChatTemplate::load(kTinyDir);
  const Tokenizer tokenizer = Tokenizer::load(kTinyDir);
  const json golden = json::parse(read_file(kTinyDir / "golden.json"));
  std::ifstream prompts(kTinyDir / "prompts.jsonl");
  int checked = 0;
  for (std::string line; std::getline(prompts, line);) {
    const json p = json::parse(line);
    if (p["type"] != "chat") continue;
    std::vector<ChatMessage> messages;
    for (const json& m : p["messages"]) messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
    const json& g = golden["prompts"][p["id"].get<int>()];
    const std::string text = t.render(messages, true);
    EXPECT_EQ(text, g["prompt_text"].get<std::string>());
    EXPECT_EQ(tokenizer.encode(text, /*add_special=*/false), g["prompt_ids"].get<std::vector<int32_t>>())
        << "prompt " << p["id"];
    ++checked;
  }
  EXPECT_EQ(checked, 5);
}

TEST(ChatTemplate, Llama4TemplateRendersHeaderFormat) {
  const ChatTemplate t = ChatTemplate::from_string(kLlama4Template, "<|begin_of_text|>");
  EXPECT_EQ(t.format, ChatFormat::Llama4);
  const std::vector<ChatMessage> messages = {
      {"system", " You are terse. "}, {"user", "What is 2+2? "}, {"assistant", "4"}, {"user", "\nAnd 3+3?"}};
  EXPECT_EQ(t.render(messages, true),
            "<|begin_of_text|><|header_start|>system<|header_end|>\n\nYou are terse.<|eot|>"
            "<|header_start|>user<|header_end|>\n\nWhat is 2+2? <|eot|>"
            "<|header_start|>assistant<|header_end|>\n\n4<|eot|>"
            "<|header_start|>user<|header_end|>\n\n\nAnd 3+3?<|eot|>"
            "<|header_start|>assistant<|header_end|>\n\n");
  // No system message: no system block.
  EXPECT_EQ(t.render(std::span(messages).subspan(1, 1), false),
            "<|begin_of_text|><|header_start|>user<|header_end|>\n\nWhat is 2+2? <|eot|>");
  EXPECT_THROW(t.render({}, true), eaglevk::Error);
  const std::vector<ChatMessage> tool = {{"tool", "{}"}};
  EXPECT_THROW(t.render(tool, true), eaglevk::Error);
}

TEST(ChatTemplate, Llama31TemplateAddsKnowledgeDateSystemBlock) {
  ChatTemplate t = ChatTemplate::from_string(kLlama31Template, "<|begin_of_text|>");
  EXPECT_EQ(t.format, ChatFormat::Llama3);
  EXPECT_TRUE(t.knowledge_date_preamble);
  EXPECT_EQ(t.knowledge_cutoff, "December 2023");
  EXPECT_EQ(t.date_string, "26 Jul 2024");
  const std::vector<ChatMessage> user_only = {{"user", " Hello "}};
  EXPECT_EQ(t.render(user_only, true),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
            "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  const std::vector<ChatMessage> with_system = {{"system", "Be kind."}, {"user", "Hi"}};
  t.date_string = "01 Jan 2030";
  EXPECT_EQ(t.render(with_system, false),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
            "Cutting Knowledge Date: December 2023\nToday Date: 01 Jan 2030\n\nBe kind.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>");
}

TEST(ChatTemplate, FirstLlama3ReleaseAlwaysAddsTheAssistantHeader) {
  // The first Llama-3 release's template had no add_generation_prompt condition.
  const ChatTemplate t = ChatTemplate::from_string(
      "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
      "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 "
      "%}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{{ "
      "'<|start_header_id|>assistant<|end_header_id|>\n\n' }}",
      "<|begin_of_text|>");
  EXPECT_TRUE(t.always_generation_prompt);
  const std::vector<ChatMessage> m = {{"user", "x"}};
  EXPECT_EQ(t.render(m, false),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nx<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplate, UnknownTemplatesAreRefused) {
  const char* chatml =
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
      "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
  try {
    ChatTemplate::from_string(chatml, "");
    ADD_FAILURE() << "ChatML accepted";
  } catch (const eaglevk::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("unsupported chat template"), std::string::npos) << what;
    EXPECT_NE(what.find("<|im_start|>"), std::string::npos) << "the message should quote the template: " << what;
  }
  EXPECT_THROW(ChatTemplate::from_string("", ""), eaglevk::Error);
  // Both families' markers at once is ambiguous, not a guess.
  EXPECT_THROW(ChatTemplate::from_string("<|start_header_id|><|end_header_id|><|eot_id|><|header_start|><|header_end|><|eot|>", ""),
               eaglevk::Error);
  // bos_token used but not defined.
  EXPECT_THROW(ChatTemplate::from_string(kLlama4Template, ""), eaglevk::Error);
}

TEST(ChatTemplate, LoadErrorsAreClear) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("eaglevk_chat_{}", ::getpid());
  fs::create_directories(dir);
  auto load_message = [&](const std::string& config) {
    std::ofstream(dir / "tokenizer_config.json", std::ios::binary) << config;
    try {
      ChatTemplate::load(dir);
    } catch (const eaglevk::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(load_message("{").find("invalid JSON"), std::string::npos);
  EXPECT_NE(load_message("{}").find("no chat_template"), std::string::npos);
  EXPECT_NE(load_message(R"({"chat_template": 5})").find("must be a string"), std::string::npos);
  EXPECT_NE(load_message(R"({"chat_template": [{"name": "tool_use", "template": "x"}]})").find("default"), std::string::npos);
  EXPECT_NE(load_message(R"({"chat_template": "{{ messages }}"})").find("unsupported chat template"), std::string::npos);
  // The list form with a default template works.
  json config = {{"bos_token", "<|begin_of_text|>"},
                 {"chat_template", json::array({{{"name", "default"}, {"template", kLlama4Template}}})}};
  std::ofstream(dir / "tokenizer_config.json", std::ios::binary) << config.dump();
  EXPECT_EQ(ChatTemplate::load(dir).format, ChatFormat::Llama4);
  fs::remove_all(dir);
}

// The Llama-3.0 and tiny templates trim each content (`| trim`) but route no roles, so they
// used to skip the UTF-8 check that the official templates make: a message ending in a
// truncated sequence was walked by code point past its end. Every template now refuses it,
// naming the message, and the content is never read beyond its bytes.
TEST(ChatTemplate, TrimTemplatesRefuseTruncatedUtf8) {
  const ChatTemplate tiny = ChatTemplate::load(kTinyDir);
  ASSERT_TRUE(tiny.trim_content);
  ASSERT_FALSE(tiny.knowledge_date_preamble);
  const ChatTemplate first = ChatTemplate::from_string(
      "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
      "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 "
      "%}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}",
      "<|begin_of_text|>");
  // The content is a prefix of a longer buffer whose next bytes would complete the character.
  const std::string buffer = "  hi \xE2\x82\xAC  ";
  for (size_t cut : {6u, 7u}) {
    const std::vector<ChatMessage> m = {{"system", "be brief"}, {"user", buffer.substr(0, cut)}};
    for (const ChatTemplate* t : {&tiny, &first}) {
      try {
        t->render(m, true);
        ADD_FAILURE() << "truncated UTF-8 rendered";
      } catch (const eaglevk::Error& e) {
        EXPECT_NE(std::string(e.what()).find("chat message 1 is not valid UTF-8"), std::string::npos) << e.what();
      }
    }
  }
  // Invalid bytes in the role are refused the same way; valid content still trims as before.
  EXPECT_THROW(tiny.render(std::vector<ChatMessage>{{"us\xFF", "x"}}, true), eaglevk::Error);
  const std::vector<ChatMessage> ok = {{"user", buffer}};
  EXPECT_NE(first.render(ok, true).find("\n\nhi \xE2\x82\xAC<|eot_id|>"), std::string::npos);
}

// Found by chat_template_fuzz: a template whose text is not valid UTF-8 (possible in
// chat_template.jinja or GGUF metadata; JSON strings are always valid) rendered its knowledge
// cutoff, and so the prompt, as invalid UTF-8. Templates and bos tokens are now checked.
TEST(ChatTemplate, TemplatesThatAreNotUtf8AreRefused) {
  const std::string cutoff_cut =
      "{{- bos_token }}{%- set date_string = \"26 Jul 2024\" %}<|start_header_id|><|end_header_id|><|eot_id|>"
      "{{- \"Cutting Knowledge Date: Dece\xb7mber 2023\\n\" }} message['content'] | trim";
  try {
    ChatTemplate::from_string(cutoff_cut, "<|begin_of_text|>");
    ADD_FAILURE() << "a template with invalid UTF-8 was accepted";
  } catch (const eaglevk::Error& e) {
    EXPECT_NE(std::string(e.what()).find("chat template is not valid UTF-8 (at byte"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ChatTemplate::from_string(kLlama4Template, "<|begin_of_text\xE2\x82"), eaglevk::Error);
}
