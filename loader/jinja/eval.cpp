#include "loader/jinja/eval.h"

#include <cmath>
#include <unordered_map>

#include <eaglevk/error.h>

#include "loader/jinja/builtins.h"

namespace eaglevk::loader::jinja {
namespace {

enum class Flow { Normal, Break, Continue };
using Scope = std::unordered_map<std::string, Value>;

// Lists built by `+` and `*` are capped by item count, as strings are by bytes.
constexpr size_t kMaxListItems = 1'000'000;

double as_double(const Value& v) {
  return v.kind == Kind::Float ? v.real : static_cast<double>(v.kind == Kind::Bool ? v.boolean : v.integer);
}
int64_t as_int(const Value& v) { return v.kind == Kind::Bool ? v.boolean : v.integer; }

// Python's slice(start, stop, step).indices(len): the first index, the step and how many.
struct SliceRange {
  int64_t start = 0;
  int64_t step = 1;
  size_t count = 0;
  size_t at(size_t k) const { return static_cast<size_t>(start + static_cast<int64_t>(k) * step); }
};

SliceRange slice_range(size_t len, const Value& start_v, const Value& stop_v, const Value& step_v, int line) {
  const auto given = [](const Value& v) { return v.kind != Kind::None; };  // Undefined is an error, as in Python
  const auto integer = [&](const Value& v) {
    if (v.kind != Kind::Int && v.kind != Kind::Bool) fail("chat template line {}: slice indices must be integers", line);
    return as_int(v);
  };
  const int64_t n = static_cast<int64_t>(len);
  const int64_t step = given(step_v) ? integer(step_v) : 1;
  if (step == 0) fail("chat template line {}: slice step cannot be zero", line);
  const auto clamp = [&](int64_t i, int64_t lo, int64_t hi) {
    if (i < 0) i += n;
    return std::clamp(i, lo, hi);
  };
  int64_t start, stop;
  if (step > 0) {
    start = given(start_v) ? clamp(integer(start_v), 0, n) : 0;
    stop = given(stop_v) ? clamp(integer(stop_v), 0, n) : n;
  } else {
    start = given(start_v) ? clamp(integer(start_v), -1, n - 1) : n - 1;
    stop = given(stop_v) ? clamp(integer(stop_v), -1, n - 1) : -1;
  }
  // Counted, not stepped to: start + step may pass INT64_MAX when the step is huge.
  SliceRange r{start, step, 0};
  if (step > 0 && start < stop) r.count = static_cast<size_t>((static_cast<uint64_t>(stop - start) - 1) / static_cast<uint64_t>(step) + 1);
  if (step < 0 && start > stop)
    r.count = static_cast<size_t>((static_cast<uint64_t>(start - stop) - 1) / (0 - static_cast<uint64_t>(step)) + 1);
  return r;
}

// s[r] by code point, walking s once (no table of code points: s may be 16 MiB long).
std::string string_slice(const std::string& s, size_t cp_count, const SliceRange& r) {
  charge_work(s.size());
  std::string out;
  size_t left = r.count;
  int64_t next = r.start;
  if (r.step > 0) {
    for (size_t pos = 0, index = 0; left > 0; ++index) {
      const size_t end = next_code_point(s, pos);
      if (static_cast<int64_t>(index) == next) {
        out.append(s, pos, end - pos);
        if (--left > 0) next += r.step;
      }
      pos = end;
    }
  } else {
    for (size_t end = s.size(), index = cp_count; left > 0; --index) {
      const size_t pos = prev_code_point(s, end);  // code point index - 1 is s[pos, end)
      if (static_cast<int64_t>(index) - 1 == next) {
        out.append(s, pos, end - pos);
        if (--left > 0) next += r.step;
      }
      end = pos;
    }
  }
  return out;
}

struct Renderer {
  const Limits& limits;
  Budget& budget;
  CallContext ctx;
  std::vector<Scope> scopes;
  std::string out;  // charged to the budget as it grows
  size_t steps = 0;
  int call_depth = 0;
  int eval_depth = 0;
  int line = 0;  // of the statement or expression last begun, for errors that carry no line

