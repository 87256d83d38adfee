#pragma once
// The Vulkan instance, the chosen physical device, one logical device and its compute queue.
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <vulkan/vulkan.h>

#include "runtime/vk/features.h"

namespace eaglevk::vk {

struct VulkanError;

struct ContextOptions {
  // A device index ("1") or a case-insensitive substring of its name; empty picks the best:
  // discrete GPU, then integrated, then virtual, then CPU (lavapipe).
  std::string device;
  // Enable the Khronos validation layer with synchronization validation. Defaults to the
  // environment variable EAGLEVK_VALIDATE (runtime/vk/switches.h).
  bool validate = false;
  // Keep each pipeline's compiler statistics (registers, spills, instructions: the driver's
  // VK_KHR_pipeline_executable_properties, where offered) for pipeline_statistics(). Defaults
  // to EAGLEVK_PIPELINE_STATISTICS=1; the GPU check's kernel table sets it.
  bool pipeline_statistics = false;
  static ContextOptions from_env();
};

// Validation messages of error severity seen by every context of this process since it
// started, instance and device creation included: the tests and `EAGLEVK_VALIDATE=1` runs of
// the CLI fail when it is not zero.
uint32_t validation_errors_in_process();

// Enumerates the physical devices without creating a logical device.
std::vector<DeviceInfo> list_devices();
// `info` as every kernel on a Context made on it sees it: with the subgroup size the Context
// requires (the driver's default, 16 on Intel GPUs, or the profile's subgroup.size) and the
// workgroup limit that follows. For describing a device's profile without opening it.
DeviceInfo settled_device_info(const DeviceInfo& probed);

struct Context {
  VkInstance instance = VK_NULL_HANDLE;
  VkDebugUtilsMessengerEXT messenger = VK_NULL_HANDLE;
  VkPhysicalDevice physical = VK_NULL_HANDLE;
  VkDevice device = VK_NULL_HANDLE;
  VkQueue queue = VK_NULL_HANDLE;
  uint32_t queue_family = 0;
  // As probed, except where every pipeline requires one subgroup size (required_subgroup_size):
  // then subgroup_size, min_subgroup_size and max_subgroup_size are all that size, which is what
  // every kernel sees.
  DeviceInfo info;
  // The subgroup size every compute pipeline requires (VK_EXT_subgroup_size_control; full
  // subgroups where the workgroup's x is a multiple of it), or 0 where the device cannot: the
  // driver's default size, or the profile's subgroup.size within the device's range.
  uint32_t required_subgroup_size = 0;
  bool driver_picks_subgroup_size = false;  // as probed: minSubgroupSize < maxSubgroupSize
  VkPhysicalDeviceMemoryProperties memory{};
  bool validation = false;
  // Pipelines are created with their statistics captured (ContextOptions::pipeline_statistics
  // on a device that offers VK_KHR_pipeline_executable_properties).
  bool pipeline_statistics = false;

  // Validation messages of error severity seen so far; tests fail when it grows.
  std::atomic<uint32_t> validation_errors{0};

  // The largest range a single storage-buffer binding may cover. Starts at the device limit;
  // tests lower it to exercise the row-chunking paths on small tensors.
  uint64_t max_binding_range = 0;
  // The most workgroups one dispatch may launch per dimension. Starts at the device limit;
  // tests lower it to exercise the two-dimensional grids that large dispatches fold into.
  uint32_t max_workgroups[3] = {0, 0, 0};
  // The largest single allocation (maxMemoryAllocationSize; 2 GiB on lavapipe). Starts at the
  // device limit; tests lower it.
  uint64_t max_allocation = 0;
  // Device memory eaglevk may use: the largest device-local heap's budget
  // (VK_EXT_memory_budget, which subtracts what other processes hold) or else its size, capped
  // by EAGLEVK_DEVICE_MEMORY (bytes, or with a K/M/G suffix) for users sharing a GPU and for
  // tests. Loaders compare their needs with it before uploading anything.
  uint64_t memory_budget = 0;
  std::string memory_budget_source;  // how memory_budget was found, for messages
  // System memory eaglevk may fill with weights the device reads over the bus (routed experts
  // in host memory): /proc/meminfo's MemAvailable, capped by EAGLEVK_HOST_MEMORY (same syntax
  // as EAGLEVK_DEVICE_MEMORY) for tests and for users who keep memory for other programs.
  uint64_t host_memory_budget = 0;
  std::string host_memory_budget_source;
  // Told the bytes of each weight upload as it is submitted (an application's progress bar).
  std::function<void(uint64_t bytes)> on_upload;

  // Set when a submission or wait reported VK_ERROR_DEVICE_LOST or did not finish within
  // fence_timeout_ns: nothing more is recorded or allocated on this device (each attempt
  // throws VulkanError(VK_ERROR_DEVICE_LOST)); the objects can still be destroyed.
  mutable std::atomic<bool> lost{false};
  // How long a fence wait may take before the device counts as hung: 600 s on a GPU, 7200 s
  // on a CPU device (lavapipe), where one large prefill submission takes minutes;
  // EAGLEVK_FENCE_TIMEOUT (seconds) overrides both.
  uint64_t fence_timeout_ns = 0;
  // Throws VulkanError(VK_ERROR_DEVICE_LOST) once the device is lost.
  void check_usable() const;
  // Throws `e`, first marking the device lost when `e` says so (a lost or hung device).
  [[noreturn]] void raise(const VulkanError& e) const;
  // EAGLEVK_VK for the calls that can lose the device (submission, fence waits): a failure
  // goes through raise().
  void check_result(VkResult result, const char* what) const;

  explicit Context(const ContextOptions& options = ContextOptions::from_env());
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  void release();
  // The first type in type_bits with the required flags, preferring those that also have the
  // preferred ones and, before that, those that lack the avoided ones.
  uint32_t find_memory_type(uint32_t type_bits, VkMemoryPropertyFlags required, VkMemoryPropertyFlags preferred,
                            VkMemoryPropertyFlags avoided = 0) const;
};

}  // namespace eaglevk::vk
