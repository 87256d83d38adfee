// libFuzzer entry for the Jinja engine's bounds (tests/fuzz/run_fuzz.sh jinja_grammar): every
// input is read as choices in a small grammar of chat templates, so that every input is a
// template that parses, and mutation explores what a template does when it runs: loops over
// ranges and strings, recursive macros, namespace attributes rebuilt in loops (deeper lists,
// longer strings, repeated lists, dicts of them), chains of operators and filters, subscripts,
// slices and comparisons of whatever was built. The render runs under small budgets
// (kLimits) and must end in output or an eaglevk::Error: never a crash, a stack overflow, a
// sanitizer report, a leak, or more memory than libFuzzer's -rss_limit_mb (run_fuzz.sh sets it).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include <eaglevk/error.h>

#include "loader/chat_template.h"
#include "loader/pretokenize.h"

using namespace eaglevk::loader;

namespace {

// Choices read from the input, one byte each; 0 once it is used up, so that every input ends.
struct Choices {
  const uint8_t* data;
  size_t size;
  size_t pos = 0;
  size_t pick(size_t n) { return pos < size ? data[pos++] % n : 0; }
  bool more() const { return pos < size; }
};

// Numbers that reach the bounds: small counts, Jinja's range limit, the 64-bit edges, a string
// of 4 MB (a few of them fill the memory budget; 16 MB ones, the largest a value may be, would
// leave less room under -rss_limit_mb for ASan's quarantine of freed memory).
constexpr std::string_view kNumbers[] = {"0", "1", "2", "3", "7", "64", "300", "1000", "100000", "100001", "4000000",
                                         "2**62", "-1", "9223372036854775807", "(-9223372036854775807 - 1)"};
constexpr std::string_view kAttrs[] = {"a", "b", "l", "d"};
constexpr std::string_view kFilters[] = {"list", "length", "tojson", "trim", "reverse", "unique", "first", "last",
                                         "string", "join(',')", "map('string')", "items", "sum", "max", "upper",
                                         "replace('a', 'aa')", "select", "default('x')", "tojson(indent=2)"};
constexpr std::string_view kBinary[] = {" + ", " ~ ", " * ", " == ", " != ", " < ", " in ", " // ", " % ", " - ", " and ",
                                        " or "};
constexpr std::string_view kMethods[] = {".split()", ".split('a')", ".strip('ab')", ".upper()", ".startswith('a')",
                                         ".find('b')", ".replace('a', 'bb')", ".items()", ".keys()", ".get('k')"};

struct Generator {
  Choices in;
  std::string out;
  int loop_vars = 0;  // i0, i1, ... in scope
  int macros = 0;     // m0, m1, ... defined so far

  void atom() {
    switch (in.pick(10)) {
      case 0: out += "ns."; out += kAttrs[in.pick(std::size(kAttrs))]; return;
      case 1: out += kNumbers[in.pick(std::size(kNumbers))]; return;
      case 2: out += in.pick(2) ? "'ab'" : "'é x '"; return;
      case 3: out += loop_vars ? "i" + std::to_string(in.pick(loop_vars)) : std::string("messages"); return;
      case 4: out += "messages"; return;
      case 5: out += "range("; out += kNumbers[in.pick(std::size(kNumbers))]; out += ")"; return;
      case 6: out += "loop.index"; return;
      case 7: out += "'x' * "; out += kNumbers[in.pick(std::size(kNumbers))]; return;
      case 8: out += "none"; return;
      default: out += "[]"; return;
    }
  }

