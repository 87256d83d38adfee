// Chat templates through eaglevk's Jinja engine: the tiny Llama-3 template reproduces the golden
// chat prompts (made by transformers) exactly; what the engine does not render is refused by name;
// hostile templates end in errors, not hangs. Byte-for-byte agreement with jinja2 over the
// published templates is chat_template_jinja_test (tests/tools/chat_template_reference.py).
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include <eaglevk/error.h>

#include "loader/chat_template.h"
#include "loader/tokenizer.h"

namespace fs = std::filesystem;
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


}  // namespace

TEST(ChatTemplate, TinyTemplateTrimsAndPutsBosOnTheFirstMessage) {
  const ChatTemplate t = ChatTemplate::load(kTinyDir);
  EXPECT_EQ(t.bos_token, "<|begin_of_text|>");

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
  EXPECT_NE(load_message(R"({"chat_template": "{% include 'x' %}"})").find("`include` statement"), std::string::npos);
  EXPECT_NE(load_message(R"({"chat_template": "{{ bos_token }}"})").find("bos_token"), std::string::npos);
  // The list form with a default template works.
  json config = {{"bos_token", "<|begin_of_text|>"},
                 {"chat_template", json::array({{{"name", "default"}, {"template", kLlama4Template}}})}};
  std::ofstream(dir / "tokenizer_config.json", std::ios::binary) << config.dump();
  const std::vector<ChatMessage> user = {{"user", "x"}};
  EXPECT_NE(ChatTemplate::load(dir).render(user, true).find("<|header_start|>user<|header_end|>"), std::string::npos);
  fs::remove_all(dir);
}


namespace {

std::string render_error(std::string_view jinja, const std::vector<ChatMessage>& messages = {{"user", "x"}}) {
  try {
    ChatTemplate::from_string(jinja, "<s>").render(messages, true);
  } catch (const eaglevk::Error& e) {
    return e.what();
  }
  return "(rendered)";
}

}  // namespace

// What the engine does not render is refused by name when the template is read.
TEST(ChatTemplate, UnsupportedConstructsAreRefusedByName) {
  const std::pair<const char*, const char*> cases[] = {
      {"{% include 'other.jinja' %}", "`include` statement"},
      {"{% import 'm.jinja' as m %}", "`import` statement"},
      {"{% extends 'base' %}", "`extends` statement"},
      {"{% block body %}x{% endblock %}", "`block` statement"},
      {"{% filter upper %}x{% endfilter %}", "`filter` statement"},
      {"{% generation %}x{% endgeneration %}", "`generation` statement"},
      {"{{ messages | wordcount }}", "filter `wordcount`"},
      {"{{ 'x' if messages is divisibleby3 }}", "test `divisibleby3`"},
      {"{% for m in messages recursive %}{% endfor %}", "recursive for loops"},
      {"{{ 'a' % 1 }}", "'%'"},
      {"{{ 'é' | upper }}", "non-ASCII"},
      {"{{ messages | tojson(ensure_ascii=true) }}", "ensure_ascii"},
      {"{% frobnicate %}", "`frobnicate` is not a statement"},
  };
  for (const auto& [jinja, name] : cases) {
    const std::string what = render_error(jinja);
    EXPECT_NE(what.find(name), std::string::npos) << jinja << " -> " << what;
  }
  // Syntax errors name the line.
  EXPECT_NE(render_error("line one\n{{ messages[0 }}").find("line 2"), std::string::npos);
  EXPECT_NE(render_error("{% if true %}never closed").find("endif"), std::string::npos);
  EXPECT_NE(render_error("{{ 'open string }}").find("never closed"), std::string::npos);
  // raise_exception's message is passed on.
  EXPECT_NE(render_error("{{ raise_exception('no tools here') }}").find("no tools here"), std::string::npos);
}

// A template is data from a checkpoint: one that loops for ever, recurses or doubles a string
// must end in an error naming the bound, quickly.
TEST(ChatTemplate, HostileTemplatesEndInErrors) {
  const std::pair<std::string, const char*> cases[] = {
      {"{% for i in range(10**9) %}x{% endfor %}", "range() of more than"},
      {"{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "steps"},
      {"{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "macro calls nest deeper"},
      {"{{ 'x' * 10**12 }}", "grows past"},
      {"{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}", "grows past"},
      {"{% set ns = namespace(l=[], s='x' * 1000000) %}{% for i in range(100) %}{% set ns.l = ns.l + [ns.s] %}{% endfor %}",
       "grows past"},
      {"{{ 2 ** 64 }}", "integer overflow"},
      {"{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}", "nests deeper"},
      {"{{ " + std::string(5000, '[') + std::string(5000, ']') + " }}", "nests deeper"},
      {"{% if true %}" + std::string(3000, '{') + "% if true %}", "chat template"},
  };
  for (const auto& [jinja, name] : cases) {
    const auto start = std::chrono::steady_clock::now();
    const std::string what = render_error(jinja);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_NE(what.find(name), std::string::npos) << jinja.substr(0, 80) << " -> " << what;
    EXPECT_LT(seconds, 10.0) << jinja.substr(0, 80);
  }
}

// The issue this engine closes: a template recognised by its shape rendered as the stock one.
// Edited markers, a changed default system prompt and a changed date now come through. (The
// exact bytes are compared with jinja2 in chat_template_jinja_test; this checks the edits show.)
TEST(ChatTemplate, EditedPublishedTemplateRendersItsEdits) {
  std::string jinja = read_file(fs::path(EAGLEVK_ASSETS).parent_path() / "tests/data/chat_templates/meta-llama-Llama-3.1-8B-Instruct.jinja");
  ASSERT_FALSE(jinja.empty());
  const auto replace = [&](std::string_view from, std::string_view to) {
    for (size_t at = jinja.find(from); at != std::string::npos; at = jinja.find(from, at + to.size()))
      jinja.replace(at, from.size(), to);
  };
  replace("<|start_header_id|>", "<|im_start|>");
  replace("{%- set system_message = \"\" %}", "{%- set system_message = \"You are a pirate.\" %}");
  replace("26 Jul 2024", "01 Jan 2030");
  const ChatTemplate t = ChatTemplate::from_string(jinja, "<|begin_of_text|>");
  const std::vector<ChatMessage> user = {{"user", "Hi"}};
  const std::string text = t.render(user, true);
  EXPECT_EQ(text.find("<|start_header_id|>"), std::string::npos) << text;
  EXPECT_NE(text.find("<|im_start|>user<|end_header_id|>"), std::string::npos) << text;
  EXPECT_NE(text.find("You are a pirate."), std::string::npos) << text;
  EXPECT_NE(text.find("Today Date: 01 Jan 2030"), std::string::npos) << text;
}

// `| trim` walks content by code point: a message ending in a truncated sequence must not be
// walked past its end. Every message is checked first and refused, naming the message.
TEST(ChatTemplate, TrimTemplatesRefuseTruncatedUtf8) {
  const ChatTemplate tiny = ChatTemplate::load(kTinyDir);
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
// chat_template.jinja or GGUF metadata; JSON strings are always valid) copied its literals, and
// so the prompt, as invalid UTF-8. Templates and bos tokens are checked.
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
