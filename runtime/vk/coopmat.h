#pragma once
// Cooperative matrices (VK_KHR_cooperative_matrix): what the prefill GEMM's coopmat kernel needs
// of a device. Debian 12's Vulkan headers (1.3.239) predate the extension, so its few
// declarations are given here where the headers lack them.
#include <vulkan/vulkan.h>

#ifndef VK_KHR_cooperative_matrix
#define VK_KHR_cooperative_matrix 1
#define VK_KHR_COOPERATIVE_MATRIX_EXTENSION_NAME "VK_KHR_cooperative_matrix"
inline constexpr VkStructureType VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR =
    VkStructureType(1000506000);
inline constexpr VkStructureType VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR = VkStructureType(1000506001);
inline constexpr VkStructureType VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_PROPERTIES_KHR =
    VkStructureType(1000506002);
enum VkComponentTypeKHR { VK_COMPONENT_TYPE_FLOAT16_KHR = 0, VK_COMPONENT_TYPE_FLOAT32_KHR = 1 };
enum VkScopeKHR { VK_SCOPE_SUBGROUP_KHR = 3 };
struct VkCooperativeMatrixPropertiesKHR {
  VkStructureType sType;
  void* pNext;
  uint32_t MSize, NSize, KSize;
  VkComponentTypeKHR AType, BType, CType, ResultType;
  VkBool32 saturatingAccumulation;
  VkScopeKHR scope;
};
struct VkPhysicalDeviceCooperativeMatrixPropertiesKHR {
  VkStructureType sType;
  void* pNext;
  VkShaderStageFlags cooperativeMatrixSupportedStages;
};
struct VkPhysicalDeviceCooperativeMatrixFeaturesKHR {
  VkStructureType sType;
  void* pNext;
  VkBool32 cooperativeMatrix;
  VkBool32 cooperativeMatrixRobustBufferAccess;
};
typedef VkResult(VKAPI_PTR* PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR)(
    VkPhysicalDevice, uint32_t*, VkCooperativeMatrixPropertiesKHR*);
#endif

namespace eaglevk::vk {

// The matrix shape the GEMM's coopmat kernel runs on a device: A is m x k, B k x n, of f16 with
// f32 accumulators at subgroup scope; all zero where the device lacks the extension, its
// feature, compute shaders among its stages, such a shape with m, n, k of 8 or 16 (NVIDIA and
// AMD list 16 x 16 x 16, Intel 8 x 16 x 16, lavapipe 8 x 8 x 8), f16 arithmetic or the Vulkan
// memory model (the kernel's SPIR-V declares both). The largest such shape wins.
struct CoopmatShape {
  uint32_t m = 0, n = 0, k = 0;
};
CoopmatShape probe_coopmat_f16(VkInstance instance, VkPhysicalDevice device);

}  // namespace eaglevk::vk
