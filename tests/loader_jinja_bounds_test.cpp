// The Jinja engine bounded by construction (issue 56): a hostile chat template that builds
// deep values in a loop, chains 300,000 operators, asks for huge ranges, turns a long string
// into a list, grows macro outputs or indexes a long string in a loop is refused with an error
// naming the bound, within the render's memory budget and without overflowing the stack; what
// stays inside the bounds still renders as Jinja (Python) would. Each case also checks that the
// process never grew past 1 GiB (ru_maxrss; kMaxRssKiB).
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include <eaglevk/error.h>

#include "loader/chat_template.h"

namespace fs = std::filesystem;
using eaglevk::loader::ChatMessage;
using eaglevk::loader::ChatRenderInput;
using eaglevk::loader::ChatTemplate;

namespace {

// 1 GiB; under AddressSanitizer (tests/run_sanitized.sh) 2 GiB, for its quarantine of freed
// memory (256 MB) and its shadow. Without the bounds these templates hold several gigabytes.
#if defined(__SANITIZE_ADDRESS__)
constexpr long kMaxRssKiB = 2L << 20;
#else
constexpr long kMaxRssKiB = 1L << 20;
#endif

long peak_rss_kib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

std::string render(std::string_view jinja, const ChatRenderInput& input = {},
                   const std::vector<ChatMessage>& messages = {{"user", "x"}}) {
  return ChatTemplate::from_string(jinja, "<s>").render(messages, input);
}

std::string render_error(std::string_view jinja, const std::vector<ChatMessage>& messages = {{"user", "x"}}) {
  try {
    render(jinja, {}, messages);
  } catch (const eaglevk::Error& e) {
    return e.what();
  }
  return "(rendered)";
}

// `count` copies of `term` joined by `op`.
std::string chain(const std::string& term, const std::string& op, size_t count) {
  std::string out = term;
  for (size_t i = 1; i < count; ++i) out += op + term;
  return out;
}

void expect_refused(const std::string& jinja, const std::string& bound) {
  const std::string what = render_error(jinja);
  EXPECT_NE(what.find(bound), std::string::npos) << jinja.substr(0, 120) << "\n  -> " << what;
  EXPECT_LT(peak_rss_kib(), kMaxRssKiB) << jinja.substr(0, 120);
}

}  // namespace

// A list nested by a loop: 256 levels print, compare and free; the next is refused.
TEST(JinjaBounds, DeepValuesAreCappedAndWorkBelowTheCap) {
  const std::string nest = "{% set ns = namespace(x=[], y=[]) %}{% for i in range(N) %}{% set ns.x = [ns.x] %}"
                           "{% set ns.y = [ns.y] %}{% endfor %}";
  const auto with = [&](int n, const std::string& tail) {
    std::string t = nest;
    t.replace(t.find('N'), 1, std::to_string(n));
    return t + tail;
  };
  // [] wrapped 256 times is Python's '[' * 257 + ']' * 257; equal to its twin, in itself.
  EXPECT_EQ(render(with(256, "{{ ns.x }}")), std::string(257, '[') + std::string(257, ']'));
  // (255 here: [ns.y] is one deeper.)
  EXPECT_EQ(render(with(255, "{{ ns.x == ns.y }} {{ ns.x in [ns.y] }} {{ ns.x | tojson | length }}")),
            "True True " + std::to_string(2 * 256));
  // 300,000 levels, as the template asked: refused at the 257th.
  expect_refused("{% set ns = namespace(x=[]) %}{% for i in range(1000) %}{% for j in range(300) %}"
                 "{% set ns.x = [ns.x] %}{% endfor %}{% endfor %}{{ ns.x }}",
                 "line 1: a value nests deeper than 256 levels");
  expect_refused("{% set ns = namespace(x={}) %}{% for i in range(100000) %}{% set ns.x = {'a': ns.x} %}{% endfor %}",
                 "a value nests deeper than 256 levels");
  // Bound methods hold their receiver: as deep as a list would be.
  expect_refused("{% set ns = namespace(x={}) %}{% for i in range(100000) %}{% set ns.x = {'a': ns.x}.items %}"
                 "{% endfor %}",
                 "a value nests deeper than 256 levels");
  // A namespace in a namespace could nest without bound, or hold itself.
  expect_refused("{% set h = namespace(n=none) %}{% for i in range(100000) %}{% set h.n = namespace(n=h.n) %}{% endfor %}",
                 "a namespace holding a namespace");
  expect_refused("{% set h = namespace(n=none) %}{% set h.n = [h] %}", "a namespace holding a namespace");
}

