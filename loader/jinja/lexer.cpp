#include "loader/jinja/lexer.h"

#include <cerrno>
#include <cstdlib>

#include <eaglevk/error.h>

#include "loader/pretokenize.h"

namespace eaglevk::loader::jinja {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }

// Jinja takes Python identifiers, which may hold any Unicode letter. The letters of the Latin,
// Greek, Cyrillic and CJK blocks are read as such; any other non-ASCII character in a tag is
// refused, as one that eaglevk does not read (Jinja may or may not take it).
bool is_name_code_point(char32_t c) {
  return c == 0xAA || c == 0xB5 || c == 0xBA || (c >= 0xC0 && c <= 0x2FF && c != 0xD7 && c != 0xF7) ||
         (c >= 0x388 && c <= 0x3FF && c != 0x3F6) || (c >= 0x400 && c <= 0x481) || (c >= 0x48A && c <= 0x4FF) ||
         (c >= 0x4E00 && c <= 0x9FFF);
}

// Bytes of the name character at text[pos], or 0 when there is none there.
size_t name_char_length(std::string_view text, size_t pos, bool first) {
  const char c = text[pos];
  if (is_name_start(c) || (!first && c >= '0' && c <= '9')) return 1;
  if (static_cast<unsigned char>(c) < 0x80) return 0;
  size_t n;
  return is_name_code_point(decode_code_point(text, pos, &n)) ? n : 0;
}

// True when `text` is one or more Python whitespace characters (Jinja's `\s+` full match).
bool all_space(std::string_view text) { return !text.empty() && python_lstrip(text).empty(); }

// Length of the Python whitespace that starts `text` (Jinja's `\s*` after a `-` tag end).
size_t leading_space(std::string_view text) { return text.size() - python_lstrip(text).size(); }

void append_utf8(std::string& out, uint32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

int hex_value(char c) {
  if (is_digit(c)) return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A string literal's body with Python's unicode-escape rules, which Jinja applies to it.
std::string unescape(std::string_view body, int line) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] != '\\' || i + 1 == body.size()) {
      out += body[i];
      continue;
    }
    const char c = body[++i];
    switch (c) {
      case '\n': break;  // a backslash at the end of a line joins the lines
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'v': out += '\v'; break;
      case 'x':
      case 'u':
      case 'U': {
        const size_t digits = c == 'x' ? 2 : c == 'u' ? 4 : 8;
        uint32_t code = 0;
        for (size_t k = 0; k < digits; ++k) {
          const int h = i + 1 + k < body.size() ? hex_value(body[i + 1 + k]) : -1;
          if (h < 0) fail("chat template line {}: a string literal has a truncated \\{} escape", line, c);
          code = code * 16 + static_cast<uint32_t>(h);
        }
        if (code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF))
          fail("chat template line {}: a string literal escapes U+{:X}, which is not a character UTF-8 can hold", line, code);
        append_utf8(out, code);
        i += digits;
        break;
      }
      case 'N': fail("chat template line {}: a string literal uses a \\N{{...}} escape, which eaglevk does not read", line);
      default:
        if (c >= '0' && c <= '7') {
          uint32_t code = 0;
          size_t k = 0;
          for (; k < 3 && i + k < body.size() && body[i + k] >= '0' && body[i + k] <= '7'; ++k) code = code * 8 + (body[i + k] - '0');
          append_utf8(out, code);
          i += k - 1;
        } else if (static_cast<unsigned char>(c) >= 0x80) {
          // Jinja turns non-ASCII into \xe9 / \u2014 / \U0001f44b before unescaping, so a
          // backslash in front of one escapes that backslash: the text "\u2014" comes out.
          size_t n;
          const auto code = static_cast<uint32_t>(decode_code_point(body, i, &n));
          out += code <= 0xFF ? fmt::format("\\x{:02x}", code)
                              : code <= 0xFFFF ? fmt::format("\\u{:04x}", code) : fmt::format("\\U{:08x}", code);
          i += n - 1;
        } else {
          out += '\\';  // Python keeps an unknown escape as written
          out += c;
        }
    }
  }
  return out;
}

struct Lexer {
  std::string source;
  std::vector<Token> tokens;
  size_t pos = 0;
  int line = 1;

