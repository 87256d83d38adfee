#include "runtime/vk/coopmat.h"

#include <vector>

#include "runtime/vk/features.h"

namespace eaglevk::vk {

CoopmatShape probe_coopmat_f16(VkInstance instance, VkPhysicalDevice device) {
  if (!has_device_extension(device, VK_KHR_COOPERATIVE_MATRIX_EXTENSION_NAME)) return {};
  VkPhysicalDeviceCooperativeMatrixFeaturesKHR coopmat{};
  coopmat.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR;
  VkPhysicalDeviceVulkan12Features f12{};
  f12.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES;
  f12.pNext = &coopmat;
  VkPhysicalDeviceFeatures2 features{};
  features.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
  features.pNext = &f12;
  vkGetPhysicalDeviceFeatures2(device, &features);
  if (!coopmat.cooperativeMatrix || !f12.shaderFloat16 || !f12.vulkanMemoryModel) return {};
  VkPhysicalDeviceCooperativeMatrixPropertiesKHR stages{};
  stages.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_PROPERTIES_KHR;
  VkPhysicalDeviceProperties2 properties2{};
  properties2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
  properties2.pNext = &stages;
  vkGetPhysicalDeviceProperties2(device, &properties2);
  if (!(stages.cooperativeMatrixSupportedStages & VK_SHADER_STAGE_COMPUTE_BIT)) return {};
  auto properties = reinterpret_cast<PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR>(
      vkGetInstanceProcAddr(instance, "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR"));
  if (!properties) return {};
  uint32_t count = 0;
  if (properties(device, &count, nullptr) != VK_SUCCESS || count == 0) return {};
  VkCooperativeMatrixPropertiesKHR blank{};
  blank.sType = VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR;
  std::vector<VkCooperativeMatrixPropertiesKHR> shapes(count, blank);
  if (properties(device, &count, shapes.data()) < 0) return {};
  CoopmatShape best;
  auto fits = [](uint32_t d) { return d == 8 || d == 16; };  // a divisor of the kernel's 32-wide steps
  for (const auto& s : shapes)
    if (fits(s.MSize) && fits(s.NSize) && fits(s.KSize) && s.AType == VK_COMPONENT_TYPE_FLOAT16_KHR &&
        s.BType == VK_COMPONENT_TYPE_FLOAT16_KHR && s.CType == VK_COMPONENT_TYPE_FLOAT32_KHR &&
        s.ResultType == VK_COMPONENT_TYPE_FLOAT32_KHR && !s.saturatingAccumulation &&
        s.scope == VK_SCOPE_SUBGROUP_KHR &&
        s.MSize * s.NSize * s.KSize > best.m * best.n * best.k)
      best = {s.MSize, s.NSize, s.KSize};
  return best;
}

}  // namespace eaglevk::vk
