// eaglevk_render_template: renders chat templates with eaglevk's Jinja engine for
// tests/tools/chat_template_reference.py, which renders the same cases with jinja2 and compares.
// Reads one JSON case a line on stdin:
//   {"template": TEXT, "bos_token": S, "eos_token": S, "messages": [...], "tools": [...] or null,
//    "add_generation_prompt": BOOL, "variables": {...}, "now": [year, month, day, hour, min, sec]}
// and writes one line for each: {"text": RENDERED} or {"error": MESSAGE}.
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include <eaglevk/error.h>

#include "loader/chat_messages.h"
#include "loader/chat_template.h"

using nlohmann::ordered_json;

namespace {

ordered_json render_case(const ordered_json& c) {
  try {
    const eaglevk::loader::ChatTemplate t = eaglevk::loader::ChatTemplate::from_string(
        c.at("template").get<std::string>(), c.value("bos_token", ""), c.value("eos_token", ""));
    const eaglevk::loader::ParsedChat chat = eaglevk::loader::parse_chat_messages(c.at("messages"), "/images");
    eaglevk::loader::ChatRenderInput input;
    input.add_generation_prompt = c.value("add_generation_prompt", true);
    input.tools = c.value("tools", ordered_json(nullptr));
    input.variables = c.value("variables", ordered_json(nullptr));
    if (c.contains("now")) {
      const ordered_json& n = c["now"];
      std::tm tm{};
      tm.tm_year = n.at(0).get<int>() - 1900;
      tm.tm_mon = n.at(1).get<int>() - 1;
      tm.tm_mday = n.at(2).get<int>();
      tm.tm_hour = n.at(3).get<int>();
      tm.tm_min = n.at(4).get<int>();
      tm.tm_sec = n.at(5).get<int>();
      std::mktime(&tm);  // fills in the weekday and day of the year, for %a and %j
      input.now = tm;
    }
    return {{"text", t.render(chat.messages, input)}};
  } catch (const eaglevk::Error& e) {
    return {{"error", e.what()}};
  }
}

}  // namespace

int main() {
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    ordered_json c;
    try {
      c = ordered_json::parse(line);
    } catch (const ordered_json::exception& e) {
      std::cerr << "eaglevk_render_template: bad case line: " << e.what() << "\n";
      return 2;
    }
    std::cout << render_case(c).dump(-1, ' ', false, ordered_json::error_handler_t::replace) << "\n";
  }
  return 0;
}