// Chains of 300,000 operators or filters are built by a loop in the parser; their height is
// capped (evaluating and freeing them recurse once per level).
TEST(JinjaBounds, LongChainsAreRefusedAndShortOnesRender) {
  expect_refused("{{ " + chain("1", " + ", 300000) + " }}", "an expression nests deeper than 256 levels");
  expect_refused("{{ " + chain("'a'", " ~ ", 300000) + " }}", "an expression nests deeper than 256 levels");
  expect_refused("{{ 'a'" + chain("", " | trim", 300000) + " }}", "an expression nests deeper than 256 levels");
  expect_refused("{{ messages" + chain("", "[0]", 300000) + " }}", "an expression nests deeper than 256 levels");
  expect_refused("{{ x" + chain("", " is defined", 300000) + " }}", "an expression nests deeper than 256 levels");
  // 200 terms: 200, as Python sums them.
  EXPECT_EQ(render("{{ " + chain("1", " + ", 200) + " }}"), "200");
  EXPECT_EQ(render("{{ ' a '" + chain("", " | trim", 200) + " }}"), "a");
  // Each macro level recurses 250 operands deep before it calls the next: the evaluation's own
  // nesting bound stops it at the third level, long before the 32 macro calls allowed.
  expect_refused("{% macro f(n) %}{{ f(n) + " + chain("n", " + ", 250) + " }}{% endmacro %}{{ f(1) }}",
                 "evaluation nests deeper than 512 levels");
}

// range is sized exactly (no rounding near 2**63, no stepping past the stop) and refused past
// Jinja's 100,000 items before anything is made.
TEST(JinjaBounds, RangeIsSizedExactly) {
  expect_refused("{% for i in range(2**62) %}{% endfor %}", "range() of more than 100000 items");
  expect_refused("{{ range(-9223372036854775807 - 1, 9223372036854775807) | length }}", "range() of more than 100000");
  expect_refused("{{ range(9223372036854775807, -9223372036854775807 - 1, -1) | length }}", "range() of more than 100000");
  // Python: list(range(2**63 - 2, 2**63 - 1, 2)) == [2**63 - 2] (the next would pass the stop).
  EXPECT_EQ(render("{{ range(9223372036854775806, 9223372036854775807, 2) | list }}"), "[9223372036854775806]");
  // Python: range(-2**63, 2**63 - 1, 2**62) is -2**63, -2**62, 0, 2**62.
  EXPECT_EQ(render("{{ range(-9223372036854775807 - 1, 9223372036854775807, 4611686018427387904) | list }}"),
            "[-9223372036854775808, -4611686018427387904, 0, 4611686018427387904]");
  EXPECT_EQ(render("{{ range(5, -9223372036854775807 - 1, -9223372036854775807) | list }}"),
            "[5, -9223372036854775802]");
  // Integer arithmetic is checked, and Python's answers where it stays in 64 bits.
  expect_refused("{{ 9223372036854775807 + 1 }}", "integer overflow");
  expect_refused("{{ (-9223372036854775807 - 1) // -1 }}", "integer overflow");
  expect_refused("{{ 3037000500 * 3037000500 }}", "integer overflow");
  EXPECT_EQ(render("{{ (-9223372036854775807 - 1) is divisibleby(-1) }}"), "True");
  // Slices with steps past 2**62: Python's 'abc'[2::2**63-1] == 'c', [1, 2, 3][::-(2**63-1)] == [3].
  EXPECT_EQ(render("{{ 'abc'[2::9223372036854775807] }} {{ [1, 2, 3][::-9223372036854775807] }}"), "c [3]");
  // By code point: 'héllo'[::-2] == 'olh', 'héllo'[1] == 'é', 'héllo'[-4:3] == 'él'.
  EXPECT_EQ(render("{{ 'héllo'[::-2] }} {{ 'héllo'[1] }} {{ 'héllo'[-4:3] }}"), "olh é él");
}

// Memory: what one render holds at once is capped, whatever holds it.
TEST(JinjaBounds, TheRenderMemoryBudgetHolds) {
  // A 10-million-character string as a list: ten million values.
  expect_refused("{% set s = 'x' * 10000000 %}{{ s | list | length }}", "the template memory budget");
  expect_refused("{% set s = 'x' * 10000000 %}{% for c in s %}{% endfor %}", "the template memory budget");
  // Macros whose outputs are held while they call each other: 16 MB a level.
  expect_refused("{% macro m(n) %}{{ 'x' * 16000000 }}{{ m(n + 1) }}{% endmacro %}{{ m(0) }}",
                 "the render holds more than 128 MiB (the template memory budget)");
  // Macros returning 64 MB each (four 16 MB writes), kept side by side.
  expect_refused("{% macro big() %}{% for i in range(4) %}{{ 'x' * 16000000 }}{% endfor %}{% endmacro %}"
                 "{{ [big(), big(), big(), big()] | length }}",
                 "the render holds more than 128 MiB (the template memory budget)");
  // A list literal of copies of a long string (no `+`, so no per-list cap sees it).
  expect_refused("{% set s = 'x' * 8000000 %}{% set l = [" + chain("s", ", ", 64) + "] %}", "the template memory budget");
  // A dict keyed by a long string, copied by dict() in a loop: the keys count.
  expect_refused("{% set ns = namespace(l=[]) %}{% set d = {'x' * 8000000: 1} %}{% for i in range(100) %}"
                 "{% set ns.l = ns.l + [dict(d)] %}{% endfor %}",
                 "the template memory budget");
  // A render after a refused one starts with its whole budget.
  EXPECT_EQ(render("{{ ('x' * 1000000) | length }}"), "1000000");
}

