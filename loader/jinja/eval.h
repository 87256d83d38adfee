#pragma once
// Renders a parsed chat template. A template is data from a checkpoint, so the renderer bounds
// what one can make it do (budget.h lists the bounds). Past a bound it stops with an
// eaglevk::Error naming the template, the line and the bound, never hangs, overflows the stack
// or exhausts memory.
#include <cstddef>
#include <ctime>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "loader/jinja/ast.h"
#include "loader/jinja/budget.h"

namespace eaglevk::loader::jinja {

// `variables` are the template's globals (messages, bos_token, add_generation_prompt, ...);
// Jinja's own globals and transformers' raise_exception and strftime_now (at time `now`) are
// added beneath them. `name` is where the template came from ("tokenizer_config.json"), for
// errors; empty when unknown.
std::string render(const Program& program, const std::vector<std::pair<std::string, Value>>& variables,
                   const std::tm& now, const Limits& limits = {}, std::string_view name = {});

}  // namespace eaglevk::loader::jinja
