// The eaglevk command line: one subcommand per use. Every error is one `eaglevk: error: ...`
// line on stderr; a usage error (a command line that cannot run) exits 2, any other 1.
#include <cstdio>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <eaglevk/eaglevk.h>
#include <eaglevk/eaglevk.hpp>
#include <eaglevk/error.h>

#include "apps/cli/commands.h"
#include "apps/cli/flag_values.h"
#include "apps/cli/setting_names.h"
#include "apps/cli/usage.h"

int main(int argc, char** argv) {
  CLI::App app{"eaglevk: LLM inference with EAGLE-3 speculative decoding on Vulkan"};
  app.require_subcommand(0, 1);
  // Every help page ends with one example (tests/tools/check_help.sh); README.md and docs/ have the rest.
  app.footer(
      "Without a subcommand: a demo on the bundled tiny model. `eaglevk SUBCOMMAND --help` lists a\n"
      "subcommand's options; README.md and docs/cli.md say more.\n"
      "Example: eaglevk run -d assets/tiny-llama3-eagle3 -p \"The modules described in this chapter\"");
  app.set_version_flag("--version", fmt::format("eaglevk {}", eaglevk_version()));
  eaglevk::cli::add_devices_command(app);
  eaglevk::cli::add_run_command(app);
  eaglevk::cli::add_bench_command(app);
  eaglevk::cli::add_eval_command(app);
  eaglevk::cli::add_eval_merge_command(app);
  eaglevk::cli::add_inspect_command(app);
  eaglevk::cli::add_serve_command(app);
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
    // --help and --version arrive as "errors" with status 0: CLI11 prints what they ask for.
    if (e.get_exit_code() == 0) return app.exit(e);
    fmt::print(stderr, "eaglevk: error: {} (see `eaglevk {}--help`)\n", e.what(),
               app.get_subcommands().empty() ? "" : app.get_subcommands().front()->get_name() + " ");
    return 2;
  }
  try {
    for (CLI::App* sub : app.get_subcommands()) {
      eaglevk::cli::check_values_are_not_flags(*sub);
      const int status = eaglevk::cli::run_selected(*sub);
      // With EAGLEVK_VALIDATE=1 a run the validation layer objected to has not succeeded.
      if (const uint32_t errors = eaglevk::api::validation_errors_in_process()) {
        fmt::print(stderr, "eaglevk: error: the Vulkan validation layer reported {} error(s) (above)\n", errors);
        return status ? status : 1;
      }
      return status;
    }
    fmt::print("{}", app.help());
    return 0;
  } catch (const eaglevk::cli::UsageError& e) {
    fmt::print(stderr, "eaglevk: error: {}\n", eaglevk::cli::message_with_flag(e));
    return 2;
  } catch (const eaglevk::Error& e) {
    fmt::print(stderr, "eaglevk: error: {}\n", eaglevk::cli::message_with_flag(e));
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "eaglevk: error: {}\n", e.what());
    return 1;
  }
}