  void step(int at) {
    line = at;
    if (++steps > limits.max_steps)
      fail("chat template line {}: rendering takes more than {} steps (a loop that does not end?)", at, limits.max_steps);
  }

  // eval and exec recurse once per level of the template's nesting (statements in statements,
  // operands, macro calls): bounded here, whatever the parser let through, so that the stack is.
  struct Nesting {
    Renderer& r;
    Nesting(Renderer& renderer, int at) : r(renderer) {
      if (++r.eval_depth > r.limits.max_eval_depth)
        fail("chat template line {}: evaluation nests deeper than {} levels (statements, expressions and macro calls)",
             at, r.limits.max_eval_depth);
    }
    ~Nesting() { --r.eval_depth; }
    Nesting(const Nesting&) = delete;
    Nesting& operator=(const Nesting&) = delete;
  };
  [[noreturn]] void undefined_error(const Value& v, int line, std::string_view doing) const {
    fail("chat template line {}: '{}' is undefined ({})", line, v.text, doing);
  }
  void check_size(size_t bytes, int line) const {
    if (bytes > limits.max_value_bytes)
      fail("chat template line {}: a string or list grows past {} bytes", line, limits.max_value_bytes);
  }

  // Strings are copied into lists, not shared: a list grown by `+` in a loop would otherwise
  // hold copy upon copy of a long string.
  void check_list_bytes(const List& items, int line) const {
    charge_items(items.size());
    size_t bytes = 0;
    for (const Value& v : items) bytes += sizeof(Value) + v.text.size();
    check_size(bytes, line);
  }

  Value lookup(const std::string& name) const {
    for (auto it = scopes.rbegin(); it != scopes.rend(); ++it)
      if (auto found = it->find(name); found != it->end()) return found->second;
    return Value::undefined(name);
  }

  // ---- expressions ----

  Value attribute(const Value& obj, const std::string& name, int line) {
    if (obj.is_undefined()) undefined_error(obj, line, fmt::format("reading its attribute `{}`", name));
    if (obj.kind == Kind::Dict) {
      Value method = method_of(obj, name);
      return method.is_undefined() ? dict_get(obj, name) : method;
    }
    if (obj.kind == Kind::Namespace) return dict_get(obj, name);
    if (obj.is_string()) return method_of(obj, name);
    return Value::undefined(name);
  }

  Value item(const Value& obj, const Value& key, int line) {
    if (obj.is_undefined()) undefined_error(obj, line, "indexing it");
    if (key.is_string()) return obj.is_mapping() ? dict_get(obj, key.text) : attribute(obj, key.text, line);
    if ((key.kind == Kind::Int || key.kind == Kind::Bool) && (obj.kind == Kind::List || obj.is_string())) {
      int64_t i = as_int(key);
      if (obj.kind == Kind::List) {
        const int64_t n = static_cast<int64_t>(obj.list->size());
        if (i < 0) i += n;
        return i >= 0 && i < n ? (*obj.list)[static_cast<size_t>(i)] : Value::undefined(fmt::format("[{}]", as_int(key)));
      }
      // Walked, not split into a table of code points: a loop may index a 16 MiB string.
      const int64_t n = static_cast<int64_t>(code_point_count(obj.text));
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undefined(fmt::format("[{}]", as_int(key)));
      size_t pos = 0;
      for (int64_t k = 0; k < i; ++k) pos = next_code_point(obj.text, pos);
      charge_work(pos);
      return Value::from_string(obj.text.substr(pos, next_code_point(obj.text, pos) - pos));
    }
    return Value::undefined(key.is_string() ? key.text : to_str(key));
  }

