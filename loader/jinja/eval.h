#pragma once
// Renders a parsed chat template. A template is data from a checkpoint, so the renderer bounds
// what one can make it do: a step count (every statement, expression and loop turn), the size
// of the output and of any one string or list built, and the depth of macro calls. Past a
// bound it stops with an eaglevk::Error naming the bound, never hangs or exhausts memory.
#include <cstddef>
#include <ctime>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "loader/jinja/ast.h"

namespace eaglevk::loader::jinja {

// The defaults hold any real chat (a 16 MiB message is millions of tokens) and bound what a
// template can hold at once: a value of max_value_bytes per macro call level at most.
struct Limits {
  size_t max_steps = 2'000'000;
  size_t max_output_bytes = size_t{64} << 20;
  size_t max_value_bytes = size_t{16} << 20;
  int max_call_depth = 32;
};

// `variables` are the template's globals (messages, bos_token, add_generation_prompt, ...);
// Jinja's own globals and transformers' raise_exception and strftime_now (at time `now`) are
// added beneath them.
std::string render(const Program& program, const std::vector<std::pair<std::string, Value>>& variables,
                   const std::tm& now, const Limits& limits = {});

}  // namespace eaglevk::loader::jinja
