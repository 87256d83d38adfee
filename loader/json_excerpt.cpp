#include "loader/json_excerpt.h"

#include <vector>

#include <nlohmann/json.hpp>

namespace eaglevk::loader {

using nlohmann::json;

namespace {

constexpr int kMaxDepth = 3;

struct Writer {
  std::string out;
  size_t max_chars;
  bool full() const { return out.size() >= max_chars; }
};

// A string literal of at most the characters still allowed; dump() with the replace handler
// escapes it and turns a sequence cut by the truncation (or invalid in a GGUF string) into U+FFFD.
void write_string(Writer& w, const std::string& s) {
  const size_t room = w.max_chars > w.out.size() ? w.max_chars - w.out.size() : 0;
  const bool cut = s.size() > room;
  std::string text = json(cut ? s.substr(0, room) : s).dump(-1, ' ', false, json::error_handler_t::replace);
  if (cut) text.insert(text.size() - 1, "...");
  w.out += text;
}

// Recursion is bounded by kMaxDepth, whatever the value's own depth.
void write_value(Writer& w, const json& value, int depth) {
  if (value.is_string()) return write_string(w, value.get_ref<const std::string&>());
  if (!value.is_structured()) {
    w.out += value.dump();  // numbers, booleans, null: short, and dump() does not recurse on them
    return;
  }
  const bool array = value.is_array();
  w.out += array ? '[' : '{';
  if (depth >= kMaxDepth && !value.empty()) {
    w.out += "...";
  } else {
    bool first = true;
    for (auto it = value.begin(); it != value.end(); ++it) {
      if (!first) w.out += ',';
      first = false;
      if (w.full()) {
        w.out += "...";
        break;
      }
      if (!array) {
        write_string(w, it.key());
        w.out += ':';
      }
      write_value(w, *it, depth + 1);
    }
  }
  w.out += array ? ']' : '}';
}

}  // namespace

std::string json_text(const json& value, size_t max_chars) {
  Writer w{{}, max_chars};
  write_value(w, value, 0);
  return w.out;
}

std::string json_excerpt(const json& value, size_t max_chars) {
  if (value.is_null()) return "null";
  return std::string(value.type_name()) + " " + json_text(value, max_chars);
}

bool json_nested_deeper_than(const json& value, size_t limit) {
  // Each entry is a container being walked and the next child to visit; the stack's size is
  // the current depth.
  struct Frame {
    const json* container;
    json::const_iterator next;
  };
  if (!value.is_structured()) return false;
  std::vector<Frame> stack{{&value, value.begin()}};
  while (!stack.empty()) {
    if (stack.size() > limit) return true;
    Frame& top = stack.back();
    if (top.next == top.container->end()) {
      stack.pop_back();
      continue;
    }
    const json& child = *top.next++;
    if (child.is_structured()) stack.push_back({&child, child.begin()});
  }
  return false;
}

std::string json_parse_error_text(const std::exception& error) {
  const std::string message = error.what();
  const size_t at = message.find("; last read: '");
  if (at == std::string::npos) return message;
  // The quoted token runs to the closing quote before "; expected ...", or to the end.
  const size_t expected = message.rfind("'; expected ");
  return message.substr(0, at) + (expected != std::string::npos && expected > at ? message.substr(expected + 1) : "");
}

}  // namespace eaglevk::loader
