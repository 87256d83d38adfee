#include "support/process.h"

#include <sys/wait.h>

#include <cstdio>

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
  return r;
}

}  // namespace eaglevk::testing