  Value slice(const Value& obj, const Value& start, const Value& stop, const Value& stride, int line) {
    if (obj.is_undefined()) undefined_error(obj, line, "slicing it");
    if (obj.kind == Kind::List) {
      const SliceRange r = slice_range(obj.list->size(), start, stop, stride, line);
      List items;
      items.reserve(r.count);
      for (size_t k = 0; k < r.count; ++k) items.push_back((*obj.list)[r.at(k)]);
      return obj.tuple ? Value::from_tuple(std::move(items)) : Value::from_list(std::move(items));
    }
    if (obj.is_string()) {
      const size_t n = code_point_count(obj.text);
      return Value::from_string(string_slice(obj.text, n, slice_range(n, start, stop, stride, line)));
    }
    fail("chat template line {}: a {} cannot be sliced", line, type_name(obj));
  }

  Value arithmetic(const std::string& op, const Value& a, const Value& b, int line) {
    if (op == "%" && a.is_string()) fail("chat template line {}: string formatting with '%' is not rendered by eaglevk", line);
    if (a.is_undefined() || b.is_undefined())
      undefined_error(a.is_undefined() ? a : b, line, fmt::format("an operand of '{}'", op));
    if (op == "+") {
      if (a.is_string() && b.is_string()) {
        check_size(a.text.size() + b.text.size(), line);
        charge_work(a.text.size() + b.text.size());
        return Value::from_string(a.text + b.text);
      }
      if (a.kind == Kind::List && b.kind == Kind::List) {
        if (a.tuple != b.tuple)
          fail("chat template line {}: can only concatenate {} (not {}) to {}", line, a.tuple ? "tuple" : "list",
               b.tuple ? "tuple" : "list", a.tuple ? "tuple" : "list");
        if (a.list->size() + b.list->size() > kMaxListItems) check_size(SIZE_MAX, line);
        List items = *a.list;
        items.insert(items.end(), b.list->begin(), b.list->end());
        check_list_bytes(items, line);
        return a.tuple ? Value::from_tuple(std::move(items)) : Value::from_list(std::move(items));
      }
    }
    if (op == "*" && ((a.is_string() || a.kind == Kind::List) != (b.is_string() || b.kind == Kind::List))) {
      const Value& seq = a.is_string() || a.kind == Kind::List ? a : b;
      const Value& times = &seq == &a ? b : a;
      if (times.kind != Kind::Int && times.kind != Kind::Bool)
        fail("chat template line {}: a {} can only be repeated by an integer", line, type_name(seq));
      const int64_t n = std::max<int64_t>(0, as_int(times));
      const size_t unit = seq.is_string() ? seq.text.size() : seq.list->size();
      if (unit && static_cast<double>(n) * static_cast<double>(unit) > (seq.is_string() ? limits.max_value_bytes : kMaxListItems))
        check_size(SIZE_MAX, line);
      charge_work(unit ? static_cast<size_t>(n) * unit * (seq.is_string() ? 1 : kItemWork) : 0);
      if (seq.is_string()) {
        std::string s;
        for (int64_t i = 0; i < n && unit; ++i) s += seq.text;
        return Value::from_string(std::move(s));
      }
      List items;
      for (int64_t i = 0; i < n && unit; ++i) items.insert(items.end(), seq.list->begin(), seq.list->end());
      check_list_bytes(items, line);
      return seq.tuple ? Value::from_tuple(std::move(items)) : Value::from_list(std::move(items));
    }
    if (!a.is_number() || !b.is_number())
      fail("chat template line {}: unsupported operand types for {}: {} and {}", line, op, type_name(a), type_name(b));
    const bool ints = a.kind != Kind::Float && b.kind != Kind::Float;
    if (op == "/") {
      if (as_double(b) == 0) fail("chat template line {}: division by zero", line);
      return Value::from_float(as_double(a) / as_double(b));
    }
    if (ints) {
      const int64_t x = as_int(a), y = as_int(b);
      int64_t r = 0;
      bool overflow = false;
      if (op == "+") overflow = __builtin_add_overflow(x, y, &r);
      else if (op == "-") overflow = __builtin_sub_overflow(x, y, &r);
      else if (op == "*") overflow = __builtin_mul_overflow(x, y, &r);
      else if (op == "//" || op == "%") {
        if (y == 0) fail("chat template line {}: integer division or modulo by zero", line);
        if (x == INT64_MIN && y == -1) overflow = true;
        else {
          int64_t q = x / y, m = x % y;
          if (m != 0 && ((m < 0) != (y < 0))) --q, m += y;  // Python floors
          r = op == "//" ? q : m;
        }
      } else if (op == "**") {
        if (y < 0) return Value::from_float(std::pow(static_cast<double>(x), static_cast<double>(y)));
        r = 1;
        for (int64_t i = 0; i < y && !overflow; ++i) {
          overflow = __builtin_mul_overflow(r, x, &r);
          if (r == 0 || r == 1) break;  // 0**n and 1**n stay put
          if (x == -1) {
            r = (y % 2) ? -1 : 1;
            break;
          }
        }
      }
      if (overflow) fail("chat template line {}: integer overflow in '{}' (eaglevk's integers are 64-bit)", line, op);
      return Value::from_int(r);
    }
    const double x = as_double(a), y = as_double(b);
    if (op == "+") return Value::from_float(x + y);
    if (op == "-") return Value::from_float(x - y);
    if (op == "*") return Value::from_float(x * y);
    if (op == "**") return Value::from_float(std::pow(x, y));
    if (y == 0) fail("chat template line {}: float division or modulo by zero", line);
    if (op == "//") return Value::from_float(std::floor(x / y));
    double m = std::fmod(x, y);
    if (m != 0 && ((m < 0) != (y < 0))) m += y;
    return Value::from_float(m);
  }

