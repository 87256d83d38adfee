// The facade's process-wide switches and lists: the devices there are, the validation layer's
// error count and the profiler, and speculation's limits. They forward to the layers that own
// them, so that front doors (the CLI) need no header below the facade.
#include <eaglevk/eaglevk.hpp>

#include "runtime/engine/decoder.h"
#include "runtime/ops/tree.h"
#include "runtime/vk/context.h"

namespace eaglevk::api {

std::vector<std::string> describe_devices() {
  std::vector<std::string> out;
  for (const vk::DeviceInfo& info : vk::list_devices()) out.push_back(vk::describe(info));
  return out;
}

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
