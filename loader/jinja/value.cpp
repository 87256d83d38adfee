#include "loader/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include <eaglevk/error.h>

#include "loader/pretokenize.h"

namespace eaglevk::loader::jinja {

namespace {

// A scalar's charge: the Value itself and its text.
void charge_scalar(Value& v) { v.charge = Charge(sizeof(Value) + v.text.size(), v.text.size()); }

// depth and holds_namespace of a container of `items`, and the bytes of its keys.
void measure(Value& v, const Value& item) {
  v.depth = std::max(v.depth, item.depth + 1);
  v.holds_namespace = v.holds_namespace || item.holds_namespace;
}
void check_depth(const Value& v) {
  if (v.depth > kMaxValueDepth)
    fail("a value nests deeper than {} levels (lists, dicts and bound methods inside each other)", kMaxValueDepth);
}

}  // namespace

Value Value::undefined(std::string name) {
  Value v;
  v.text = std::move(name);
  charge_scalar(v);
  return v;
}
Value Value::none() {
  Value v;
  v.kind = Kind::None;
  charge_scalar(v);
  return v;
}
Value Value::from_bool(bool b) {
  Value v;
  v.kind = Kind::Bool;
  v.boolean = b;
  charge_scalar(v);
  return v;
}
Value Value::from_int(int64_t i) {
  Value v;
  v.kind = Kind::Int;
  v.integer = i;
  charge_scalar(v);
  return v;
}
Value Value::from_float(double f) {
  Value v;
  v.kind = Kind::Float;
  v.real = f;
  charge_scalar(v);
  return v;
}
Value Value::from_string(std::string s) {
  Value v;
  v.kind = Kind::String;
  v.text = std::move(s);
  charge_scalar(v);
  return v;
}
Value Value::from_list(List items) {
  Value v;
  v.kind = Kind::List;
  for (const Value& item : items) measure(v, item);
  check_depth(v);
  charge_items(items.size());
  v.charge = Charge(sizeof(Value));  // the items were charged as they were made
  v.list = std::make_shared<const List>(std::move(items));
  return v;
}
Value Value::from_tuple(List items) {
  Value v = from_list(std::move(items));
  v.tuple = true;
  return v;
}
Value Value::from_dict(Dict items) {
  Value v;
  v.kind = Kind::Dict;
  // The keys are charged to each copy of the dict value, though copies share them: more than is
  // held, never less, and keys are short in any real template.
  size_t key_bytes = 0;
  for (const auto& [key, item] : items) {
    measure(v, item);
    key_bytes += key.size();
  }
  check_depth(v);
  charge_items(items.size());
  v.charge = Charge(sizeof(Value) + key_bytes);
  v.dict = std::make_shared<const Dict>(std::move(items));
  return v;
}
Value Value::from_namespace(Dict items) {
  Value v;
  v.kind = Kind::Namespace;
  for (const auto& [key, item] : items) check_namespace_item(item);
  charge_items(items.size());
  v.charge = Charge(sizeof(Value));
  v.ns = std::make_shared<Dict>(std::move(items));
  v.holds_namespace = true;
  return v;
}
Value Value::from_method(std::shared_ptr<const Callable> fn) {
  Value v;
  v.kind = Kind::Callable;
  measure(v, fn->receiver);
  check_depth(v);
  v.charge = Charge(sizeof(Value) + sizeof(Callable));
  v.fn = std::move(fn);
  return v;
}

void check_namespace_item(const Value& v) {
  if (v.holds_namespace) fail("a namespace holding a namespace is not rendered by eaglevk");
}

namespace {

Value from_json_at(const nlohmann::ordered_json& j, int depth) {
  if (depth > kMaxValueDepth) fail("a JSON value nests deeper than {} levels for a chat template", kMaxValueDepth);
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value::from_bool(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value::from_int(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) fail("a JSON integer is too large for a chat template: {}", u);
      return Value::from_int(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value::from_float(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value::from_string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List items;
      items.reserve(j.size());
      for (const auto& item : j) items.push_back(from_json_at(item, depth + 1));
      return Value::from_list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict items;
      items.reserve(j.size());
      for (const auto& [key, item] : j.items()) items.emplace_back(key, from_json_at(item, depth + 1));
      return Value::from_dict(std::move(items));
    }
    default: fail("a JSON value of type {} cannot be passed to a chat template", j.type_name());
  }
}

}  // namespace

Value Value::from_json(const nlohmann::ordered_json& j) { return from_json_at(j, 0); }

bool truthy(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined:
    case Kind::None: return false;
    case Kind::Bool: return v.boolean;
    case Kind::Int: return v.integer != 0;
    case Kind::Float: return v.real != 0;
    case Kind::String: return !v.text.empty();
    case Kind::List: return !v.list->empty();
    case Kind::Dict: return !v.dict->empty();
    case Kind::Namespace:
    case Kind::Callable: return true;
  }
  return false;
}

std::string float_repr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  // The shortest round-trip digits in scientific form, then laid out as Python's repr does:
  // positional for exponents -4..15, else d.ddde+XX.
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, f, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  const size_t e = sci.find('e');
  std::string mantissa = sci.substr(0, e);
  const int exponent = std::stoi(sci.substr(e + 1));
  const bool negative = mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  std::string digits;
  for (char c : mantissa)
    if (c != '.') digits += c;
  std::string out = negative ? "-" : "";
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out += "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
    } else if (static_cast<size_t>(exponent) + 1 >= digits.size()) {
      out += digits + std::string(static_cast<size_t>(exponent) + 1 - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, exponent + 1) + "." + digits.substr(exponent + 1);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  return out + fmt::format("e{}{:02d}", exponent < 0 ? '-' : '+', std::abs(exponent));
}