  Value binary(const Expr& e) {
    const std::string& op = e.name;
    if (op == "and" || op == "or") {
      Value left = eval(*e.args[0]);
      if (truthy(left) == (op == "or")) return left;
      return eval(*e.args[1]);
    }
    const Value a = eval(*e.args[0]);
    const Value b = eval(*e.args[1]);
    if (op == "==") return Value::from_bool(equal(a, b));
    if (op == "!=") return Value::from_bool(!equal(a, b));
    if (op == "<") return Value::from_bool(less(a, b));
    if (op == ">") return Value::from_bool(less(b, a));
    if (op == "<=") return Value::from_bool(!less(b, a));
    if (op == ">=") return Value::from_bool(!less(a, b));
    if (op == "in") return Value::from_bool(contains(b, a, e.line));
    if (op == "not in") return Value::from_bool(!contains(b, a, e.line));
    if (op == "~") {
      std::string s = to_str(a) + to_str(b);
      check_size(s.size(), e.line);
      return Value::from_string(std::move(s));
    }
    return arithmetic(op, a, b, e.line);
  }

  Args arguments(const Expr& e, size_t first) {
    Args args;
    for (size_t i = first; i < e.args.size(); ++i) args.positional.push_back(eval(*e.args[i]));
    for (const auto& [name, value] : e.kwargs) args.named.emplace_back(name, eval(*value));
    return args;
  }

  CallContext at(int line) const {
    CallContext c = ctx;
    c.line = line;
    return c;
  }

  Value call(const Expr& e) {
    const Value callee = eval(*e.args[0]);
    Args args = arguments(e, 1);
    if (callee.kind != Kind::Callable) {
      if (callee.is_undefined()) undefined_error(callee, e.line, "calling it");
      fail("chat template line {}: a {} is not callable", e.line, type_name(callee));
    }
    const Callable& fn = *callee.fn;
    switch (fn.type) {
      case Callable::Type::Global: return call_global(fn.name, args, at(e.line));
      case Callable::Type::Method: return call_method(fn, args, at(e.line));
      case Callable::Type::Macro: return call_macro(*fn.macro, args, e.line);
    }
    return Value::undefined();
  }

