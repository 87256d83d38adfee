#include "runtime/vk/features.h"

#include <cstring>

#include <fmt/format.h>

#include "runtime/vk/coopmat.h"

namespace eaglevk::vk {

const char* device_type_name(VkPhysicalDeviceType type) {
  switch (type) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete GPU";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated GPU";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual GPU";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "CPU";
    default: return "other";
  }
}

bool has_device_extension(VkPhysicalDevice device, const char* name) {
  uint32_t count = 0;
  vkEnumerateDeviceExtensionProperties(device, nullptr, &count, nullptr);
  std::vector<VkExtensionProperties> extensions(count);
  vkEnumerateDeviceExtensionProperties(device, nullptr, &count, extensions.data());
  for (const auto& e : extensions)
    if (std::strcmp(e.extensionName, name) == 0) return true;
  return false;
}

DeviceInfo probe_device(VkInstance instance, VkPhysicalDevice device, uint32_t index) {
  VkPhysicalDeviceDriverProperties driver{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
  VkPhysicalDeviceSubgroupSizeControlProperties size_control{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES, &driver};
  VkPhysicalDeviceProperties basic;
  vkGetPhysicalDeviceProperties(device, &basic);
  // The instance asks for Vulkan 1.2, so size control is used through its extension (which
  // 1.3 drivers still list); its structures are the 1.3 core ones.
  const bool has_size_control = has_device_extension(device, VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME);
  VkPhysicalDeviceSubgroupProperties subgroup{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES,
                                              has_size_control ? static_cast<void*>(&size_control) : &driver};
  VkPhysicalDeviceMaintenance3Properties maint3{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES, &subgroup};
  VkPhysicalDeviceProperties2 props{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, &maint3};
  vkGetPhysicalDeviceProperties2(device, &props);

  VkPhysicalDeviceSubgroupSizeControlFeatures size_control_features{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES};
  VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
                                       has_size_control ? &size_control_features : nullptr};
  VkPhysicalDeviceVulkan11Features f11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES, &f12};
  VkPhysicalDeviceFeatures2 features{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, &f11};
  vkGetPhysicalDeviceFeatures2(device, &features);

  DeviceInfo info;
  info.index = index;
  info.name = props.properties.deviceName;
  info.type = props.properties.deviceType;
  info.vendor_id = props.properties.vendorID;
  info.device_id = props.properties.deviceID;
  info.api_version = props.properties.apiVersion;
  info.driver = fmt::format("{} {}", driver.driverName, driver.driverInfo);
  info.driver_id = uint32_t(driver.driverID);

  DeviceFeatures& f = info.features;
  f.fp16_arithmetic = f12.shaderFloat16;
  f.int8_arithmetic = f12.shaderInt8;
  f.storage_16bit = f11.storageBuffer16BitAccess;
  f.storage_8bit = f12.storageBuffer8BitAccess;
  f.buffer_device_address = f12.bufferDeviceAddress;
  f.subgroup_size = subgroup.subgroupSize;
  // Vulkan 1.3 core / VK_EXT_subgroup_size_control; zero where unsupported.
  f.min_subgroup_size = size_control.minSubgroupSize ? size_control.minSubgroupSize : subgroup.subgroupSize;
  f.max_subgroup_size = size_control.maxSubgroupSize ? size_control.maxSubgroupSize : subgroup.subgroupSize;
  f.subgroup_size_control = has_size_control && size_control_features.subgroupSizeControl &&
                            size_control_features.computeFullSubgroups &&
                            (size_control.requiredSubgroupSizeStages & VK_SHADER_STAGE_COMPUTE_BIT);
  f.max_compute_workgroup_subgroups = size_control.maxComputeWorkgroupSubgroups;
  bool compute = subgroup.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT;
  f.subgroup_arithmetic = compute && (subgroup.supportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT);
  f.subgroup_shuffle = compute && (subgroup.supportedOperations & VK_SUBGROUP_FEATURE_SHUFFLE_BIT);
  f.subgroup_ballot = compute && (subgroup.supportedOperations & VK_SUBGROUP_FEATURE_BALLOT_BIT);
  const VkPhysicalDeviceLimits& limits = props.properties.limits;
  f.max_storage_buffer_range = limits.maxStorageBufferRange;
  f.min_storage_buffer_offset_alignment = limits.minStorageBufferOffsetAlignment;
  f.min_texel_buffer_offset_alignment = limits.minTexelBufferOffsetAlignment;
  f.max_texel_buffer_elements = limits.maxTexelBufferElements;
  f.storage_texel_buffers = true;
  for (VkFormat format : {VK_FORMAT_R32_SFLOAT, VK_FORMAT_R32_UINT, VK_FORMAT_R32G32B32A32_SFLOAT,
                          VK_FORMAT_R32G32B32A32_UINT}) {
    VkFormatProperties fp;
    vkGetPhysicalDeviceFormatProperties(device, format, &fp);
    f.storage_texel_buffers &= bool(fp.bufferFeatures & VK_FORMAT_FEATURE_STORAGE_TEXEL_BUFFER_BIT);
  }
  f.max_compute_shared_memory = limits.maxComputeSharedMemorySize;
  f.max_workgroup_invocations = limits.maxComputeWorkGroupInvocations;
  for (int i = 0; i < 3; ++i) f.max_workgroup_count[i] = limits.maxComputeWorkGroupCount[i];
  f.max_memory_allocation = maint3.maxMemoryAllocationSize;
  f.timestamp_period_ns = limits.timestampPeriod;
  const CoopmatShape coopmat = probe_coopmat_f16(instance, device);
  f.coopmat_m = coopmat.m;
  f.coopmat_n = coopmat.n;
  f.coopmat_k = coopmat.k;

  VkPhysicalDeviceMemoryProperties memory;
  vkGetPhysicalDeviceMemoryProperties(device, &memory);
  for (uint32_t i = 0; i < memory.memoryHeapCount; ++i)
    f.heaps.push_back({memory.memoryHeaps[i].size, bool(memory.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT)});

  uint32_t family_count = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(device, &family_count, nullptr);
  std::vector<VkQueueFamilyProperties> families(family_count);
  vkGetPhysicalDeviceQueueFamilyProperties(device, &family_count, families.data());
  for (const auto& family : families)
    if ((family.queueFlags & VK_QUEUE_COMPUTE_BIT) && family.timestampValidBits > 0) f.timestamps = true;
  info.arch = detect_architecture(info);
  return info;
}

