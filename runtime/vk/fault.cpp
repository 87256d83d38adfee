#include "runtime/vk/fault.h"

#include <atomic>

namespace eaglevk::vk {
namespace {

struct Armed {
  std::atomic<bool> on{false};
  std::atomic<int64_t> skip{0};
  std::atomic<int32_t> result{VK_SUCCESS};
};

Armed armed[3];

Armed& at(FaultPoint point) { return armed[static_cast<int>(point)]; }

}  // namespace

void inject_fault(FaultPoint point, VkResult result, uint32_t skip) {
  Armed& a = at(point);
  a.result = result;
  a.skip = skip;
  a.on = true;
}

void clear_faults() {
  for (Armed& a : armed) a.on = false;
}

VkResult take_fault(FaultPoint point) {
  Armed& a = at(point);
  if (!a.on.load(std::memory_order_relaxed)) return VK_SUCCESS;
  if (a.skip.fetch_sub(1) > 0) return VK_SUCCESS;
  a.on = false;
  return VkResult(a.result.load());
}

}  // namespace eaglevk::vk
