#pragma once
// What a physical device can do, probed once and kept in one plain struct.
#include <cstdint>
#include <string>
#include <vector>

#include <vulkan/vulkan.h>

#include "runtime/vk/architecture.h"

namespace eaglevk::vk {

struct MemoryHeap {
  uint64_t bytes = 0;
  bool device_local = false;
};

struct DeviceFeatures {
  bool fp16_arithmetic = false;     // shaderFloat16
  bool int8_arithmetic = false;     // shaderInt8
  bool storage_16bit = false;       // storageBuffer16BitAccess
  bool storage_8bit = false;        // storageBuffer8BitAccess
  bool buffer_device_address = false;
  uint32_t subgroup_size = 0;
  uint32_t min_subgroup_size = 0, max_subgroup_size = 0;  // differ where the driver picks per shader
  // VK_EXT_subgroup_size_control (core in Vulkan 1.3) for compute shaders, with
  // computeFullSubgroups: a pipeline can require one subgroup size in min..max and only full
  // subgroups, so that a kernel knows its subgroups where the driver would otherwise pick.
  bool subgroup_size_control = false;
  uint32_t max_compute_workgroup_subgroups = 0;
  bool subgroup_arithmetic = false;  // subgroupAdd/Max in compute
  bool subgroup_shuffle = false;
  bool subgroup_ballot = false;
  uint64_t max_storage_buffer_range = 0;
  uint64_t min_storage_buffer_offset_alignment = 0;
  // Storage texel buffers of r32f, r32ui, rgba32f and rgba32ui (kernels' texel-load variants).
  bool storage_texel_buffers = false;
  uint64_t min_texel_buffer_offset_alignment = 0;
  uint64_t max_texel_buffer_elements = 0;
  uint32_t max_compute_shared_memory = 0;
  uint32_t max_workgroup_invocations = 0;
  uint32_t max_workgroup_count[3] = {0, 0, 0};  // maxComputeWorkGroupCount (65,535 on Mesa)
  uint64_t max_memory_allocation = 0;
  std::vector<MemoryHeap> heaps;
  // The matrix shape of VK_KHR_cooperative_matrix the prefill GEMM's coopmat kernel would run
  // (coopmat.h: probe_coopmat_f16), m = 0 where there is none.
  uint32_t coopmat_m = 0, coopmat_n = 0, coopmat_k = 0;
  bool timestamps = false;          // compute queue supports timestamps
  float timestamp_period_ns = 0;
};

struct DeviceInfo {
  uint32_t index = 0;
  std::string name;
  VkPhysicalDeviceType type = VK_PHYSICAL_DEVICE_TYPE_OTHER;
  uint32_t vendor_id = 0;  // PCI vendor: vendor::kNvidia, kAmd, kIntel (architecture.h)
  uint32_t device_id = 0;  // the vendor's PCI device id
  uint32_t api_version = 0;
  std::string driver;
  uint32_t driver_id = 0;  // VkDriverId (VK_DRIVER_ID_MESA_LLVMPIPE, VK_DRIVER_ID_MOLTENVK, ...)
  // Worked out once from the above and the probed subgroup sizes (detect_architecture).
  Architecture arch = Architecture::Unknown;
  DeviceFeatures features;
};

const char* device_type_name(VkPhysicalDeviceType type);
bool has_device_extension(VkPhysicalDevice device, const char* name);
DeviceInfo probe_device(VkInstance instance, VkPhysicalDevice device, uint32_t index);

// Human-readable multi-line description, as `eaglevk devices` prints it.
std::string describe(const DeviceInfo& info);

}  // namespace eaglevk::vk
