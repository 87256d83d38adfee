#pragma once
// Jinja's grammar for the subset chat templates use: if/elif/else, for (with else, a filter
// condition, break and continue), set (also as a block and on a namespace attribute), macro,
// and expressions with Jinja's operator precedence. Anything else (include, import, extends,
// block, call, filter, with, raw, an unknown filter or test, ...) is refused by name with an
// eaglevk::Error: a template is rendered exactly or not at all.
#include <string_view>

#include "loader/jinja/ast.h"

namespace eaglevk::loader::jinja {

Program parse(std::string_view source);

}  // namespace eaglevk::loader::jinja