  Value call_macro(const Stmt& macro, const Args& args, int line) {
    if (call_depth >= limits.max_call_depth)
      fail("chat template line {}: macro calls nest deeper than {}", line, limits.max_call_depth);
    if (args.positional.size() > macro.targets.size())
      fail("chat template line {}: macro `{}` takes at most {} arguments, got {}", line, macro.name, macro.targets.size(),
           args.positional.size());
    Scope locals;
    for (size_t i = 0; i < macro.targets.size(); ++i) {
      const std::string& param = macro.targets[i];
      if (i < args.positional.size()) locals[param] = args.positional[i];
      else if (macro.defaults[i]) locals[param] = eval(*macro.defaults[i]);
      else locals[param] = Value::undefined(param);
    }
    for (const auto& [name, value] : args.named) {
      if (std::find(macro.targets.begin(), macro.targets.end(), name) == macro.targets.end())
        fail("chat template line {}: macro `{}` has no parameter `{}`", line, macro.name, name);
      locals[name] = value;
    }
    // A macro sees the template's top-level names and its own parameters, not its caller's loop.
    std::vector<Scope> caller_scopes(std::make_move_iterator(scopes.begin() + 1), std::make_move_iterator(scopes.end()));
    scopes.resize(1);
    scopes.push_back(std::move(locals));
    std::string saved = std::move(out);
    out.clear();
    ++call_depth;
    const Flow flow = exec(macro.bodies[0]);
    --call_depth;
    std::string result = std::move(out);
    out = std::move(saved);
    budget.refund_memory(result.size());  // charged as output; from_string charges it as a value
    scopes.resize(1);
    for (Scope& s : caller_scopes) scopes.push_back(std::move(s));
    if (flow != Flow::Normal) fail("chat template line {}: break or continue outside a loop", line);
    return Value::from_string(std::move(result));
  }

  Value eval(const Expr& e) {
    step(e.line);
    const Nesting nesting(*this, e.line);
    switch (e.kind) {
      case Expr::Kind::Literal: return e.value;
      case Expr::Kind::Name: return lookup(e.name);
      case Expr::Kind::List:
      case Expr::Kind::Tuple: {
        List items;
        for (const ExprPtr& a : e.args) items.push_back(eval(*a));
        return e.kind == Expr::Kind::Tuple ? Value::from_tuple(std::move(items)) : Value::from_list(std::move(items));
      }
      case Expr::Kind::Dict: {
        Dict entries;
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          const Value key = eval(*e.args[i]);
          if (!key.is_string()) fail("chat template line {}: dict keys other than strings are not rendered by eaglevk", e.line);
          Value value = eval(*e.args[i + 1]);
          auto it = std::find_if(entries.begin(), entries.end(), [&](const auto& kv) { return kv.first == key.text; });
          if (it != entries.end()) it->second = std::move(value);
          else entries.emplace_back(key.text, std::move(value));
        }
        return Value::from_dict(std::move(entries));
      }
      case Expr::Kind::Attr: return attribute(eval(*e.args[0]), e.name, e.line);
      case Expr::Kind::Item: return item(eval(*e.args[0]), eval(*e.args[1]), e.line);
      case Expr::Kind::Slice: {
        const Value obj = eval(*e.args[0]);
        const auto part = [&](int k) { return e.args[k] ? eval(*e.args[k]) : Value::none(); };
        return slice(obj, part(1), part(2), part(3), e.line);
      }
      case Expr::Kind::Call: return call(e);
      case Expr::Kind::Filter: {
        const Value input = eval(*e.args[0]);
        return apply_filter(e.name, input, arguments(e, 1), at(e.line));
      }
      case Expr::Kind::Test: {
        const Value input = eval(*e.args[0]);
        return Value::from_bool(apply_test(e.name, input, arguments(e, 1), at(e.line)) != e.negated);
      }
      case Expr::Kind::Unary: {
        const Value v = eval(*e.args[0]);
        if (e.name == "not") return Value::from_bool(!truthy(v));
        if (v.is_undefined()) undefined_error(v, e.line, "an operand of unary '" + e.name + "'");
        if (!v.is_number()) fail("chat template line {}: bad operand type for unary {}: {}", e.line, e.name, type_name(v));
        if (e.name == "+") return v.kind == Kind::Bool ? Value::from_int(v.boolean) : v;
        if (v.kind == Kind::Float) return Value::from_float(-v.real);
        if (as_int(v) == INT64_MIN) fail("chat template line {}: integer overflow in unary -", e.line);
        return Value::from_int(-as_int(v));
      }
      case Expr::Kind::Binary: return binary(e);
      case Expr::Kind::Cond:
        if (truthy(eval(*e.args[0]))) return eval(*e.args[1]);
        return e.args[2] ? eval(*e.args[2]) : Value::undefined();
    }
    return Value::undefined();
  }

