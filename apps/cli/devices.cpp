#include <map>

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
  sub->footer("Example: eaglevk devices");
  register_runner(sub, [] {
    for (const std::string& device : api::describe_devices()) fmt::print("{}", device);
    return 0;
  });
}

}  // namespace eaglevk::cli
