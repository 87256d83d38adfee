#pragma once
// The values a chat template computes with, with the Python meaning Jinja gives them: a
// template is rendered by jinja2 in Python, so `str(x)`, `x == y`, truthiness and `tojson` must
// come out as Python writes them. Lists and dicts are immutable once built (transformers renders
// in an ImmutableSandboxedEnvironment) and shared; a namespace is the one mutable value.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace eaglevk::loader::jinja {

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

  static Value undefined(std::string name = {});
  static Value none();
  static Value from_bool(bool b);
  static Value from_int(int64_t i);
  static Value from_float(double f);
  static Value from_string(std::string s);
  static Value from_list(List items);
  static Value from_tuple(List items);
  static Value from_dict(Dict items);
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
// Looks a key up in a dict or namespace; Undefined when it is absent.
Value dict_get(const Value& d, std::string_view key);

// json.dumps(x, ensure_ascii=False, indent=indent, separators=None, sort_keys=False), which is
// transformers' `tojson`; indent < 0 is None (one line, ", " and ": "). `budget` caps the size
// of what is written, for hostile templates.
std::string to_json(const Value& v, int indent, size_t budget);

// Code points of a UTF-8 string, and Python's s[start:stop:step] over them.
size_t code_point_count(std::string_view s);
std::vector<std::string_view> code_points(std::string_view s);

}  // namespace eaglevk::loader::jinja
