#pragma once
// Fault injection for tests: makes a later queue submission, fence wait or memory allocation
// report a chosen VkResult instead of running, so that the handling of a lost device, a hung
// queue (VK_TIMEOUT) or exhausted memory can be tested on a device that never fails. Off unless
// a test arms it; one relaxed atomic load per call otherwise.
#include <cstdint>

#include <vulkan/vulkan.h>

namespace eaglevk::vk {

enum class FaultPoint { Submit, Wait, Allocation };

// The call at `point` after `skip` more successful ones returns `result`, once.
void inject_fault(FaultPoint point, VkResult result, uint32_t skip = 0);
// Disarms every point.
void clear_faults();
// VK_SUCCESS, or the armed result when this call is the one to fail.
VkResult take_fault(FaultPoint point);

}  // namespace eaglevk::vk
