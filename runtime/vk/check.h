#pragma once
// Vulkan result checking that stays on in release builds and throws instead of aborting.
#include <vulkan/vulkan.h>

#include <eaglevk/error.h>

namespace eaglevk::vk {

const char* result_name(VkResult result);

inline void check(VkResult result, const char* what) {
  if (result != VK_SUCCESS) fail("Vulkan call {} failed: {}", what, result_name(result));
}

}  // namespace eaglevk::vk

#define EAGLEVK_VK(call) ::eaglevk::vk::check((call), #call)