  void expr(int depth) {
    if (depth <= 0 || !in.more()) return atom();
    switch (in.pick(12)) {
      case 0: case 1: atom(); return;
      case 2: out += "("; expr(depth - 1); out += kBinary[in.pick(std::size(kBinary))]; expr(depth - 1); out += ")"; return;
      case 3: out += "("; expr(depth - 1); out += " | "; out += kFilters[in.pick(std::size(kFilters))]; out += ")"; return;
      case 4: out += "["; expr(depth - 1); out += ", "; expr(depth - 1); out += "]"; return;
      case 5: out += "{'k': "; expr(depth - 1); out += "}"; return;
      case 6: out += "("; expr(depth - 1); out += ")["; expr(depth - 1); out += "]"; return;
      case 7: out += "("; expr(depth - 1); out += ")[" + std::string(kNumbers[in.pick(std::size(kNumbers))]) + "::" +
                     std::string(in.pick(2) ? "-" : "") + std::string(kNumbers[in.pick(std::size(kNumbers))]) + "]";
        return;
      case 8:
        if (macros) {
          out += "m" + std::to_string(in.pick(macros)) + "(";
          expr(depth - 1);
          out += ")";
        } else {
          atom();
        }
        return;
      case 9: out += "("; expr(depth - 1); out += ")"; out += kMethods[in.pick(std::size(kMethods))]; return;
      case 10: out += "("; expr(depth - 1); out += " if "; expr(depth - 1); out += " else "; expr(depth - 1); out += ")"; return;
      default:  // a chain of one operator, as long as the input says
        out += "(";
        expr(depth - 1);
        for (size_t n = 1 + in.pick(64) * in.pick(8); n > 0; --n) {
          out += kBinary[in.pick(2)];
          atom();
        }
        out += ")";
        return;
    }
  }

  void statements(int depth) {
    for (size_t n = 1 + in.pick(4); n > 0 && in.more(); --n) statement(depth);
  }

  void statement(int depth) {
    switch (depth <= 0 ? in.pick(3) : in.pick(8)) {
      case 0: out += "{{ "; expr(3); out += " }}"; return;
      case 1: out += "{% set ns."; out += kAttrs[in.pick(std::size(kAttrs))]; out += " = "; expr(3); out += " %}"; return;
      case 2:  // the deepening step: wrap or extend an attribute by itself
        out += "{% set ns.l = " + std::string(in.pick(2) ? "[ns.l]" : "ns.l + [ns.l]") + " %}";
        return;
      case 3: {
        const int var = loop_vars++;
        out += "{% for i" + std::to_string(var) + " in ";
        expr(2);
        out += " %}";
        statements(depth - 1);
        out += "{% endfor %}";
        --loop_vars;
        return;
      }
      case 4:
        out += "{% if ";
        expr(2);
        out += " %}";
        statements(depth - 1);
        out += "{% else %}";
        statements(depth - 1);
        out += "{% endif %}";
        return;
      case 5: out += "{% set s %}"; statements(depth - 1); out += "{% endset %}{{ s | length }}"; return;
      case 6: out += "{% if ns.l is defined %}{% set ns.b = ns.b * 2 %}{% endif %}"; return;
      default: out += "text\n"; return;
    }
  }

  // Macros first (each may call itself and the ones before it), then the body.
  std::string generate() {
    out = "{% set ns = namespace(a='ab', b=[1], l=[], d={}) %}";
    for (size_t n = in.pick(3); n > 0; --n) {
      out += "{% macro m" + std::to_string(macros) + "(x) %}";
      ++macros;  // visible in its own body: recursion
      statements(2);
      out += "{{ x }}{% endmacro %}";
    }
    while (in.more()) statement(4);
    return out;
  }
};

// Small enough that every input ends well inside libFuzzer's 10 s timeout under ASan, and the
// memory budget well inside -rss_limit_mb.
ChatRenderInput limits() {
  ChatRenderInput in;
  in.max_steps = 200'000;
  in.max_work = size_t{1} << 26;
  in.max_memory_bytes = size_t{32} << 20;
  in.now = std::tm{};
  return in;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Generator g{{data, size}};
  const std::string jinja = g.generate();
  try {
    const ChatTemplate t = ChatTemplate::from_string(jinja, "<s>");
    const std::string rendered = t.render(std::vector<ChatMessage>{{"user", "hi"}, {"assistant", "ab"}}, limits());
    if (first_invalid_utf8(rendered) != std::string_view::npos) std::abort();
  } catch (const eaglevk::Error&) {
  }
  return 0;
}
