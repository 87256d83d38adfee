// The eaglevk command line: one subcommand per use. Errors become a message and exit code 1.
#include <cstdio>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <eaglevk/error.h>

#include "apps/cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"eaglevk: LLM inference with EAGLE-3 speculative decoding on Vulkan"};
  app.require_subcommand(0, 1);
  eaglevk::cli::add_devices_command(app);
  eaglevk::cli::add_run_command(app);
  eaglevk::cli::add_bench_command(app);
  eaglevk::cli::add_eval_command(app);
  eaglevk::cli::add_inspect_command(app);
  // With no arguments eaglevk runs the bundled tiny model as a demo.
  std::vector<const char*> demo = {argv[0], "run", "-p", "The modules described in this chapter", "-n", "48"};
  if (argc == 1) {
    fmt::print(stderr, "eaglevk demo: the bundled tiny-llama3 model (see `eaglevk --help`)\n");
    argc = int(demo.size());
    argv = const_cast<char**>(demo.data());
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    for (CLI::App* sub : app.get_subcommands()) return eaglevk::cli::run_selected(*sub);
    fmt::print("{}", app.help());
    return 0;
  } catch (const eaglevk::Error& e) {
    fmt::print(stderr, "eaglevk: error: {}\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "eaglevk: unexpected error: {}\n", e.what());
    return 1;
  }
}
