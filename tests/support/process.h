#pragma once
// Runs a command line through the shell and collects its exit status and output, for the
// tests that drive the CLI and the C example as a user would.
#include <string>

namespace eaglevk::testing {

struct ProcessResult {
  int code = -1;     // exit status; 128 + signal when killed
  std::string out;   // standard output (and whatever the command line redirects into it)
};

// Adds a test failure when the output holds a validation-layer error message (commands run
// with EAGLEVK_VALIDATE=1; the CLI also exits non-zero then, which covers runs whose stderr
// is not collected).
ProcessResult run_process(const std::string& command_line);

// The failure run_process adds, for output collected another way (a stderr file).
void expect_no_validation_errors(const std::string& output, const std::string& command_line);

// The eaglevk CLI run with EAGLEVK_VALIDATE=1, its stdout and stderr apart (progress and errors
// go to one, results to the other). `before` goes in front of the command line: variables
// (VAR=value ...) or a pipe into it ("printf ... |").
struct CliResult {
  int code = -1;
  std::string out, err;
};
CliResult run_cli_apart(const std::string& args, const std::string& before = "");

}  // namespace eaglevk::testing
