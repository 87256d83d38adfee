#include "loader/jinja/parser.h"

#include <algorithm>

#include <eaglevk/error.h>

#include "loader/jinja/builtins.h"
#include "loader/jinja/lexer.h"

namespace eaglevk::loader::jinja {
namespace {

using T = Token::Type;

// Deeper nesting than this is refused: the parser and the evaluator recurse once per level,
// and a hostile template of "((((((..." must end in an error, not a stack overflow.
constexpr int kMaxDepth = 200;
// The tallest expression tree, however it is built (see attach). Real templates stay under 20.
constexpr int kMaxExprHeight = 256;

// Statements that Jinja has and chat templates do not need; named in the refusal.
constexpr std::string_view kRefusedStatements[] = {
    "include", "import", "from", "extends", "block", "call", "filter", "with", "autoescape", "raw",
    "do", "generation", "trans", "pluralize", "print", "endblock", "endcall", "endfilter", "endwith",
    "endautoescape", "endraw", "endgeneration", "endtrans"};

struct Parser {
  std::vector<Token> tokens;
  size_t pos = 0;
  int depth = 0;

  const Token& cur() const { return tokens[pos]; }
  const Token& next() { return tokens[pos++]; }
  bool at_op(std::string_view op) const { return cur().type == T::Op && cur().text == op; }
  bool at_name(std::string_view name) const { return cur().type == T::Name && cur().text == name; }

  [[noreturn]] void error(std::string_view what) const {
    fail("chat template line {}: {}", cur().line, what);
  }
  std::string describe(const Token& t) const {
    switch (t.type) {
      case T::Data: return "text";
      case T::VarBegin: return "'{{'";
      case T::VarEnd: return "'}}'";
      case T::BlockBegin: return "'{%'";
      case T::BlockEnd: return "'%}'";
      case T::String: return "a string";
      case T::Int:
      case T::Float: return "a number";
      case T::End: return "the end of the template";
      default: return "'" + t.text + "'";
    }
  }
  void expect_op(std::string_view op) {
    if (!at_op(op)) error(fmt::format("expected '{}', found {}", op, describe(cur())));
    ++pos;
  }
  std::string expect_name() {
    if (cur().type != T::Name) error(fmt::format("expected a name, found {}", describe(cur())));
    return next().text;
  }
  void expect(T type) {
    if (cur().type != type) error(fmt::format("expected {}, found {}", describe(Token{type, {}, 0, 0, 0}), describe(cur())));
    ++pos;
  }

  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& parser) : p(parser) {
      if (++p.depth > kMaxDepth) p.error(fmt::format("the template nests deeper than {} levels", kMaxDepth));
    }
    ~DepthGuard() { --p.depth; }
  };

  // Every child goes in through attach, which keeps each node's height (the longest path to a
  // leaf) and refuses a tree taller than kMaxExprHeight: evaluating and freeing an expression
  // recurse once per level, and `x + x + ... + x` or `x | trim | trim ...` builds its tree in a
  // loop, 300,000 levels tall for 300,000 terms, where the depth guard above does not see it.
  void grow(Expr& parent, const Expr& child) {
    parent.height = std::max(parent.height, child.height + 1);
    if (parent.height > kMaxExprHeight)
      error(fmt::format("an expression nests deeper than {} levels (operators, filters, calls or subscripts in a chain)",
                        kMaxExprHeight));
  }
  void attach(Expr& parent, ExprPtr child) {
    if (child) grow(parent, *child);
    parent.args.push_back(std::move(child));
  }

  ExprPtr node(Expr::Kind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }
  ExprPtr binary(std::string op, ExprPtr left, ExprPtr right, int line) {
    ExprPtr e = node(Expr::Kind::Binary, line);
    e->name = std::move(op);
    attach(*e, std::move(left));
    attach(*e, std::move(right));
    return e;
  }

  // ---- expressions, from the loosest binding in ----