  // ---- statements ----

  void write(std::string_view text, int line) {
    if (out.size() + text.size() > limits.max_output_bytes)
      fail("chat template line {}: the rendered prompt grows past {} bytes", line, limits.max_output_bytes);
    budget.charge_memory(text.size());
    out.append(text);
  }

  void bind(const std::vector<std::string>& targets, const Value& v, int line) {
    if (targets.size() == 1) {
      scopes.back()[targets[0]] = v;
      return;
    }
    if (v.kind != Kind::List || v.list->size() != targets.size())
      fail("chat template line {}: cannot unpack a {} into {} names", line, type_name(v), targets.size());
    for (size_t i = 0; i < targets.size(); ++i) scopes.back()[targets[i]] = (*v.list)[i];
  }

  Flow exec_for(const Stmt& s) {
    const Value iterable = eval(*s.expr);
    // A list is walked where it is (lists are immutable and this one is held by `iterable`);
    // anything else, or a filtered loop, gets a list of its own.
    List owned;
    const List* walked = &owned;
    if (iterable.kind == Kind::List && s.conditions.empty()) {
      charge_items(iterable.list->size());
      walked = iterable.list.get();
    } else {
      owned = iterate(iterable, "a for loop", s.line);
    }
    if (!s.conditions.empty()) {
      List kept;
      for (const Value& item : owned) {
        step(s.line);
        scopes.emplace_back();
        bind(s.targets, item, s.line);
        const bool keep = truthy(eval(*s.conditions[0]));
        scopes.pop_back();
        if (keep) kept.push_back(item);
      }
      owned = std::move(kept);
    }
    const List& items = *walked;
    if (items.empty()) return s.bodies.size() > 1 ? exec(s.bodies[1]) : Flow::Normal;
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      step(s.line);
      Dict loop = {
          {"index", Value::from_int(i + 1)},
          {"index0", Value::from_int(i)},
          {"revindex", Value::from_int(n - i)},
          {"revindex0", Value::from_int(n - i - 1)},
          {"first", Value::from_bool(i == 0)},
          {"last", Value::from_bool(i == n - 1)},
          {"length", Value::from_int(n)},
          {"previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value::undefined("loop.previtem")},
          {"nextitem", i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value::undefined("loop.nextitem")},
      };
      // Each turn has its own scope: a `set` in the body does not outlive the turn (Jinja's rule).
      scopes.emplace_back();
      scopes.back()["loop"] = Value::from_dict(std::move(loop));
      bind(s.targets, items[static_cast<size_t>(i)], s.line);
      const Flow flow = exec(s.bodies[0]);
      scopes.pop_back();
      if (flow == Flow::Break) break;
    }
    return Flow::Normal;
  }

