#include "support/process.h"

#include <sys/wait.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

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

CliResult run_cli_apart(const std::string& args, const std::string& before) {
  static int calls = 0;
  const std::filesystem::path err =
      std::filesystem::temp_directory_path() / ("eaglevk-cli-stderr-" + std::to_string(::getpid()) + "-" + std::to_string(calls++));
  ProcessResult p = run_process(before + " EAGLEVK_VALIDATE=1 " + EAGLEVK_CLI + " " + args + " 2>" + err.string());
  CliResult r{p.code, p.out, ""};
  std::ifstream e(err);
  r.err.assign(std::istreambuf_iterator<char>(e), {});
  std::filesystem::remove(err);
  expect_no_validation_errors(r.err, args);
  return r;
}

}  // namespace eaglevk::testing