  void push(Token::Type type, std::string text, int at_line) {
    Token t;
    t.type = type;
    t.text = std::move(text);
    t.line = at_line;
    tokens.push_back(std::move(t));
  }

  void advance(size_t n) {
    for (size_t i = 0; i < n && pos < source.size(); ++i, ++pos) line += source[pos] == '\n';
  }

  // The text between tags, then the next tag; returns false at the end of the source.
  bool lex_data(bool line_starting) {
    const size_t start = source.find('{', pos);
    size_t tag = start;
    while (tag != std::string::npos) {
      if (tag + 1 < source.size() && (source[tag + 1] == '{' || source[tag + 1] == '%' || source[tag + 1] == '#')) break;
      tag = source.find('{', tag + 1);
    }
    if (tag == std::string::npos) {
      if (pos < source.size()) push(Token::Type::Data, source.substr(pos), line);
      advance(source.size() - pos);
      return false;
    }
    std::string text = source.substr(pos, tag - pos);
    const char kind = source[tag + 1];
    const char sign = tag + 2 < source.size() && (source[tag + 2] == '-' || source[tag + 2] == '+') ? source[tag + 2] : 0;
    if (sign == '-') {
      text = std::string(python_rstrip(text));
    } else if (sign != '+' && kind != '{') {
      // lstrip_blocks: the spaces between a line's start and a block or comment tag go.
      const size_t line_start = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
      if ((line_start > 0 || line_starting) && all_space(std::string_view(text).substr(line_start)))
        text.resize(line_start);
    }
    if (!text.empty()) push(Token::Type::Data, text, line);
    advance(tag - pos + 2 + (sign ? 1 : 0));
    return true;
  }

  // After "{#": up to the comment's end; returns whether that end finished a line.
  bool lex_comment() {
    const int start_line = line;
    for (size_t p = pos; p + 1 < source.size(); ++p) {
      if (source[p] == '+' && source.compare(p + 1, 2, "#}") == 0) {
        advance(p + 3 - pos);
        return false;
      }
      if (source[p] == '-' && source.compare(p + 1, 2, "#}") == 0) {
        advance(p + 3 - pos);
        const size_t n = leading_space(std::string_view(source).substr(pos));
        advance(n);
        return n > 0 && source[pos - 1] == '\n';
      }
      if (source[p] == '#' && source[p + 1] == '}') {
        advance(p + 2 - pos);
        if (pos < source.size() && source[pos] == '\n') {  // trim_blocks
          advance(1);
          return true;
        }
        return false;
      }
    }
    fail("chat template line {}: a comment opened with {{# is never closed", start_line);
  }

  // After "{{" or "{%": the tag's tokens and its end; returns whether that end finished a line.
  bool lex_tag(bool block) {
    const int start_line = line;
    push(block ? Token::Type::BlockBegin : Token::Type::VarBegin, "", line);
    const char close = block ? '%' : '}';
    std::vector<char> brackets;
    while (true) {
      while (pos < source.size() && is_space(source[pos])) advance(1);
      if (pos >= source.size())
        fail("chat template line {}: a {} tag is never closed", start_line, block ? "{%" : "{{");
      const std::string_view rest = std::string_view(source).substr(pos);
      if (brackets.empty()) {
        const bool minus = rest.size() >= 3 && rest[0] == '-' && rest[1] == close && rest[2] == '}';
        const bool plus = block && rest.size() >= 3 && rest[0] == '+' && rest[1] == close && rest[2] == '}';
        const bool plain = rest.size() >= 2 && rest[0] == close && rest[1] == '}';
        if (minus || plus || plain) {
          push(block ? Token::Type::BlockEnd : Token::Type::VarEnd, "", line);
          advance(plain ? 2 : 3);
          if (minus) {
            const size_t n = leading_space(std::string_view(source).substr(pos));
            advance(n);
            return n > 0 && source[pos - 1] == '\n';
          }
          if (plain && block && pos < source.size() && source[pos] == '\n') {  // trim_blocks
            advance(1);
            return true;
          }
          return false;
        }
      }
      lex_expression_token(brackets, start_line);
    }
  }