  Flow exec(const Body& body) {
    for (const StmtPtr& sp : body) {
      const Stmt& s = *sp;
      step(s.line);
      const Nesting nesting(*this, s.line);
      switch (s.kind) {
        case Stmt::Kind::Text: write(s.text, s.line); break;
        case Stmt::Kind::Output: write(to_str(eval(*s.expr)), s.line); break;
        case Stmt::Kind::If: {
          size_t chosen = s.bodies.size();
          for (size_t i = 0; i < s.conditions.size(); ++i)
            if (truthy(eval(*s.conditions[i]))) {
              chosen = i;
              break;
            }
          if (chosen == s.bodies.size() && s.bodies.size() > s.conditions.size()) chosen = s.bodies.size() - 1;
          if (chosen < s.bodies.size())
            if (const Flow flow = exec(s.bodies[chosen]); flow != Flow::Normal) return flow;
          break;
        }
        case Stmt::Kind::For:
          exec_for(s);
          break;
        case Stmt::Kind::Set: {
          Value v = eval(*s.expr);
          if (!s.attr.empty()) {
            const Value ns = lookup(s.targets[0]);
            if (ns.kind != Kind::Namespace)
              fail("chat template line {}: `set {}.{}` needs a namespace, but `{}` is a {}", s.line, s.targets[0], s.attr,
                   s.targets[0], type_name(ns));
            check_namespace_item(v);
            auto it = std::find_if(ns.ns->begin(), ns.ns->end(), [&](const auto& kv) { return kv.first == s.attr; });
            if (it != ns.ns->end()) it->second = std::move(v);
            else ns.ns->emplace_back(s.attr, std::move(v));
          } else {
            bind(s.targets, v, s.line);
          }
          break;
        }
        case Stmt::Kind::SetBlock: {
          std::string saved = std::move(out);
          out.clear();
          const Flow flow = exec(s.bodies[0]);
          std::string captured = std::move(out);
          out = std::move(saved);
          budget.refund_memory(captured.size());
          scopes.back()[s.targets[0]] = Value::from_string(std::move(captured));
          if (flow != Flow::Normal) return flow;
          break;
        }
        case Stmt::Kind::Macro: {
          Value v;
          v.kind = Kind::Callable;
          auto fn = std::make_shared<Callable>();
          fn->type = Callable::Type::Macro;
          fn->name = s.name;
          fn->macro = &s;
          v.fn = std::move(fn);
          scopes.back()[s.name] = std::move(v);
          break;
        }
        case Stmt::Kind::Break: return Flow::Break;
        case Stmt::Kind::Continue: return Flow::Continue;
      }
    }
    return Flow::Normal;
  }
};

// Errors raised inside the engine name their line ("chat template line 3: ...") or nothing (a
// value's own checks: the budgets, value nesting); this adds the template's name, and the line
// the render was at where the error has none.
std::string located(std::string_view message, std::string_view name, int line) {
  const std::string where = name.empty() ? "chat template" : fmt::format("chat template {}", name);
  for (std::string_view prefix : {"chat template line ", "chat template: "})
    if (message.substr(0, prefix.size()) == prefix)
      return where + std::string(message.substr(std::string_view("chat template").size()));
  return fmt::format("{} line {}: {}", where, line, message);
}

}  // namespace

std::string render(const Program& program, const std::vector<std::pair<std::string, Value>>& variables,
                   const std::tm& now, const Limits& limits, std::string_view name) {
  // The budget outlives the renderer: values charged to it are refunded as the renderer's
  // scopes die.
  Budget budget(limits);
  const ActiveBudget active(budget);
  Renderer r{limits, budget, CallContext{&now, limits.max_value_bytes, 0}, {}, {}, 0, 0, 0, 0};
  try {
    r.scopes.emplace_back();
    for (std::string_view global : {"range", "namespace", "dict", "raise_exception", "strftime_now"})
      r.scopes.back()[std::string(global)] = global_function(global);
    for (const auto& [key, value] : variables) r.scopes.back()[key] = value;
    if (r.exec(program.body) != Flow::Normal) fail("chat template: break or continue outside a loop");
  } catch (const Error& e) {
    throw Error(located(e.what(), name, r.line), e.setting);
  }
  return std::move(r.out);
}

}  // namespace eaglevk::loader::jinja
