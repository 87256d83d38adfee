#pragma once
// Vulkan result checking that stays on in release builds and throws instead of aborting.
// The exception keeps the VkResult so that callers (the C API) can tell a lost device and an
// exhausted memory from other failures.
#include <vulkan/vulkan.h>

#include <eaglevk/error.h>

namespace eaglevk::vk {

const char* result_name(VkResult result);

struct VulkanError : Error {
  VulkanError(VkResult result, const std::string& message) : Error(message), result(result) {}
  VkResult result;
  bool device_lost() const { return result == VK_ERROR_DEVICE_LOST || result == VK_TIMEOUT; }
  bool out_of_memory() const {
    return result == VK_ERROR_OUT_OF_DEVICE_MEMORY || result == VK_ERROR_OUT_OF_HOST_MEMORY;
  }
};

inline void check(VkResult result, const char* what) {
  if (result != VK_SUCCESS)
    throw VulkanError(result, fmt::format("Vulkan call {} failed: {}", what, result_name(result)));
}

}  // namespace eaglevk::vk

#define EAGLEVK_VK(call) ::eaglevk::vk::check((call), #call)