namespace {

// str.isprintable's complement for the code points a chat could plausibly hold: C0/C1 controls,
// spaces other than U+0020, format characters, separators and private use.
bool python_printable(char32_t c) {
  if (c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD) return false;
  if (c == 0x1680 || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) || (c >= 0x205F && c <= 0x2064))
    return false;
  if (c == 0x3000 || c == 0xFEFF || (c >= 0xFFF9 && c <= 0xFFFB) || (c >= 0xE000 && c <= 0xF8FF)) return false;
  if (c >= 0xF0000) return false;  // supplementary private use planes
  return true;
}

void string_repr(std::string& out, std::string_view s) {
  charge_work(s.size());
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  out += quote;
  for (size_t pos = 0; pos < s.size();) {
    size_t n;
    const char32_t c = decode_code_point(s, pos, &n);
    if (c == static_cast<char32_t>(quote) || c == '\\') out += '\\', out += static_cast<char>(c);
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (!python_printable(c)) {
      if (c <= 0xFF) out += fmt::format("\\x{:02x}", static_cast<uint32_t>(c));
      else if (c <= 0xFFFF) out += fmt::format("\\u{:04x}", static_cast<uint32_t>(c));
      else out += fmt::format("\\U{:08x}", static_cast<uint32_t>(c));
    } else {
      out.append(s.substr(pos, n));
    }
    pos += n;
  }
  out += quote;
}

// str() and repr() append to one string, which is checked as it grows: a list that holds
// itself twice per level (x = [x, x]) is small but prints exponentially long.
void check_printed(const std::string& out) {
  if (out.size() > max_value_bytes())
    fail("a string or list grows past {} bytes (printing a value)", max_value_bytes());
}

void write_repr(std::string& out, const Value& v);

