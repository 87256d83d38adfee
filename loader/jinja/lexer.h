#pragma once
// Splits a chat template into text and the tokens of its {{ }} and {% %} tags, with the
// whitespace rules transformers renders under: trim_blocks and lstrip_blocks on, `-` and `+`
// at a tag's edge, keep_trailing_newline off (one final newline of the template is dropped),
// "\r\n" and "\r" read as "\n". Comments are dropped here.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace eaglevk::loader::jinja {

struct Token {
  enum class Type { Data, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, End };
  Type type = Type::End;
  std::string text;  // Data: the text; Name/Op: as written; String: the value, escapes decoded
  int64_t integer = 0;
  double real = 0;
  int line = 1;
};

// Throws eaglevk::Error naming the line for an unclosed tag, string or bracket.
std::vector<Token> tokenize(std::string_view source);

}  // namespace eaglevk::loader::jinja
