// Filters and tests as Jinja 3 defines them, globals as transformers adds them (raise_exception,
// strftime_now, and Jinja's range/namespace/dict), and the read-only str and dict methods that
// the sandbox allows. Python's meaning is the reference for each; where a case cannot be
// rendered exactly (case mapping of non-ASCII text, ensure_ascii), it is refused by name.
#include "loader/jinja/builtins.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include <eaglevk/error.h>

#include "loader/pretokenize.h"

namespace eaglevk::loader::jinja {
namespace {

constexpr std::string_view kFilters[] = {
    "trim", "length", "count", "upper", "lower", "capitalize", "title", "replace", "tojson", "join",
    "first", "last", "default", "d", "items", "list", "string", "int", "float", "abs", "selectattr",
    "rejectattr", "select", "reject", "map", "reverse", "safe", "unique", "min", "max", "sum"};
constexpr std::string_view kTests[] = {
    "defined", "undefined", "none", "boolean", "false", "true", "integer", "float", "number", "string",
    "mapping", "iterable", "sequence", "callable", "equalto", "eq", "==", "ne", "!=", "lt", "<", "le",
    "<=", "gt", ">", "ge", ">=", "in", "odd", "even", "divisibleby", "lower", "upper", "sameas"};
constexpr std::string_view kGlobals[] = {"range", "namespace", "dict", "raise_exception", "strftime_now"};
constexpr std::string_view kStrMethods[] = {"strip", "lstrip", "rstrip", "split", "startswith", "endswith", "upper",
                                            "lower", "replace", "title", "capitalize", "join", "find"};
constexpr std::string_view kDictMethods[] = {"items", "keys", "values", "get"};

template <size_t N>
bool listed(const std::string_view (&names)[N], std::string_view name) {
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

// The argument at `index`, or the one named `name`, or `fallback`.
Value arg(const Args& args, size_t index, std::string_view name, Value fallback = Value::undefined()) {
  for (const auto& [key, value] : args.named)
    if (key == name) return value;
  if (index < args.positional.size()) return args.positional[index];
  return fallback;
}

void check_arity(std::string_view what, const Args& args, size_t max_positional,
                 std::initializer_list<std::string_view> names, int line) {
  if (args.positional.size() > max_positional)
    fail("chat template line {}: `{}` takes at most {} positional arguments, got {}", line, what, max_positional,
         args.positional.size());
  for (const auto& [key, value] : args.named)
    if (std::find(names.begin(), names.end(), key) == names.end())
      fail("chat template line {}: `{}` has no argument named `{}`", line, what, key);
}

const std::string& need_string(const Value& v, std::string_view what, int line) {
  if (!v.is_string()) fail("chat template line {}: {} needs a string, got {}", line, what, type_name(v));
  return v.text;
}

int64_t need_int(const Value& v, std::string_view what, int line) {
  if (v.kind == Kind::Int) return v.integer;
  if (v.kind == Kind::Bool) return v.boolean;
  fail("chat template line {}: {} needs an integer, got {}", line, what, type_name(v));
}

}  // namespace

List iterate(const Value& v, std::string_view what, int line) {
  switch (v.kind) {
    case Kind::Undefined: return {};
    case Kind::List: charge_items(v.list->size()); return *v.list;
    case Kind::Dict: {
      List keys;
      for (const auto& [key, item] : *v.dict) keys.push_back(Value::from_string(key));
      return keys;
    }
    case Kind::String: {
      // Each code point becomes a value of its own, charged as it is made: a 16 MiB string
      // would be 16 million values, and the memory budget stops it long before.
      charge_work(v.text.size());
      List chars;
      for (size_t pos = 0; pos < v.text.size();) {
        const size_t end = next_code_point(v.text, pos);
        chars.push_back(Value::from_string(v.text.substr(pos, end - pos)));
        pos = end;
      }
      return chars;
    }
    default: fail("chat template line {}: {} cannot iterate over a value of type {}", line, what, type_name(v));
  }
}

namespace {

void check_ascii(std::string_view s, std::string_view what, int line) {
  charge_work(s.size());  // and as much again for the case mapping that follows
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80)
      fail("chat template line {}: {} of non-ASCII text (Unicode case mapping) is not rendered by eaglevk", line, what);
}

std::string ascii_upper(std::string s) {
  for (char& c : s) c = (c >= 'a' && c <= 'z') ? static_cast<char>(c - 32) : c;
  return s;
}
std::string ascii_lower(std::string s) {
  for (char& c : s) c = (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c;
  return s;
}
bool ascii_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
// Python's str.title: a letter after a non-letter is upper case, every other letter lower.
std::string ascii_title(const std::string& s) {
  std::string out = s;
  bool prev_letter = false;
  for (char& c : out) {
    if (ascii_alpha(c)) {
      c = prev_letter ? ascii_lower(std::string(1, c))[0] : ascii_upper(std::string(1, c))[0];
      prev_letter = true;
    } else {
      prev_letter = false;
    }
  }
  return out;
}

std::string replace_all(const std::string& s, const std::string& old, const std::string& with, int64_t count,
                        size_t budget, int line) {
  charge_work(s.size());
  std::string out;
  if (old.empty()) {
    // Python inserts `with` before every code point and at the end.
    int64_t done = 0;
    for (std::string_view c : code_points(s)) {
      if (count < 0 || done < count) out += with, ++done;
      out += c;
      if (out.size() > budget) fail("chat template line {}: replace() builds more than {} bytes", line, budget);
    }
    if (count < 0 || done < count) out += with;
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t at = s.find(old, pos);
    if (at == std::string::npos) break;
    out.append(s, pos, at - pos);
    out += with;
    if (out.size() > budget) fail("chat template line {}: replace() builds more than {} bytes", line, budget);
    pos = at + old.size();
    ++done;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

// Python's str.strip(chars) family: `chars` None strips whitespace.
std::string strip_chars(const std::string& s, const Value& chars, bool left, bool right, int line) {
  if (chars.is_undefined() || chars.kind == Kind::None) {
    std::string_view r = s;
    if (left) r = python_lstrip(r);
    if (right) r = python_rstrip(r);
    return std::string(r);
  }
  const std::vector<std::string_view> set = code_points(need_string(chars, "strip()", line));
  const auto in_set = [&](std::string_view c) { return std::find(set.begin(), set.end(), c) != set.end(); };
  // Byte offsets, walked from each end (no table of the code points of s).
  size_t begin = 0, end = s.size();
  const std::string_view text = s;
  if (left)
    while (begin < end) {
      const size_t next = next_code_point(text, begin);
      charge_items(set.size());
      if (!in_set(text.substr(begin, next - begin))) break;
      begin = next;
    }
  if (right)
    while (end > begin) {
      const size_t prev = prev_code_point(text, end);
      charge_items(set.size());
      if (!in_set(text.substr(prev, end - prev))) break;
      end = prev;
    }
  return s.substr(begin, end - begin);
}

Value split(const std::string& s, const Value& sep, int64_t maxsplit, int line) {
  charge_work(s.size());
  List parts;
  if (sep.is_undefined() || sep.kind == Kind::None) {
    const std::string_view text = s;
    const auto space_at = [&](size_t pos) {
      size_t n;
      return is_python_space(decode_code_point(text, pos, &n));
    };
    size_t i = 0;
    while (i < text.size()) {
      while (i < text.size() && space_at(i)) i = next_code_point(text, i);
      if (i == text.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        // The rest, its trailing whitespace stripped, as Python does.
        parts.push_back(Value::from_string(std::string(python_rstrip(text.substr(i)))));
        break;
      }
      const size_t word = i;
      while (i < text.size() && !space_at(i)) i = next_code_point(text, i);
      parts.push_back(Value::from_string(std::string(text.substr(word, i - word))));
    }
    return Value::from_list(std::move(parts));
  }
  const std::string& delimiter = need_string(sep, "split()", line);
  if (delimiter.empty()) fail("chat template line {}: split() with an empty separator", line);
  size_t pos = 0;
  while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
    const size_t at = s.find(delimiter, pos);
    if (at == std::string::npos) break;
    parts.push_back(Value::from_string(s.substr(pos, at - pos)));
    pos = at + delimiter.size();
  }
  parts.push_back(Value::from_string(s.substr(pos)));
  return Value::from_list(std::move(parts));
}

// Jinja's attribute lookup for selectattr/map: a dotted path, each step an item or attribute.
Value attribute_path(const Value& item, const std::string& path) {
  Value v = item;
  size_t pos = 0;
  charge_work(path.size());
  while (pos <= path.size()) {
    const size_t dot = std::min(path.find('.', pos), path.size());
    const std::string key = path.substr(pos, dot - pos);
    if (v.is_mapping()) v = dict_get(v, key);
    else if (v.kind == Kind::List && !key.empty() && std::all_of(key.begin(), key.end(), ::isdigit)) {
      // Digits past size_t (stoul would throw) name no item either.
      size_t index = 0;
      const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), index);
      v = ec == std::errc() && index < v.list->size() ? (*v.list)[index] : Value::undefined(key);
    } else v = Value::undefined(key);
    pos = dot + 1;
  }
  return v;
}

// The rest of the arguments after `skip` positional ones, for select/selectattr's test.
Args rest_args(const Args& args, size_t skip) {
  Args out;
  for (size_t i = skip; i < args.positional.size(); ++i) out.positional.push_back(args.positional[i]);
  out.named = args.named;
  return out;
}

Value select_filter(std::string_view name, const Value& input, const Args& args, const CallContext& ctx) {
  const bool by_attr = name == "selectattr" || name == "rejectattr";
  const bool keep = name == "select" || name == "selectattr";
  List out;
  for (const Value& item : iterate(input, name, ctx.line)) {
    Value subject = item;
    size_t next = 0;
    if (by_attr) subject = attribute_path(item, need_string(arg(args, next++, ""), name, ctx.line));
    bool pass;
    if (next < args.positional.size()) {
      const std::string& test = need_string(args.positional[next], name, ctx.line);
      if (!is_known_test(test)) fail("chat template line {}: the test `{}` is not one eaglevk renders", ctx.line, test);
      pass = apply_test(test, subject, rest_args(args, next + 1), ctx);
    } else {
      pass = truthy(subject);
    }
    if (pass == keep) out.push_back(item);
  }
  return Value::from_list(std::move(out));
}

Value map_filter(const Value& input, const Args& args, const CallContext& ctx) {
  List out;
  const Value attribute = arg(args, 99, "attribute");
  for (const Value& item : iterate(input, "map", ctx.line)) {
    if (!attribute.is_undefined()) {
      Value v = attribute_path(item, attribute.kind == Kind::Int ? std::to_string(attribute.integer)
                                                                 : need_string(attribute, "map", ctx.line));
      if (v.is_undefined()) v = arg(args, 99, "default", v);
      out.push_back(v);
    } else {
      const std::string filter = need_string(arg(args, 0, ""), "map", ctx.line);
      if (!is_known_filter(filter)) fail("chat template line {}: the filter `{}` is not one eaglevk renders", ctx.line, filter);
      out.push_back(apply_filter(filter, item, rest_args(args, 1), ctx));
    }
  }
  return Value::from_list(std::move(out));
}

Value join_filter(const Value& input, const Args& args, const CallContext& ctx) {
  const Value separator = arg(args, 0, "d", Value::from_string(""));
  const Value attribute = arg(args, 1, "attribute");
  std::string out;
  bool first = true;
  const std::string sep = to_str(separator);
  for (const Value& item : iterate(input, "join", ctx.line)) {
    charge_work(sep.size() + kItemWork);
    if (!first) out += sep;
    first = false;
    out += to_str(attribute.is_undefined() ? item : attribute_path(item, to_str(attribute)));
    if (out.size() > ctx.max_value_bytes) fail("chat template line {}: join builds more than {} bytes", ctx.line, ctx.max_value_bytes);
  }
  return Value::from_string(std::move(out));
}

Value tojson_filter(const Value& input, const Args& args, const CallContext& ctx) {
  check_arity("tojson", args, 1, {"indent", "ensure_ascii", "separators", "sort_keys"}, ctx.line);
  const Value indent = arg(args, 0, "indent");
  const Value ensure_ascii = arg(args, 99, "ensure_ascii");
  if (!ensure_ascii.is_undefined() && truthy(ensure_ascii))
    fail("chat template line {}: tojson(ensure_ascii=true) is not rendered by eaglevk", ctx.line);
  for (const char* unsupported : {"separators", "sort_keys"})
    if (const Value v = arg(args, 99, unsupported); !v.is_undefined() && v.kind != Kind::None && truthy(v))
      fail("chat template line {}: tojson({}=...) is not rendered by eaglevk", ctx.line, unsupported);
  int width = -1;
  if (!indent.is_undefined() && indent.kind != Kind::None) {
    const int64_t n = need_int(indent, "tojson's indent", ctx.line);
    width = static_cast<int>(std::clamp<int64_t>(n, 0, 64));
  }
  return Value::from_string(to_json(input, width, ctx.max_value_bytes));
}

Value length_of(const Value& v, int line) {
  switch (v.kind) {
    case Kind::Undefined: return Value::from_int(0);
    case Kind::String: return Value::from_int(static_cast<int64_t>(code_point_count(v.text)));
    case Kind::List: return Value::from_int(static_cast<int64_t>(v.list->size()));
    case Kind::Dict: return Value::from_int(static_cast<int64_t>(v.dict->size()));
    default: fail("chat template line {}: length of a value of type {}", line, type_name(v));
  }
}

}  // namespace

bool contains(const Value& container, const Value& item, int line) {
  switch (container.kind) {
    case Kind::Undefined: return false;  // Jinja's Undefined iterates as empty
    case Kind::String:
      if (!item.is_string())
        fail("chat template line {}: 'in <string>' needs a string on the left, got {}", line, type_name(item));
      charge_work(container.text.size());
      return container.text.find(item.text) != std::string::npos;
    case Kind::List:
      return std::any_of(container.list->begin(), container.list->end(), [&](const Value& v) { return equal(v, item); });
    case Kind::Dict:
    case Kind::Namespace:
      return item.is_string() && !dict_get(container, item.text).is_undefined();
    default: fail("chat template line {}: 'in' needs a string, list or dict on the right, got {}", line, type_name(container));
  }
}

bool is_known_filter(std::string_view name) { return listed(kFilters, name); }
bool is_known_test(std::string_view name) { return listed(kTests, name); }

namespace {

// int, float and abs.
Value number_filter(std::string_view name, const Value& input, int line) {
  if (name == "int") {
    if (input.is_undefined()) return Value::from_int(0);
    if (input.kind == Kind::Int || input.kind == Kind::Bool) return Value::from_int(need_int(input, "int", line));
    if (input.kind == Kind::Float && std::isfinite(input.real) && std::abs(input.real) < 9.2e18)
      return Value::from_int(static_cast<int64_t>(input.real));
    fail("chat template line {}: the `int` filter of a {} is not rendered by eaglevk", line, type_name(input));
  }
  if (name == "float") {
    if (input.is_undefined()) return Value::from_float(0);
    if (input.kind == Kind::Float) return input;
    if (input.kind == Kind::Int || input.kind == Kind::Bool)
      return Value::from_float(static_cast<double>(need_int(input, "float", line)));
    fail("chat template line {}: the `float` filter of a {} is not rendered by eaglevk", line, type_name(input));
  }
  if (name == "abs") {
    if (input.kind == Kind::Float) return Value::from_float(std::abs(input.real));
    const int64_t i = need_int(input, "abs", line);
    if (i == INT64_MIN) fail("chat template line {}: integer overflow in abs", line);
    return Value::from_int(i < 0 ? -i : i);
  }
  fail("chat template line {}: the filter `{}` is not one eaglevk renders", line, name);
}

// reverse, unique, min, max and sum.
Value sequence_filter(std::string_view name, const Value& input, int line) {
  if (name == "reverse") {
    if (input.is_string()) {
      const std::string_view text = input.text;
      charge_work(text.size());
      std::string out;
      out.reserve(text.size());
      for (size_t end = text.size(); end > 0;) {
        const size_t pos = prev_code_point(text, end);
        out += text.substr(pos, end - pos);
        end = pos;
      }
      return Value::from_string(std::move(out));
    }
    List items = iterate(input, name, line);
    std::reverse(items.begin(), items.end());
    return Value::from_list(std::move(items));
  }
  if (name == "unique") {
    List out;
    for (const Value& item : iterate(input, name, line)) {
      if (item.is_string() && item.text != ascii_lower(item.text))
        fail("chat template line {}: `unique` compares without case; only lower-case text is rendered", line);
      if (std::none_of(out.begin(), out.end(), [&](const Value& seen) { return equal(seen, item); })) out.push_back(item);
    }
    return Value::from_list(std::move(out));
  }
  if (name == "min" || name == "max" || name == "sum") {
    const List items = iterate(input, name, line);
    if (name == "sum") {
      Value total = Value::from_int(0);
      for (const Value& item : items) {
        if (item.kind == Kind::Float || total.kind == Kind::Float) {
          const auto as_double = [&](const Value& v) { return v.kind == Kind::Float ? v.real : static_cast<double>(need_int(v, "sum", line)); };
          total = Value::from_float(as_double(total) + as_double(item));
        } else {
          int64_t r;
          if (__builtin_add_overflow(total.integer, need_int(item, "sum", line), &r)) fail("chat template line {}: integer overflow in sum", line);
          total = Value::from_int(r);
        }
      }
      return total;
    }
    if (items.empty()) return Value::undefined(std::string(name));
    Value best = items[0];
    for (const Value& item : items) {
      if (item.is_string()) fail("chat template line {}: `{}` of strings compares without case, which eaglevk does not render", line, name);
      if (name == "min" ? less(item, best) : less(best, item)) best = item;
    }
    return best;
  }
  fail("chat template line {}: the filter `{}` is not one eaglevk renders", line, name);
}

}  // namespace

Value apply_filter(std::string_view name, const Value& input, const Args& args, const CallContext& ctx) {
  const int line = ctx.line;
  if (name == "default" || name == "d") {
    const bool boolean = truthy(arg(args, 1, "boolean", Value::from_bool(false)));
    const bool use_default = boolean ? !truthy(input) : input.is_undefined();
    return use_default ? arg(args, 0, "default_value", Value::from_string("")) : input;
  }
  // Jinja's filters read an undefined value as "" (string filters), as empty (list filters) or
  // as 0 (int, float); these two have no such reading.
  if (input.is_undefined() && (name == "abs" || name == "reverse"))
    fail("chat template line {}: `{}` is undefined (in the filter `{}`)", line, input.text, name);
  if (name == "trim") {
    check_arity("trim", args, 1, {"chars"}, line);
    charge_work(input.text.size());
    return Value::from_string(strip_chars(to_str(input), arg(args, 0, "chars"), true, true, line));
  }
  if (name == "length" || name == "count") return length_of(input, line);
  if (name == "upper" || name == "lower" || name == "capitalize" || name == "title") {
    std::string s = to_str(input);
    check_ascii(s, name, line);
    if (name == "upper") return Value::from_string(ascii_upper(s));
    if (name == "lower") return Value::from_string(ascii_lower(s));
    if (name == "title") return Value::from_string(ascii_title(s));
    s = ascii_lower(s);
    if (!s.empty()) s[0] = ascii_upper(s.substr(0, 1))[0];
    return Value::from_string(s);
  }
  if (name == "replace") {
    const std::string s = to_str(input);
    const int64_t count = arg(args, 2, "count").is_undefined() ? -1 : need_int(arg(args, 2, "count"), "replace", line);
    return Value::from_string(replace_all(s, to_str(arg(args, 0, "old")), to_str(arg(args, 1, "new")), count,
                                          ctx.max_value_bytes, line));
  }
  if (name == "tojson") return tojson_filter(input, args, ctx);
  if (name == "join") return join_filter(input, args, ctx);
  if (name == "first" || name == "last") {
    const List items = iterate(input, name, line);
    if (items.empty()) return Value::undefined(std::string(name));
    return name == "first" ? items.front() : items.back();
  }
  if (name == "items") {
    if (input.is_undefined()) return Value::from_list({});
    if (!input.is_mapping()) fail("chat template line {}: `items` needs a mapping, got {}", line, type_name(input));
    List pairs;
    for (const auto& [key, item] : input.entries()) pairs.push_back(Value::from_tuple({Value::from_string(key), item}));
    return Value::from_list(std::move(pairs));
  }
  if (name == "list") return Value::from_list(iterate(input, name, line));
  if (name == "string" || name == "safe") return name == "safe" ? input : Value::from_string(to_str(input));
  if (name == "selectattr" || name == "rejectattr" || name == "select" || name == "reject")
    return select_filter(name, input, args, ctx);
  if (name == "map") return map_filter(input, args, ctx);
  if (name == "int" || name == "float" || name == "abs") return number_filter(name, input, line);
  return sequence_filter(name, input, line);
}

bool apply_test(std::string_view name, const Value& v, const Args& args, const CallContext& ctx) {
  // Every test takes the value and at most one argument (equalto, in, divisibleby, ...).
  static constexpr std::string_view kOneArgument[] = {"equalto", "eq", "==", "ne", "!=", "lt", "<", "le", "<=", "gt",
                                                      ">", "ge", ">=", "in", "divisibleby", "sameas"};
  const size_t wanted = listed(kOneArgument, name) ? 1 : 0;
  if (args.positional.size() + args.named.size() != wanted)
    fail("chat template line {}: the test `{}` takes {} argument(s), got {}", ctx.line, name, wanted,
         args.positional.size() + args.named.size());
  const Value other = arg(args, 0, "");
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.kind == Kind::None;
  if (name == "boolean") return v.kind == Kind::Bool;
  if (name == "true") return v.kind == Kind::Bool && v.boolean;
  if (name == "false") return v.kind == Kind::Bool && !v.boolean;
  if (name == "integer") return v.kind == Kind::Int;
  if (name == "float") return v.kind == Kind::Float;
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.kind == Kind::Dict;
  // Jinja's Undefined iterates as empty and has a length, so it passes these two.
  if (name == "iterable") return v.kind == Kind::List || v.kind == Kind::Dict || v.is_string() || v.is_undefined();
  if (name == "sequence") return v.kind == Kind::List || v.kind == Kind::Dict || v.is_string() || v.is_undefined();
  if (name == "callable") return v.kind == Kind::Callable;
  if (name == "equalto" || name == "eq" || name == "==") return equal(v, other);
  if (name == "ne" || name == "!=") return !equal(v, other);
  if (name == "lt" || name == "<") return less(v, other);
  if (name == "le" || name == "<=") return !less(other, v);
  if (name == "gt" || name == ">") return less(other, v);
  if (name == "ge" || name == ">=") return !less(v, other);
  if (name == "sameas") {
    if (v.kind != other.kind) return false;
    if (v.kind == Kind::None || v.kind == Kind::Undefined) return true;
    if (v.kind == Kind::Bool) return v.boolean == other.boolean;
    fail("chat template line {}: `sameas` is rendered for none, true and false only", ctx.line);
  }
  if (name == "in") return contains(other, v, ctx.line);
  if (name == "odd" || name == "even") return (need_int(v, name, ctx.line) % 2 != 0) == (name == "odd");
  if (name == "divisibleby") {
    const int64_t d = need_int(other, "divisibleby", ctx.line);
    if (d == 0) fail("chat template line {}: divisibleby(0)", ctx.line);
    if (d == -1) return true;  // INT64_MIN % -1 traps; everything is divisible by -1
    return need_int(v, name, ctx.line) % d == 0;
  }
  if (name == "lower" || name == "upper") {
    const std::string s = to_str(v);
    check_ascii(s, name, ctx.line);
    bool cased = false;
    for (char c : s)
      if (ascii_alpha(c)) {
        cased = true;
        if ((name == "lower") != (c >= 'a' && c <= 'z')) return false;
      }
    return cased;
  }
  fail("chat template line {}: the test `{}` is not one eaglevk renders", ctx.line, name);
}

Value global_function(std::string_view name) {
  if (!listed(kGlobals, name)) return Value::undefined(std::string(name));
  Value v;
  v.kind = Kind::Callable;
  auto fn = std::make_shared<Callable>();
  fn->type = Callable::Type::Global;
  fn->name = std::string(name);
  v.fn = std::move(fn);
  return v;
}

Value call_global(std::string_view name, const Args& args, const CallContext& ctx) {
  const int line = ctx.line;
  if (name == "raise_exception") fail("the chat template raised an error: {}", to_str(arg(args, 0, "message")));
  if (name == "strftime_now") {
    const std::string format = need_string(arg(args, 0, "format"), "strftime_now", line);
    if (format.size() > 256) fail("chat template line {}: strftime_now's format is longer than 256 bytes", line);
    char buf[4096];
    const size_t n = std::strftime(buf, sizeof buf, format.c_str(), ctx.now);
    if (n == 0 && !format.empty()) fail("chat template line {}: strftime_now(\"{}\") writes nothing or too much", line, format);
    return Value::from_string(std::string(buf, n));
  }
  if (name == "range") {
    int64_t start = 0, stop = 0, step = 1;
    if (args.positional.size() == 1) stop = need_int(args.positional[0], "range", line);
    else if (args.positional.size() == 2 || args.positional.size() == 3) {
      start = need_int(args.positional[0], "range", line);
      stop = need_int(args.positional[1], "range", line);
      if (args.positional.size() == 3) step = need_int(args.positional[2], "range", line);
    } else {
      fail("chat template line {}: range takes 1 to 3 arguments", line);
    }
    if (step == 0) fail("chat template line {}: range() with a step of 0", line);
    // Sized exactly (a double rounds near 2**63, and stepping past the stop would overflow),
    // then refused before anything is made: Jinja's sandbox refuses ranges over 100000 items
    // (MAX_RANGE); so does this.
    const __int128 span = step > 0 ? static_cast<__int128>(stop) - start : static_cast<__int128>(start) - stop;
    const __int128 stride = step > 0 ? static_cast<__int128>(step) : -static_cast<__int128>(step);
    const __int128 count = span <= 0 ? 0 : (span - 1) / stride + 1;
    if (count > 100000) fail("chat template line {}: range() of more than 100000 items", line);
    charge_items(static_cast<size_t>(count));
    List items;
    items.reserve(static_cast<size_t>(count));
    for (int64_t k = 0; k < static_cast<int64_t>(count); ++k) items.push_back(Value::from_int(static_cast<int64_t>(start + static_cast<__int128>(k) * step)));
    return Value::from_list(std::move(items));
  }
  if (name == "namespace" || name == "dict") {
    Dict entries;
    if (!args.positional.empty()) {
      if (args.positional.size() > 1 || !args.positional[0].is_mapping())
        fail("chat template line {}: {}() takes one mapping and keyword arguments", line, name);
      entries = args.positional[0].entries();
    }
    for (const auto& kv : args.named) {
      auto it = std::find_if(entries.begin(), entries.end(), [&](const auto& e) { return e.first == kv.first; });
      if (it != entries.end()) it->second = kv.second;
      else entries.emplace_back(kv.first, kv.second);
    }
    if (name == "dict") return Value::from_dict(std::move(entries));
    return Value::from_namespace(std::move(entries));
  }
  fail("chat template line {}: `{}` is not a function eaglevk renders", line, name);
}

Value method_of(const Value& receiver, std::string_view name) {
  const bool known = (receiver.is_string() && listed(kStrMethods, name)) ||
                     (receiver.kind == Kind::Dict && listed(kDictMethods, name));
  if (!known) return Value::undefined(std::string(name));
  auto fn = std::make_shared<Callable>();
  fn->type = Callable::Type::Method;
  fn->name = std::string(name);
  fn->receiver = receiver;
  return Value::from_method(std::move(fn));
}

Value call_method(const Callable& method, const Args& args, const CallContext& ctx) {
  const Value& self = method.receiver;
  const std::string& name = method.name;
  const int line = ctx.line;
  if (self.kind == Kind::Dict) {
    if (name == "get") {
      const Value v = dict_get(self, need_string(arg(args, 0, "key"), "get()", line));
      return v.is_undefined() ? arg(args, 1, "default", Value::none()) : v;
    }
    List out;
    for (const auto& [key, item] : *self.dict) {
      if (name == "items") out.push_back(Value::from_tuple({Value::from_string(key), item}));
      else if (name == "keys") out.push_back(Value::from_string(key));
      else out.push_back(item);
    }
    return Value::from_list(std::move(out));
  }
  const std::string& s = self.text;
  if (name == "strip" || name == "lstrip" || name == "rstrip")
    return Value::from_string(strip_chars(s, arg(args, 0, "chars"), name != "rstrip", name != "lstrip", line));
  if (name == "split") {
    const Value maxsplit = arg(args, 1, "maxsplit");
    return split(s, arg(args, 0, "sep"), maxsplit.is_undefined() ? -1 : need_int(maxsplit, "split()", line), line);
  }
  if (name == "startswith" || name == "endswith") {
    const Value affix = arg(args, 0, "");
    if (affix.kind == Kind::List) charge_items(affix.list->size());
    List options = affix.kind == Kind::List ? *affix.list : List{affix};
    for (const Value& option : options) {
      const std::string& a = need_string(option, name, line);
      if (a.size() <= s.size() && (name == "startswith" ? s.compare(0, a.size(), a) == 0
                                                         : s.compare(s.size() - a.size(), a.size(), a) == 0))
        return Value::from_bool(true);
    }
    return Value::from_bool(false);
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize")
    return apply_filter(name, self, {}, ctx);
  if (name == "replace") {
    const Value count = arg(args, 2, "count");
    return Value::from_string(replace_all(s, need_string(arg(args, 0, ""), "replace()", line),
                                          need_string(arg(args, 1, ""), "replace()", line),
                                          count.is_undefined() ? -1 : need_int(count, "replace()", line),
                                          ctx.max_value_bytes, line));
  }
  if (name == "join") {
    Args join_args;
    join_args.positional.push_back(self);
    for (const Value& item : iterate(arg(args, 0, ""), "join()", line))
      if (!item.is_string()) fail("chat template line {}: str.join() of a {} item", line, type_name(item));
    return join_filter(arg(args, 0, ""), join_args, ctx);
  }
  if (name == "find") {
    charge_work(s.size());
    const size_t at = s.find(need_string(arg(args, 0, ""), "find()", line));
    return Value::from_int(at == std::string::npos ? -1 : static_cast<int64_t>(code_point_count(std::string_view(s).substr(0, at))));
  }
  fail("chat template line {}: the method `{}` is not one eaglevk renders", line, name);
}

}  // namespace eaglevk::loader::jinja
