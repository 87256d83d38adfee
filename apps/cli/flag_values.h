#pragma once
// A value that is one of the command's own flags (`eval ... --json --baseline`): CLI11 takes the
// word after an option as its value whatever it looks like, so the flag was lost without a word
// and a file named `--baseline` written. Such a command line is refused instead.
#include <CLI/CLI.hpp>

namespace eaglevk::cli {

// A usage error naming the option and the flag it swallowed, for the first such value `sub`
// (a parsed subcommand) holds.
void check_values_are_not_flags(const CLI::App& sub);

}  // namespace eaglevk::cli
