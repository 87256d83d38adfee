#pragma once
#include <functional>

#include <CLI/CLI.hpp>

namespace eaglevk::cli {

// Each add_*_command registers a subcommand and the function that runs it.
void add_devices_command(CLI::App& app);
void add_run_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_eval_command(CLI::App& app);
void add_eval_merge_command(CLI::App& app);
void add_inspect_command(CLI::App& app);
void add_serve_command(CLI::App& app);
void register_runner(CLI::App* sub, std::function<int()> run);
int run_selected(CLI::App& sub);

}  // namespace eaglevk::cli