  ExprPtr expression() {
    DepthGuard guard(*this);
    ExprPtr e = or_expr();
    while (at_name("if")) {
      const int line = next().line;
      ExprPtr cond = node(Expr::Kind::Cond, line);
      attach(*cond, or_expr());
      attach(*cond, std::move(e));
      if (at_name("else")) {
        ++pos;
        attach(*cond, expression());
      } else {
        attach(*cond, nullptr);
      }
      // args: condition, then-value, else-value
      e = std::move(cond);
    }
    return e;
  }
  ExprPtr or_expr() {
    ExprPtr e = and_expr();
    while (at_name("or")) {
      const int line = next().line;
      e = binary("or", std::move(e), and_expr(), line);
    }
    return e;
  }
  ExprPtr and_expr() {
    ExprPtr e = not_expr();
    while (at_name("and")) {
      const int line = next().line;
      e = binary("and", std::move(e), not_expr(), line);
    }
    return e;
  }
  ExprPtr not_expr() {
    if (at_name("not")) {
      DepthGuard guard(*this);
      ExprPtr e = node(Expr::Kind::Unary, next().line);
      e->name = "not";
      attach(*e, not_expr());
      return e;
    }
    return compare();
  }
  ExprPtr compare() {
    ExprPtr e = math1();
    bool compared = false;  // by an operator of this chain (a parenthesized comparison is an operand)
    while (true) {
      const int line = cur().line;
      std::string op;
      if (cur().type == T::Op && (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" ||
                                  cur().text == ">" || cur().text == ">=")) {
        op = next().text;
      } else if (at_name("in")) {
        ++pos;
        op = "in";
      } else if (at_name("not") && tokens[pos + 1].type == T::Name && tokens[pos + 1].text == "in") {
        pos += 2;
        op = "not in";
      } else {
        return e;
      }
      // Python chains a < b < c as (a < b) and (b < c); chat templates do not, and neither do we.
      // (a == b) != (c == d) is no chain: Mistral's role-alternation check compares two results.
      if (compared) error("chained comparisons (a < b < c) are not rendered by eaglevk");
      compared = true;
      e = binary(op, std::move(e), math1(), line);
    }
  }
  ExprPtr math1() {
    ExprPtr e = concat();
    while (at_op("+") || at_op("-")) {
      const Token& t = next();
      e = binary(t.text, std::move(e), concat(), t.line);
    }
    return e;
  }
  ExprPtr concat() {
    ExprPtr e = math2();
    while (at_op("~")) {
      const int line = next().line;
      e = binary("~", std::move(e), math2(), line);
    }
    return e;
  }
  ExprPtr math2() {
    ExprPtr e = power();
    while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
      const Token& t = next();
      e = binary(t.text, std::move(e), power(), t.line);
    }
    return e;
  }
  ExprPtr power() {
    ExprPtr e = unary(true);
    while (at_op("**")) {
      const int line = next().line;
      e = binary("**", std::move(e), unary(true), line);
    }
    return e;
  }
  ExprPtr unary(bool with_filter) {
    DepthGuard guard(*this);
    ExprPtr e;
    if (at_op("-") || at_op("+")) {
      const Token& t = next();
      e = node(Expr::Kind::Unary, t.line);
      e->name = t.text;
      attach(*e, unary(false));
    } else {
      e = postfix(primary());
    }
    return with_filter ? filters(std::move(e)) : std::move(e);
  }

  ExprPtr primary() {
    const Token& t = cur();
    switch (t.type) {
      case T::Name: {
        ++pos;
        ExprPtr e = node(Expr::Kind::Literal, t.line);
        if (t.text == "true" || t.text == "True") e->value = Value::from_bool(true);
        else if (t.text == "false" || t.text == "False") e->value = Value::from_bool(false);
        else if (t.text == "none" || t.text == "None") e->value = Value::none();
        else {
          e->kind = Expr::Kind::Name;
          e->name = t.text;
        }
        return e;
      }
      case T::String: {
        std::string s;
        const int line = t.line;
        while (cur().type == T::String) s += next().text;  // adjacent literals join, as in Python
        ExprPtr e = node(Expr::Kind::Literal, line);
        e->value = Value::from_string(std::move(s));
        return e;
      }
      case T::Int:
      case T::Float: {
        ++pos;
        ExprPtr e = node(Expr::Kind::Literal, t.line);
        e->value = t.type == T::Int ? Value::from_int(t.integer) : Value::from_float(t.real);
        return e;
      }
      case T::Op:
        if (t.text == "(") {
          ++pos;
          if (at_op(")")) {
            ++pos;
            return node(Expr::Kind::Tuple, t.line);
          }
          ExprPtr first = expression();
          if (at_op(")")) {
            ++pos;
            return first;
          }
          ExprPtr tuple = node(Expr::Kind::Tuple, t.line);
          attach(*tuple, std::move(first));
          while (at_op(",")) {
            ++pos;
            if (at_op(")")) break;
            attach(*tuple, expression());
          }
          expect_op(")");
          return tuple;
        }
        if (t.text == "[") {
          ++pos;
          ExprPtr list = node(Expr::Kind::List, t.line);
          while (!at_op("]")) {
            attach(*list, expression());
            if (!at_op(",")) break;
            ++pos;
          }
          expect_op("]");
          return list;
        }
        if (t.text == "{") {
          ++pos;
          ExprPtr dict = node(Expr::Kind::Dict, t.line);
          while (!at_op("}")) {
            attach(*dict, expression());
            expect_op(":");
            attach(*dict, expression());
            if (!at_op(",")) break;
            ++pos;
          }
          expect_op("}");
          return dict;
        }
        break;
      default: break;
    }
    error(fmt::format("expected an expression, found {}", describe(t)));
  }

  ExprPtr postfix(ExprPtr e) {
    while (true) {
      if (at_op(".")) {
        const int line = next().line;
        ExprPtr attr = node(Expr::Kind::Attr, line);
        if (cur().type == T::Int) {  // x.0 is x[0] in Jinja
          attr->kind = Expr::Kind::Item;
          attach(*attr, std::move(e));
          ExprPtr index = node(Expr::Kind::Literal, line);
          index->value = Value::from_int(next().integer);
          attach(*attr, std::move(index));
        } else {
          attr->name = expect_name();
          attach(*attr, std::move(e));
        }
        e = std::move(attr);
      } else if (at_op("[")) {
        e = subscript(std::move(e));
      } else if (at_op("(")) {
        e = call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr subscript(ExprPtr target) {
    const int line = next().line;
    ExprPtr parts[3];
    bool slice = false;
    for (int k = 0; k < 3; ++k) {
      if (!at_op(":") && !at_op("]")) parts[k] = expression();
      if (at_op(":") && k < 2) {
        ++pos;
        slice = true;
      } else {
        break;
      }
    }
    expect_op("]");
    ExprPtr e = node(slice ? Expr::Kind::Slice : Expr::Kind::Item, line);
    attach(*e, std::move(target));
    if (!slice && !parts[0]) error("an empty subscript []");
    for (int k = 0; k < (slice ? 3 : 1); ++k) attach(*e, std::move(parts[k]));
    return e;
  }

  // Arguments after "(": positional, then name=value.
  void arguments(Expr& e) {
    expect_op("(");
    while (!at_op(")")) {
      if (at_op("*") || at_op("**")) error("*args and **kwargs in a call are not rendered by eaglevk");
      if (cur().type == T::Name && tokens[pos + 1].type == T::Op && tokens[pos + 1].text == "=") {
        std::string name = next().text;
        ++pos;
        ExprPtr value = expression();
        grow(e, *value);
        e.kwargs.emplace_back(std::move(name), std::move(value));
      } else {
        if (!e.kwargs.empty()) error("a positional argument follows a keyword argument");
        attach(e, expression());
      }
      if (!at_op(",")) break;
      ++pos;
    }
    expect_op(")");
  }

  ExprPtr call(ExprPtr callee) {
    ExprPtr e = node(Expr::Kind::Call, cur().line);
    attach(*e, std::move(callee));
    arguments(*e);
    return e;
  }

  // `| name(args)` and `is [not] name args`, after an operand.
  ExprPtr filters(ExprPtr e) {
    while (true) {
      if (at_op("|")) {
        const int line = next().line;
        std::string name = expect_name();
        while (at_op(".")) name += "." + (++pos, expect_name());
        if (!is_known_filter(name))
          fail("chat template line {}: the filter `{}` is not one eaglevk renders", line, name);
        ExprPtr f = node(Expr::Kind::Filter, line);
        f->name = std::move(name);
        attach(*f, std::move(e));
        if (at_op("(")) arguments(*f);
        e = std::move(f);
      } else if (at_name("is")) {
        const int line = next().line;
        ExprPtr t = node(Expr::Kind::Test, line);
        if (at_name("not")) {
          ++pos;
          t->negated = true;
        }
        std::string name = expect_name();
        while (at_op(".")) name += "." + (++pos, expect_name());
        if (!is_known_test(name)) fail("chat template line {}: the test `{}` is not one eaglevk renders", line, name);
        t->name = std::move(name);
        attach(*t, std::move(e));
        if (at_op("(")) {
          arguments(*t);
        } else if ((cur().type == T::Name || cur().type == T::String || cur().type == T::Int || cur().type == T::Float ||
                    at_op("[") || at_op("{") || at_op("(")) &&
                   !at_name("else") && !at_name("or") && !at_name("and") && !at_name("is")) {
          attach(*t, postfix(primary()));
        }
        e = std::move(t);
      } else if (at_op("(")) {
        e = call(std::move(e));
      } else {
        return e;
      }
    }
  }

  // An expression, or several separated by commas (a tuple), as after `set x =` and `{{`.
  ExprPtr tuple_or_expression() {
    const int line = cur().line;
    ExprPtr first = expression();
    if (!at_op(",")) return first;
    ExprPtr tuple = node(Expr::Kind::Tuple, line);
    attach(*tuple, std::move(first));
    while (at_op(",")) {
      ++pos;
      if (cur().type == T::BlockEnd || cur().type == T::VarEnd) break;
      attach(*tuple, expression());
    }
    return tuple;
  }

  // ---- statements ----

  StmtPtr stmt(Stmt::Kind kind, int line) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->line = line;
    return s;
  }

  // Statements until one of `ends` opens a block tag; that keyword is left as the current token.
  Body body(std::initializer_list<std::string_view> ends) {
    DepthGuard guard(*this);
    Body out;
    while (true) {
      const Token& t = cur();
      if (t.type == T::End) {
        if (ends.size() == 0) return out;
        fail("chat template: the template ends before its {{% {} %}}", *(ends.end() - 1));
      }
      if (t.type == T::Data) {
        StmtPtr s = stmt(Stmt::Kind::Text, t.line);
        s->text = next().text;
        out.push_back(std::move(s));
      } else if (t.type == T::VarBegin) {
        StmtPtr s = stmt(Stmt::Kind::Output, next().line);
        s->expr = tuple_or_expression();
        expect(T::VarEnd);
        out.push_back(std::move(s));
      } else if (t.type == T::BlockBegin) {
        const Token& keyword = tokens[pos + 1];
        if (keyword.type == T::Name)
          for (std::string_view end : ends)
            if (keyword.text == end) {
              ++pos;
              return out;
            }
        ++pos;
        out.push_back(statement());
      } else {
        error(fmt::format("unexpected {}", describe(t)));
      }
    }
  }

  StmtPtr statement() {
    const Token& t = cur();
    if (t.type != T::Name) error(fmt::format("expected a statement name, found {}", describe(t)));
    const std::string keyword = next().text;
    for (std::string_view refused : kRefusedStatements)
      if (keyword == refused)
        fail("chat template line {}: the template uses the `{}` statement, which eaglevk does not render", t.line, keyword);
    if (keyword == "if") return if_statement(t.line);
    if (keyword == "for") return for_statement(t.line);
    if (keyword == "set") return set_statement(t.line);
    if (keyword == "macro") return macro_statement(t.line);
    if (keyword == "break" || keyword == "continue") {
      StmtPtr s = stmt(keyword == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue, t.line);
      expect(T::BlockEnd);
      return s;
    }
    fail("chat template line {}: `{}` is not a statement eaglevk renders (or it has no opening block)", t.line, keyword);
  }

  StmtPtr if_statement(int line) {
    StmtPtr s = stmt(Stmt::Kind::If, line);
    s->conditions.push_back(tuple_or_expression());
    expect(T::BlockEnd);
    while (true) {
      s->bodies.push_back(body({"elif", "else", "endif"}));
      const std::string keyword = next().text;
      if (keyword == "elif") {
        s->conditions.push_back(tuple_or_expression());
        expect(T::BlockEnd);
      } else if (keyword == "else") {
        expect(T::BlockEnd);
        s->bodies.push_back(body({"endif"}));
        ++pos;
        expect(T::BlockEnd);
        return s;
      } else {
        expect(T::BlockEnd);
        return s;
      }
    }
  }

  std::vector<std::string> targets() {
    std::vector<std::string> names;
    const bool paren = at_op("(");
    if (paren) ++pos;
    names.push_back(expect_name());
    while (at_op(",")) {
      ++pos;
      names.push_back(expect_name());
    }
    if (paren) expect_op(")");
    return names;
  }

  StmtPtr for_statement(int line) {
    StmtPtr s = stmt(Stmt::Kind::For, line);
    s->targets = targets();
    if (!at_name("in")) error(fmt::format("expected 'in' in a for loop, found {}", describe(cur())));
    ++pos;
    s->expr = or_expr_with_filters_for_loop();
    if (at_name("if")) {
      ++pos;
      s->conditions.push_back(expression());
    }
    if (at_name("recursive")) error("recursive for loops are not rendered by eaglevk");
    expect(T::BlockEnd);
    s->bodies.push_back(body({"else", "endfor"}));
    if (next().text == "else") {
      expect(T::BlockEnd);
      s->bodies.push_back(body({"endfor"}));
      ++pos;
    }
    expect(T::BlockEnd);
    return s;
  }

  // The iterable of a for loop: an expression without the `x if c else y` form, since a
  // following `if` is the loop's filter (Jinja parses it the same way).
  ExprPtr or_expr_with_filters_for_loop() {
    DepthGuard guard(*this);
    const int line = cur().line;
    ExprPtr first = or_expr();
    if (!at_op(",")) return first;
    ExprPtr tuple = node(Expr::Kind::Tuple, line);
    attach(*tuple, std::move(first));
    while (at_op(",")) {
      ++pos;
      attach(*tuple, or_expr());
    }
    return tuple;
  }

  StmtPtr set_statement(int line) {
    StmtPtr s = stmt(Stmt::Kind::Set, line);
    s->targets.push_back(expect_name());
    if (at_op(".")) {
      ++pos;
      s->attr = expect_name();
    } else {
      while (at_op(",")) {
        ++pos;
        s->targets.push_back(expect_name());
      }
    }
    if (cur().type == T::BlockEnd && s->attr.empty() && s->targets.size() == 1) {
      ++pos;
      s->kind = Stmt::Kind::SetBlock;
      s->bodies.push_back(body({"endset"}));
      ++pos;
      expect(T::BlockEnd);
      return s;
    }
    if (at_op("|")) error("filters on a {% set %} block are not rendered by eaglevk");
    expect_op("=");
    s->expr = tuple_or_expression();
    expect(T::BlockEnd);
    return s;
  }

  StmtPtr macro_statement(int line) {
    StmtPtr s = stmt(Stmt::Kind::Macro, line);
    s->name = expect_name();
    expect_op("(");
    while (!at_op(")")) {
      s->targets.push_back(expect_name());
      if (at_op("=")) {
        ++pos;
        s->defaults.push_back(expression());
      } else {
        if (!s->defaults.empty() && s->defaults.back())
          error("a macro parameter without a default follows one with a default");
        s->defaults.push_back(nullptr);
      }
      if (!at_op(",")) break;
      ++pos;
    }
    expect_op(")");
    expect(T::BlockEnd);
    s->bodies.push_back(body({"endmacro"}));
    ++pos;
    if (cur().type == T::Name && cur().text == s->name) ++pos;  // {% endmacro name %}
    expect(T::BlockEnd);
    return s;
  }
};

}  // namespace

Program parse(std::string_view source) {
  Parser p;
  p.tokens = tokenize(source);
  Program program;
  program.body = p.body({});
  return program;
}

}  // namespace eaglevk::loader::jinja