// Work inside one step is counted: indexing, comparing and printing walk their input.
TEST(JinjaBounds, TheRenderWorkBudgetHolds) {
  expect_refused("{% set s = 'x' * 16000000 %}{% for i in range(100000) %}{{ s[15999999] }}{% endfor %}",
                 "the template work budget");
  expect_refused("{% set s = 'x' * 16000000 %}{% for i in range(100000) %}{% if 'y' in s %}{% endif %}{% endfor %}",
                 "the template work budget");
  // A list holding itself twice per level is small but exponential to walk.
  expect_refused("{% set ns = namespace(x=[1], y=[1]) %}{% for i in range(60) %}{% set ns.x = [ns.x, ns.x] %}"
                 "{% set ns.y = [ns.y, ns.y] %}{% endfor %}{{ ns.x == ns.y }}",
                 "the template work budget");
  expect_refused("{% set ns = namespace(x=[1]) %}{% for i in range(60) %}{% set ns.x = [ns.x, ns.x] %}{% endfor %}"
                 "{{ ns.x }}",
                 "grows past");
  expect_refused("{% set ns = namespace(x=[1]) %}{% for i in range(60) %}{% set ns.x = [ns.x, ns.x] %}{% endfor %}"
                 "{{ ns.x | tojson }}",
                 "tojson output exceeds");
}

// Errors name the template's file and the line it was at, and the bound.
TEST(JinjaBounds, ErrorsNameTheFileTheLineAndTheBound) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("eaglevk_jinja_bounds_{}", ::getpid());
  fs::create_directories(dir);
  const std::string jinja = "{{- bos_token -}}\n{%- set s = 'x' * 10000000 -%}\n{%- set parts = s | list -%}\n";
  std::ofstream(dir / "tokenizer_config.json", std::ios::binary)
      << nlohmann::json{{"bos_token", "<s>"}, {"chat_template", jinja}}.dump();
  std::string what;
  try {
    ChatTemplate::load(dir).render(std::vector<ChatMessage>{{"user", "x"}}, true);
  } catch (const eaglevk::Error& e) {
    what = e.what();
  }
  EXPECT_EQ(what, "chat template tokenizer_config.json line 3: the render holds more than 128 MiB (the template memory budget)");
  fs::remove_all(dir);
  // Without a file (from_string) the line is still named; the engine's own messages keep theirs.
  EXPECT_EQ(render_error("x\n{{ 1 // 0 }}"), "chat template line 2: integer division or modulo by zero");
  ChatRenderInput small;
  small.max_memory_bytes = size_t{1} << 20;
  try {
    render("{% set s = 'x' * 2000000 %}", small);
    ADD_FAILURE() << "rendered";
  } catch (const eaglevk::Error& e) {
    EXPECT_STREQ(e.what(), "chat template line 1: the render holds more than 1 MiB (the template memory budget)");
  }
}

// Mistral's role-alternation check compares two comparisons: Jinja parses (a == b) != (c == d)
// as one comparison of two parenthesized ones; only an unparenthesized chain is refused.
TEST(JinjaBounds, ParenthesizedComparisonsCompareAgain) {
  // Python: (1 == 1) != (2 == 3) is True != False, True; (1 == 1) == (2 == 2) is True.
  EXPECT_EQ(render("{{ (1 == 1) != (2 == 3) }} {{ (1 == 1) == (2 == 2) }} {{ (1 < 2) != (3 in [3]) }}"),
            "True True False");
  const std::string mistral =
      "{%- for message in messages %}"
      "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
      "{{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
      "{%- endif %}{{ message['role'] }};{%- endfor %}";
  EXPECT_EQ(render(mistral, {}, {{"user", "a"}, {"assistant", "b"}, {"user", "c"}}), "user;assistant;user;");
  EXPECT_NE(render_error(mistral, {{"user", "a"}, {"user", "b"}}).find("Conversation roles must alternate"),
            std::string::npos);
  // An unparenthesized chain is still refused by name (Python would read it as an `and`).
  EXPECT_NE(render_error("{{ 1 < 2 < 3 }}").find("chained comparisons"), std::string::npos);
  EXPECT_NE(render_error("{{ (1 == 1) != (2 == 3) == true }}").find("chained comparisons"), std::string::npos);
}
