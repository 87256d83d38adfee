#pragma once
// The filters, tests, globals and methods a chat template may use, with Python's and Jinja's
// meaning. The parser asks which names exist, so that a template using another one is refused
// when it is read, not when some branch of it first runs.
#include <ctime>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "loader/jinja/value.h"

namespace eaglevk::loader::jinja {

struct Limits;

bool is_known_filter(std::string_view name);
// Items of anything a for loop or a filter can walk: a list, a dict's keys, a string's code
// points; Undefined walks as empty, as Jinja's does.
List iterate(const Value& v, std::string_view what, int line);
// Python's `item in container`.
bool contains(const Value& container, const Value& item, int line);
bool is_known_test(std::string_view name);

// Arguments as evaluated at a call site.
struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> named;
};

// What a filter, test or call needs besides its arguments.
struct CallContext {
  const std::tm* now;         // strftime_now's time
  size_t max_value_bytes;     // cap on strings and lists that a call builds
  int line;                   // for error messages
};

Value apply_filter(std::string_view name, const Value& input, const Args& args, const CallContext& ctx);
bool apply_test(std::string_view name, const Value& input, const Args& args, const CallContext& ctx);
// range, namespace, dict, raise_exception, strftime_now; Undefined when `name` is none of them.
Value global_function(std::string_view name);
Value call_global(std::string_view name, const Args& args, const CallContext& ctx);
// `receiver.name`: a bound method when `name` is one of str's or dict's read-only methods.
Value method_of(const Value& receiver, std::string_view name);
Value call_method(const Callable& method, const Args& args, const CallContext& ctx);

}  // namespace eaglevk::loader::jinja
