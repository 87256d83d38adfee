#pragma once
// The one exception type eaglevk throws for bad input and failed Vulkan calls. The CLI turns
// it into a message and a non-zero exit; the C API turns it into a status and last-error text.
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace eaglevk {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace eaglevk
