#include "support/process.h"

#include <sys/wait.h>

#include <cstdio>

#include <gtest/gtest.h>

namespace eaglevk::testing {

ProcessResult run_process(const std::string& command_line) {
  ProcessResult r;
  FILE* pipe = popen(command_line.c_str(), "r");
  if (!pipe) return r;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) r.out.append(buffer, n);
  int status = pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  expect_no_validation_errors(r.out, command_line);
  return r;
}

void expect_no_validation_errors(const std::string& output, const std::string& command_line) {
  const size_t at = output.find("eaglevk: validation error:");
  if (at != std::string::npos)
    ADD_FAILURE() << "the validation layer reported an error in `" << command_line << "`:\n"
                  << output.substr(at > 200 ? at - 200 : 0, 2000);
}

}  // namespace eaglevk::testing