  void lex_expression_token(std::vector<char>& brackets, int tag_line) {
    const char c = source[pos];
    if (is_digit(c)) {
      size_t end = pos;
      while (end < source.size() && (is_digit(source[end]) || source[end] == '_')) ++end;
      bool is_float = false;
      if (end + 1 < source.size() && source[end] == '.' && is_digit(source[end + 1])) {
        is_float = true;
        for (++end; end < source.size() && (is_digit(source[end]) || source[end] == '_');) ++end;
      }
      if (end < source.size() && (source[end] == 'e' || source[end] == 'E')) {
        size_t e = end + 1;
        if (e < source.size() && (source[e] == '+' || source[e] == '-')) ++e;
        if (e < source.size() && is_digit(source[e])) {
          is_float = true;
          for (end = e; end < source.size() && (is_digit(source[end]) || source[end] == '_');) ++end;
        }
      }
      std::string digits;
      for (size_t k = pos; k < end; ++k)
        if (source[k] != '_') digits += source[k];
      Token t;
      t.line = line;
      t.text = source.substr(pos, end - pos);
      if (is_float) {
        t.type = Token::Type::Float;
        t.real = std::strtod(digits.c_str(), nullptr);
      } else {
        t.type = Token::Type::Int;
        errno = 0;
        const long long v = std::strtoll(digits.c_str(), nullptr, 10);
        if (errno == ERANGE) fail("chat template line {}: the integer {} is too large", line, t.text);
        t.integer = v;
      }
      tokens.push_back(std::move(t));
      advance(end - pos);
      return;
    }
    if (name_char_length(source, pos, true)) {
      size_t end = pos;
      while (end < source.size())
        if (const size_t n = name_char_length(source, end, end == pos)) end += n;
        else break;
      push(Token::Type::Name, source.substr(pos, end - pos), line);
      advance(end - pos);
      return;
    }
    if (c == '\'' || c == '"') {
      size_t end = pos + 1;
      while (end < source.size() && source[end] != c) end += source[end] == '\\' ? 2 : 1;
      if (end >= source.size()) fail("chat template line {}: a string literal is never closed", line);
      push(Token::Type::String, unescape(std::string_view(source).substr(pos + 1, end - pos - 1), line), line);
      advance(end + 1 - pos);
      return;
    }
    static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
    for (std::string_view op : kTwo)
      if (source.compare(pos, 2, op) == 0) {
        push(Token::Type::Op, std::string(op), line);
        advance(2);
        return;
      }
    if (static_cast<unsigned char>(c) >= 0x80) {
      size_t n;
      const char32_t cp = decode_code_point(source, pos, &n);
      fail("chat template line {}: the character U+{:04X} inside a tag (opened on line {}) is one eaglevk does not read",
           line, static_cast<uint32_t>(cp), tag_line);
    }
    if (std::string_view("+-*/%~[](){}<>=.:|,;").find(c) == std::string_view::npos)
      fail("chat template line {}: unexpected character '{}' inside a tag (opened on line {})", line,
           c >= 0x20 ? std::string(1, c) : fmt::format("\\x{:02x}", static_cast<unsigned char>(c)), tag_line);
    if (c == '(' || c == '[' || c == '{') brackets.push_back(c);
    if (c == ')' || c == ']' || c == '}') {
      const char open = c == ')' ? '(' : c == ']' ? '[' : '{';
      if (brackets.empty() || brackets.back() != open)
        fail("chat template line {}: '{}' does not close an open bracket", line, c);
      brackets.pop_back();
    }
    push(Token::Type::Op, std::string(1, c), line);
    advance(1);
  }
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) {
  Lexer lx;
  // Newlines as Jinja reads them: every \r\n and \r becomes \n, and one final newline goes.
  lx.source.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      lx.source += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      lx.source += source[i];
    }
  }
  if (!lx.source.empty() && lx.source.back() == '\n') lx.source.pop_back();

  bool line_starting = true;
  while (lx.lex_data(line_starting)) {
    const char kind = lx.source[lx.pos - 1] == '-' || lx.source[lx.pos - 1] == '+' ? lx.source[lx.pos - 2] : lx.source[lx.pos - 1];
    if (kind == '#') line_starting = lx.lex_comment();
    else line_starting = lx.lex_tag(kind == '%');
  }
  lx.push(Token::Type::End, "", lx.line);
  return std::move(lx.tokens);
}

}  // namespace eaglevk::loader::jinja
