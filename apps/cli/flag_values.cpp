#include "apps/cli/flag_values.h"

#include "apps/cli/usage.h"

namespace eaglevk::cli {

void check_values_are_not_flags(const CLI::App& sub) {
  for (const CLI::Option* option : sub.get_options()) {
    if (option->get_expected_max() == 0) continue;  // a flag takes no value
    for (const std::string& value : option->results()) {
      // "-1" and the like are numbers, not flags: only a word this command knows as a flag counts.
      if (value.size() < 2 || value[0] != '-') continue;
      if (sub.get_option_no_throw(value) == nullptr) continue;
      usage_fail("{} took '{}' as its value, but that is a flag of `{}`: put a value after {} (./{} for a file "
                 "of that name)",
                 option->get_name(), value, sub.get_name(), option->get_name(), value);
    }
  }
}

}  // namespace eaglevk::cli