void write_str(std::string& out, const Value& v) {
  switch (v.kind) {
    case Kind::Undefined: return;
    case Kind::None: out += "None"; return;
    case Kind::Bool: out += v.boolean ? "True" : "False"; return;
    case Kind::Int: out += std::to_string(v.integer); return;
    case Kind::Float: out += float_repr(v.real); return;
    case Kind::String:  // printed as it is: it was checked when it was built (or is a message)
      charge_work(v.text.size());
      out += v.text;
      return;
    case Kind::List:
    case Kind::Dict: write_repr(out, v); return;
    case Kind::Namespace: fail("a chat template writes a namespace object, which eaglevk does not render");
    case Kind::Callable: fail("a chat template writes the function `{}` itself, which eaglevk does not render", v.fn->name);
  }
}

void write_repr(std::string& out, const Value& v) {
  charge_items(1);
  switch (v.kind) {
    case Kind::String: string_repr(out, v.text); break;
    case Kind::List: {
      out += v.tuple ? "(" : "[";
      for (size_t i = 0; i < v.list->size(); ++i) {
        if (i) out += ", ";
        write_repr(out, (*v.list)[i]);
      }
      out += v.tuple ? (v.list->size() == 1 ? ",)" : ")") : "]";
      break;
    }
    case Kind::Dict: {
      out += "{";
      for (size_t i = 0; i < v.dict->size(); ++i) {
        if (i) out += ", ";
        string_repr(out, (*v.dict)[i].first);
        out += ": ";
        write_repr(out, (*v.dict)[i].second);
      }
      out += "}";
      break;
    }
    default: write_str(out, v);
  }
  check_printed(out);
}

}  // namespace

std::string repr(const Value& v) {
  std::string out;
  write_repr(out, v);
  return out;
}

std::string to_str(const Value& v) {
  std::string out;
  write_str(out, v);
  return out;
}

std::string_view type_name(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined: return "undefined";
    case Kind::None: return "NoneType";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::String: return "str";
    case Kind::List: return "list";
    case Kind::Dict: return "dict";
    case Kind::Namespace: return "Namespace";
    case Kind::Callable: return "function";
  }
  return "?";
}

bool equal(const Value& a, const Value& b) {
  charge_items(1);
  if (a.is_number() && b.is_number()) {
    if (a.kind == Kind::Float || b.kind == Kind::Float) {
      const double x = a.kind == Kind::Float ? a.real : static_cast<double>(a.kind == Kind::Bool ? a.boolean : a.integer);
      const double y = b.kind == Kind::Float ? b.real : static_cast<double>(b.kind == Kind::Bool ? b.boolean : b.integer);
      return x == y;
    }
    const int64_t x = a.kind == Kind::Bool ? a.boolean : a.integer;
    const int64_t y = b.kind == Kind::Bool ? b.boolean : b.integer;
    return x == y;
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Kind::Undefined:
    case Kind::None: return true;
    case Kind::String:
      charge_work(std::min(a.text.size(), b.text.size()));
      return a.text == b.text;
    case Kind::List: {
      if (a.tuple != b.tuple || a.list->size() != b.list->size()) return false;
      for (size_t i = 0; i < a.list->size(); ++i)
        if (!equal((*a.list)[i], (*b.list)[i])) return false;
      return true;
    }
    case Kind::Dict: {
      if (a.dict->size() != b.dict->size()) return false;
      for (const auto& [key, item] : *a.dict) {
        const Value other = dict_get(b, key);
        if (other.is_undefined() || !equal(item, other)) return false;
      }
      return true;
    }
    case Kind::Namespace: return a.ns == b.ns;
    case Kind::Callable: return a.fn == b.fn;
    default: return false;
  }
}

