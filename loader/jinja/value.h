#pragma once
// The values a chat template computes with, with the Python meaning Jinja gives them: a
// template is rendered by jinja2 in Python, so `str(x)`, `x == y`, truthiness and `tojson` must
// come out as Python writes them. Lists and dicts are immutable once built (transformers renders
// in an ImmutableSandboxedEnvironment) and shared; a namespace is the one mutable value.
//
// Every value knows how deep it nests, and none nests deeper than kMaxValueDepth: printing,
// comparing, serializing and freeing a value recurse once per level, and a template that builds
// a list 300,000 deep in a loop must end in an error, not a stack overflow. A namespace holds no
// namespace (refused by name), so that a namespace, the one value that changes after it is
// built, can neither nest without bound nor hold itself.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "loader/jinja/budget.h"

namespace eaglevk::loader::jinja {

// Python allows about 1,000 (its recursion limit); real templates and messages nest a handful.
inline constexpr int kMaxValueDepth = 256;

struct Value;
struct Stmt;
using List = std::vector<Value>;
// Insertion-ordered, as Python's dict; keys are strings (templates index messages by name).
using Dict = std::vector<std::pair<std::string, Value>>;

// Something a template can call: a macro, a global function, or a method bound to a value.
struct Callable;

enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Namespace, Callable };

struct Value {
  Kind kind = Kind::Undefined;
  bool boolean = false;
  int64_t integer = 0;
  double real = 0;
  std::string text;  // String; for Undefined, the name that was looked up (for error messages)
  std::shared_ptr<const List> list;
  std::shared_ptr<const Dict> dict;
  std::shared_ptr<Dict> ns;  // Namespace: `set ns.x = ...` writes into it
  std::shared_ptr<const Callable> fn;
  bool tuple = false;  // a List that Python holds as a tuple: written (a, b), never equal to a list
  // 0 for a scalar or a namespace; a list, dict or bound method is one deeper than its deepest
  // item (a namespace counts as a scalar there: it holds no namespace, so what it holds is at
  // most kMaxValueDepth deep, and a value at most twice that).
  int depth = 0;
  bool holds_namespace = false;  // it is a namespace or holds one
  // Its own bytes, its text's and a dict's keys', against the render's memory budget.
  Charge charge;

  static Value undefined(std::string name = {});
  static Value none();
  static Value from_bool(bool b);
  static Value from_int(int64_t i);
  static Value from_float(double f);
  static Value from_string(std::string s);
  static Value from_list(List items);
  static Value from_tuple(List items);
  static Value from_dict(Dict items);
  // An Error when an item is (or holds) a namespace.
  static Value from_namespace(Dict items);
  // A bound method (`receiver.name`): as deep as a list holding the receiver.
  static Value from_method(std::shared_ptr<const Callable> fn);
  static Value from_json(const nlohmann::ordered_json& j);

  bool is_undefined() const { return kind == Kind::Undefined; }
  bool is_string() const { return kind == Kind::String; }
  bool is_number() const { return kind == Kind::Int || kind == Kind::Float || kind == Kind::Bool; }
  bool is_mapping() const { return kind == Kind::Dict || kind == Kind::Namespace; }
  const Dict& entries() const { return kind == Kind::Namespace ? *ns : *dict; }
};

struct Callable {
  enum class Type { Macro, Global, Method };
  Type type = Type::Global;
  std::string name;   // the global's or method's name
  const Stmt* macro = nullptr;  // Type::Macro
  Value receiver;     // Type::Method: the string or dict it is bound to
};

// Python's bool(x).
bool truthy(const Value& v);
// Python's str(x), which `{{ x }}`, `~` and `|string` write (Undefined writes nothing).
std::string to_str(const Value& v);
// Python's repr(x), which str() of a list or dict uses for its items.
std::string repr(const Value& v);
// Python's repr of a float: the shortest text that reads back, "1.0", "1e+16", "1.5e-05".
std::string float_repr(double f);
// Python's ==.
bool equal(const Value& a, const Value& b);
// Python's <; an Error when the types cannot be ordered.
bool less(const Value& a, const Value& b);
// The Python type name, for error messages ("str", "int", "list", "dict", "undefined").
std::string_view type_name(const Value& v);
// An Error unless `v` may go into a namespace (it neither is nor holds one).
void check_namespace_item(const Value& v);
// Looks a key up in a dict or namespace; Undefined when it is absent.
Value dict_get(const Value& d, std::string_view key);

// json.dumps(x, ensure_ascii=False, indent=indent, separators=None, sort_keys=False), which is
// transformers' `tojson`; indent < 0 is None (one line, ", " and ": "). `budget` caps the size
// of what is written, for hostile templates.
std::string to_json(const Value& v, int indent, size_t budget);

// Code points of a UTF-8 string. The walks charge the render's work budget by the bytes walked.
size_t code_point_count(std::string_view s);
std::vector<std::string_view> code_points(std::string_view s);
// The byte offset of the code point after / before the one at `pos` (a code point starts at
// every byte that is not a continuation byte, as code_point_count counts them).
size_t next_code_point(std::string_view s, size_t pos);
size_t prev_code_point(std::string_view s, size_t pos);

}  // namespace eaglevk::loader::jinja
