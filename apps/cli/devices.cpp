#include <map>
#include <memory>

#include <fmt/core.h>

#include <eaglevk/eaglevk.hpp>

#include "apps/cli/commands.h"

namespace eaglevk::cli {

namespace {
std::map<const CLI::App*, std::function<int()>>& runners() {
  static std::map<const CLI::App*, std::function<int()>> table;
  return table;
}
}  // namespace

void register_runner(CLI::App* sub, std::function<int()> run) { runners()[sub] = std::move(run); }

int run_selected(CLI::App& sub) { return runners().at(&sub)(); }

void add_devices_command(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("devices", "List Vulkan devices and their probed features");
  auto verbose = std::make_shared<bool>(false);
  sub->add_flag("--env,--verbose,-v", *verbose,
                "also the EAGLEVK_* variables in force and each device's profile");
  sub->footer("Example: eaglevk devices --env");
  register_runner(sub, [verbose] {
    for (const std::string& device : api::describe_devices()) fmt::print("{}", device);
    if (!*verbose) return 0;
    fmt::print("\n{}", api::describe_environment());
    for (const std::string& profile : api::describe_device_profiles()) fmt::print("\n{}", profile);
    return 0;
  });
}

}  // namespace eaglevk::cli
