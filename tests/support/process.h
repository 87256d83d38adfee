#pragma once
// Runs a command line through the shell and collects its exit status and output, for the
// tests that drive the CLI and the C example as a user would.
#include <string>

namespace eaglevk::testing {

struct ProcessResult {
  int code = -1;     // exit status; 128 + signal when killed
  std::string out;   // standard output (and whatever the command line redirects into it)
};

ProcessResult run_process(const std::string& command_line);

}  // namespace eaglevk::testing
