// The facade's process-wide switches and lists: the devices there are, the validation layer's
// error count and the profiler, and speculation's limits. They forward to the layers that own
// them, so that front doors (the CLI) need no header below the facade.
#include <eaglevk/eaglevk.hpp>

#include <fmt/format.h>

#include "runtime/engine/decoder.h"
#include "runtime/ops/device_profile.h"
#include "runtime/ops/tree.h"
#include "runtime/vk/context.h"
#include "runtime/vk/switches.h"

namespace eaglevk::api {

std::vector<std::string> describe_devices() {
  std::vector<std::string> out;
  for (const vk::DeviceInfo& info : vk::list_devices()) out.push_back(vk::describe(info));
  return out;
}

std::string describe_environment() {
  std::string out = "Environment (EAGLEVK_*; * marks a variable that is set):\n";
  for (const vk::SwitchInForce& s : vk::switches_in_force()) {
    if (s.declared->test_only && !s.set) continue;
    out += fmt::format("  {} {}={}\n      {}{}\n", s.set ? '*' : ' ', s.declared->name, s.value, s.declared->meaning,
                       s.declared->test_only ? " [test harness]" : "");
  }
  return out;
}

std::vector<std::string> describe_device_profiles() {
  std::vector<std::string> out;
  for (const vk::DeviceInfo& probed : vk::list_devices()) {
    const vk::DeviceInfo info = vk::settled_device_info(probed);
    std::string text = fmt::format("[{}] {}: profile (EAGLEVK_PROFILE_OVERRIDE=key=value,...)\n", info.index, info.name);
    for (const ops::ProfileField& f : ops::profile_fields(ops::device_profile(info)))
      text += fmt::format("    {:<24} {:<8} {}\n", f.key, f.value, f.meaning);
    out.push_back(text);
  }
  return out;
}

std::optional<std::string> environment_switch(const std::string& name) { return vk::switch_text(name); }

uint32_t validation_errors_in_process() { return vk::validation_errors_in_process(); }

void request_profiling() { vk::request_profiling(); }
void profile_reset() { vk::profile_reset(); }
ProfileSummary profile_summary() { return vk::profile_summary(); }
std::string profile_report(const ProfileSummary& summary, uint64_t tokens) { return vk::profile_report(summary, tokens); }
std::string profile_report(uint64_t tokens) { return vk::profile_report(tokens); }

SpeculationLimits speculation_limits() {
  return {engine::kMaxChainDraftTokens, ops::kTreeMaxLevels, ops::kTreeMaxTopK, ops::kTreeMaxNodes};
}

}  // namespace eaglevk::api