bool less(const Value& a, const Value& b) {
  charge_items(1);
  if (a.is_number() && b.is_number()) {
    const auto as_double = [](const Value& v) {
      return v.kind == Kind::Float ? v.real : static_cast<double>(v.kind == Kind::Bool ? v.boolean : v.integer);
    };
    if (a.kind != Kind::Float && b.kind != Kind::Float)
      return (a.kind == Kind::Bool ? a.boolean : a.integer) < (b.kind == Kind::Bool ? b.boolean : b.integer);
    return as_double(a) < as_double(b);
  }
  if (a.is_string() && b.is_string()) {
    charge_work(std::min(a.text.size(), b.text.size()));
    return a.text < b.text;
  }  // UTF-8 byte order is code point order
  if (a.kind == Kind::List && b.kind == Kind::List) {
    const size_t n = std::min(a.list->size(), b.list->size());
    for (size_t i = 0; i < n; ++i) {
      if (less((*a.list)[i], (*b.list)[i])) return true;
      if (less((*b.list)[i], (*a.list)[i])) return false;
    }
    return a.list->size() < b.list->size();
  }
  fail("a chat template compares {} with {} ('<' is not supported between them)", type_name(a), type_name(b));
}

Value dict_get(const Value& d, std::string_view key) {
  charge_items(d.entries().size());
  for (const auto& [k, item] : d.entries())
    if (k == key) return item;
  return Value::undefined(std::string(key));
}

namespace {

void json_string(std::string& out, std::string_view s) {
  charge_work(s.size());
  out += '"';
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
        else out += c;
    }
  }
  out += '"';
}

void json_value(std::string& out, const Value& v, int indent, int level, size_t budget) {
  charge_work(kItemWork + (indent > 0 ? static_cast<size_t>(indent) * level : 0));
  if (out.size() > budget) fail("a chat template's tojson output exceeds {} bytes", budget);
  const auto newline = [&](int depth) {
    if (indent >= 0) out += '\n' + std::string(static_cast<size_t>(indent) * depth, ' ');
  };
  const char* item_sep = indent >= 0 ? "," : ", ";
  switch (v.kind) {
    case Kind::None: out += "null"; return;
    case Kind::Bool: out += v.boolean ? "true" : "false"; return;
    case Kind::Int: out += std::to_string(v.integer); return;
    case Kind::Float:
      if (std::isnan(v.real)) out += "NaN";
      else if (std::isinf(v.real)) out += v.real > 0 ? "Infinity" : "-Infinity";
      else out += float_repr(v.real);
      return;
    case Kind::String: json_string(out, v.text); return;
    case Kind::List:
      if (v.list->empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < v.list->size(); ++i) {
        if (i) out += item_sep;
        newline(level + 1);
        json_value(out, (*v.list)[i], indent, level + 1, budget);
      }
      newline(level);
      out += ']';
      return;
    case Kind::Dict:
      if (v.dict->empty()) {
        out += "{}";
        return;
      }
      out += '{';
      for (size_t i = 0; i < v.dict->size(); ++i) {
        if (i) out += item_sep;
        newline(level + 1);
        json_string(out, (*v.dict)[i].first);
        out += ": ";
        json_value(out, (*v.dict)[i].second, indent, level + 1, budget);
      }
      newline(level);
      out += '}';
      return;
    default: fail("a chat template's tojson got a value of type {}, which is not JSON serializable", type_name(v));
  }
}

}  // namespace

std::string to_json(const Value& v, int indent, size_t budget) {
  std::string out;
  json_value(out, v, indent, 0, budget);
  return out;
}

size_t code_point_count(std::string_view s) {
  charge_work(s.size());
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

std::vector<std::string_view> code_points(std::string_view s) {
  charge_work(s.size());
  std::vector<std::string_view> out;
  for (size_t pos = 0; pos < s.size();) {
    size_t n;
    decode_code_point(s, pos, &n);
    out.push_back(s.substr(pos, n));
    pos += n;
  }
  return out;
}

size_t next_code_point(std::string_view s, size_t pos) {
  do ++pos;
  while (pos < s.size() && (static_cast<unsigned char>(s[pos]) & 0xC0) == 0x80);
  return pos;
}

size_t prev_code_point(std::string_view s, size_t pos) {
  do --pos;
  while (pos > 0 && (static_cast<unsigned char>(s[pos]) & 0xC0) == 0x80);
  return pos;
}

}  // namespace eaglevk::loader::jinja
