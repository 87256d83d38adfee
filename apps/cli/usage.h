#pragma once
// Usage errors: a command line that cannot mean anything (an unknown flag, a value out of
// range, flags that do not go together, no prompt). They exit with status 2, every other
// error with 1; both print `eaglevk: error: ...` (main.cpp).
#include <eaglevk/error.h>

namespace eaglevk::cli {

struct UsageError : Error {
  using Error::Error;
};

template <typename... Args>
[[noreturn]] void usage_fail(fmt::format_string<Args...> format, Args&&... args) {
  throw UsageError(fmt::format(format, std::forward<Args>(args)...));
}

// Runs `check` (an engine validation of flag values) and reports its failure as a usage error.
template <typename Check>
void as_usage_error(Check check) {
  try {
    check();
  } catch (const UsageError&) {
    throw;
  } catch (const Error& e) {
    throw UsageError(e.what(), e.setting);
  }
}

}  // namespace eaglevk::cli
