#pragma once
// The parsed form of a chat template: statements holding expressions, as plain structs with the
// children in vectors. Which fields a node uses depends on its kind (listed on each).
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "loader/jinja/value.h"

namespace eaglevk::loader::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    Literal,  // value
    Name,     // name
    List,     // args: the items
    Tuple,    // args: the items
    Dict,     // args: key, value, key, value, ...
    Attr,     // args[0].name
    Item,     // args[0][args[1]]
    Slice,    // args[0][args[1]:args[2]:args[3]] (absent parts are null)
    Call,     // args[0](args[1..], kwargs)
    Filter,   // args[0] | name(args[1..], kwargs)
    Test,     // args[0] is [not] name(args[1..])
    Unary,    // name: "-", "+" or "not"; args[0]
    Binary,   // name: the operator ("+", "==", "in", "not in", "and", "or", ...); args[0], args[1]
    Cond,     // args[1] if args[0] else args[2] (args[2] may be null)
  };
  Kind kind = Kind::Literal;
  int line = 0;
  int height = 1;  // the longest path from here to a leaf, 1 for a leaf (the parser bounds it)
  Value value;
  std::string name;
  bool negated = false;  // Test: `is not`
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  enum class Kind {
    Text,      // text
    Output,    // {{ expr }}
    If,        // conditions[i] chooses bodies[i]; an else is bodies.back() when there is one more body
    For,       // for targets in expr [if conditions[0]]: bodies[0] [else bodies[1]]
    Set,       // set targets = expr; `set ns.attr = expr` has targets {ns} and attr
    SetBlock,  // set targets[0] %}bodies[0]{% endset
    Macro,     // macro name(targets with defaults)bodies[0]
    Break,
    Continue,
  };
  Kind kind = Kind::Text;
  int line = 0;
  std::string text;
  std::string name;  // Macro
  std::string attr;  // Set on a namespace attribute
  ExprPtr expr;
  std::vector<std::string> targets;
  std::vector<ExprPtr> defaults;  // Macro: one per parameter, null where there is none
  std::vector<ExprPtr> conditions;
  std::vector<Body> bodies;
};

struct Program {
  Body body;
};

}  // namespace eaglevk::loader::jinja