std::string describe(const DeviceInfo& info) {
  const DeviceFeatures& f = info.features;
  std::string heaps;
  for (const MemoryHeap& heap : f.heaps)
    heaps += fmt::format("{}{:.1f} GiB{}", heaps.empty() ? "" : ", ", heap.bytes / double(1ull << 30),
                         heap.device_local ? " (device-local)" : "");
  auto yes = [](bool b) { return b ? "yes" : "no"; };
  return fmt::format(
      "[{}] {} ({}, Vulkan {}.{}.{}, {})\n"
      "    architecture: {} (vendor {:#06x}, device {:#06x})\n"
      "    fp16 arithmetic: {}   int8 arithmetic: {}   16-bit storage: {}   8-bit storage: {}\n"
      "    subgroup size: {}{}   subgroup arithmetic: {}   shuffle: {}   ballot: {}\n"
      "    maxStorageBufferRange: {} MiB   maxComputeSharedMemorySize: {} KiB   max workgroup: {}\n"
      "    buffer device address: {}   storage texel buffers: {}   timestamps: {} ({} ns/tick)\n"
      "    cooperative matrices (f16, f32 sums): {}\n"
      "    memory heaps: {}\n",
      info.index, info.name, device_type_name(info.type), VK_API_VERSION_MAJOR(info.api_version),
      VK_API_VERSION_MINOR(info.api_version), VK_API_VERSION_PATCH(info.api_version), info.driver,
      architecture_name(info.arch), info.vendor_id, info.device_id, yes(f.fp16_arithmetic), yes(f.int8_arithmetic), yes(f.storage_16bit), yes(f.storage_8bit), f.subgroup_size,
      f.subgroup_size_control
          ? fmt::format(" (of {}..{}, required with full subgroups)", f.min_subgroup_size, f.max_subgroup_size)
          : std::string(),
      yes(f.subgroup_arithmetic), yes(f.subgroup_shuffle), yes(f.subgroup_ballot), f.max_storage_buffer_range >> 20,
      f.max_compute_shared_memory >> 10, f.max_workgroup_invocations, yes(f.buffer_device_address),
      yes(f.storage_texel_buffers), yes(f.timestamps), f.timestamp_period_ns,
      f.coopmat_m ? fmt::format("{}x{}x{}", f.coopmat_m, f.coopmat_n, f.coopmat_k) : std::string("no"), heaps);
}

}  // namespace eaglevk::vk
