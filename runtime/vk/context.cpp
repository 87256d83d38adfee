#include "runtime/vk/context.h"

#include <algorithm>
#include <charconv>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>

#include <unistd.h>

#include <fmt/core.h>

#include "runtime/vk/check.h"
#include "runtime/vk/coopmat.h"
#include "runtime/vk/profile_settings.h"
#include "runtime/vk/switches.h"
#include "runtime/vk/validation_count.h"
#include "runtime/vk/validation_ignore.h"

namespace eaglevk::vk {

const char* result_name(VkResult result) {
  switch (result) {
    case VK_ERROR_OUT_OF_HOST_MEMORY: return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_INITIALIZATION_FAILED: return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST: return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_LAYER_NOT_PRESENT: return "VK_ERROR_LAYER_NOT_PRESENT";
    case VK_ERROR_EXTENSION_NOT_PRESENT: return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_FEATURE_NOT_PRESENT: return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_ERROR_INCOMPATIBLE_DRIVER: return "VK_ERROR_INCOMPATIBLE_DRIVER (no Vulkan driver found)";
    case VK_ERROR_TOO_MANY_OBJECTS: return "VK_ERROR_TOO_MANY_OBJECTS";
    case VK_ERROR_OUT_OF_POOL_MEMORY: return "VK_ERROR_OUT_OF_POOL_MEMORY";
    case VK_TIMEOUT: return "VK_TIMEOUT";
    default: return "VkResult error";
  }
}

ContextOptions ContextOptions::from_env() {
  ContextOptions options;
  options.validate = switch_bool("EAGLEVK_VALIDATE");
  if (std::optional<std::string> device = switch_value("EAGLEVK_DEVICE")) options.device = *device;
  options.pipeline_statistics = switch_bool("EAGLEVK_PIPELINE_STATISTICS");
  return options;
}

namespace {

std::atomic<uint32_t> process_validation_errors{0};
std::atomic<uint32_t> process_ignored_validation_errors{0};

bool ignored(int32_t message_id) {
  const auto& ids = ignored_validation_ids_in_process();
  return std::find(ids.begin(), ids.end(), static_cast<uint32_t>(message_id)) != ids.end();
}

// `user` is the Context, or null for the messages of vkCreateInstance/vkDestroyInstance
// themselves (reported through the create info chained into the instance's).
VkBool32 VKAPI_PTR on_validation_message(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                         VkDebugUtilsMessageTypeFlagsEXT,
                                         const VkDebugUtilsMessengerCallbackDataEXT* data, void* user) {
  if ((severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT) && ignored(data->messageIdNumber)) {
    process_ignored_validation_errors.fetch_add(1);
    fmt::print(stderr, "eaglevk: validation error (ignored, EAGLEVK_VALIDATION_IGNORE): {}\n", data->pMessage);
  } else if (severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT) {
    process_validation_errors.fetch_add(1);
    if (user) static_cast<Context*>(user)->validation_errors.fetch_add(1);
    fmt::print(stderr, "eaglevk: validation error: {}\n", data->pMessage);
  } else if (severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT) {
    fmt::print(stderr, "eaglevk: validation warning: {}\n", data->pMessage);
  }
  return VK_FALSE;
}

VkDebugUtilsMessengerCreateInfoEXT messenger_info(Context* user) {
  VkDebugUtilsMessengerCreateInfoEXT info{VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
  info.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT;
  info.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT |
                     VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
  info.pfnUserCallback = on_validation_message;
  info.pUserData = user;
  return info;
}

bool has_layer(const char* name) {
  uint32_t count = 0;
  vkEnumerateInstanceLayerProperties(&count, nullptr);
  std::vector<VkLayerProperties> layers(count);
  vkEnumerateInstanceLayerProperties(&count, layers.data());
  return std::any_of(layers.begin(), layers.end(), [&](auto& l) { return std::strcmp(l.layerName, name) == 0; });
}

VkInstance create_instance(bool validate) {
  VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.pApplicationName = "eaglevk";
  app.apiVersion = VK_API_VERSION_1_2;
  VkInstanceCreateInfo create{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  create.pApplicationInfo = &app;

  const char* layer = "VK_LAYER_KHRONOS_validation";
  const char* extension = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
  VkValidationFeatureEnableEXT enables[] = {VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT};
  VkValidationFeaturesEXT features{VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT};
  features.enabledValidationFeatureCount = 1;
  features.pEnabledValidationFeatures = enables;
  VkDebugUtilsMessengerCreateInfoEXT instance_messages = messenger_info(nullptr);
  features.pNext = &instance_messages;
  if (validate) {
    ignored_validation_ids_in_process();  // a malformed EAGLEVK_VALIDATION_IGNORE fails here
    if (!has_layer(layer))
      fail("EAGLEVK_VALIDATE=1 but {} is not installed (Debian: apt-get install vulkan-validationlayers)", layer);
    create.enabledLayerCount = 1;
    create.ppEnabledLayerNames = &layer;
    create.enabledExtensionCount = 1;
    create.ppEnabledExtensionNames = &extension;
    create.pNext = &features;
  }
  VkInstance instance = VK_NULL_HANDLE;
  VkResult result = vkCreateInstance(&create, nullptr, &instance);
  if (result != VK_SUCCESS)
    fail("cannot create a Vulkan instance ({}); is a Vulkan driver installed? (Debian: mesa-vulkan-drivers)",
         result_name(result));
  return instance;
}

std::vector<VkPhysicalDevice> physical_devices(VkInstance instance) {
  uint32_t count = 0;
  EAGLEVK_VK(vkEnumeratePhysicalDevices(instance, &count, nullptr));
  std::vector<VkPhysicalDevice> devices(count);
  EAGLEVK_VK(vkEnumeratePhysicalDevices(instance, &count, devices.data()));
  return devices;
}

int type_rank(VkPhysicalDeviceType type) {
  switch (type) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return 0;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return 1;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return 2;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return 3;
    default: return 4;
  }
}

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

uint32_t choose_device(const std::vector<DeviceInfo>& infos, const std::string& wanted) {
  if (infos.empty()) fail("no Vulkan device found (on a machine without a GPU install mesa-vulkan-drivers)");
  if (wanted.empty()) {
    auto best = std::min_element(infos.begin(), infos.end(),
                                 [](auto& a, auto& b) { return type_rank(a.type) < type_rank(b.type); });
    return best->index;
  }
  if (std::all_of(wanted.begin(), wanted.end(), ::isdigit)) {
    // Digits past any device count (20 of them overflow stoul) are simply out of range.
    uint64_t index = 0;
    const auto [end, ec] = std::from_chars(wanted.data(), wanted.data() + wanted.size(), index);
    if (ec != std::errc() || end != wanted.data() + wanted.size() || index >= infos.size())
      fail("device index {} out of range: {} device(s) found (see `eaglevk devices`)",
           wanted.size() > 24 ? wanted.substr(0, 24) + "..." : wanted, infos.size());
    return uint32_t(index);
  }
  for (const DeviceInfo& info : infos)
    if (lower(info.name).find(lower(wanted)) != std::string::npos) return info.index;
  fail("no Vulkan device matches '{}' (see `eaglevk devices`)", wanted);
}

uint32_t compute_queue_family(VkPhysicalDevice physical) {
  uint32_t count = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(physical, &count, nullptr);
  std::vector<VkQueueFamilyProperties> families(count);
  vkGetPhysicalDeviceQueueFamilyProperties(physical, &count, families.data());
  // Prefer a compute queue that also does graphics: it is the one with timestamps everywhere.
  for (uint32_t i = 0; i < count; ++i)
    if (families[i].queueFlags & VK_QUEUE_COMPUTE_BIT) return i;
  fail("the chosen Vulkan device has no compute queue");
}

}  // namespace

std::vector<DeviceInfo> list_devices() {
  check_environment();
  VkInstance instance = create_instance(false);
  std::vector<DeviceInfo> infos;
  try {
    auto devices = physical_devices(instance);
    for (uint32_t i = 0; i < devices.size(); ++i) infos.push_back(probe_device(instance, devices[i], i));
  } catch (...) {
    vkDestroyInstance(instance, nullptr);
    throw;
  }
  vkDestroyInstance(instance, nullptr);
  return infos;
}

namespace {

// The subgroup size every pipeline will require: the driver's default (16 on Intel's GPUs, as
// llama.cpp requires there for its matrix-vector kernels: the driver's 32 halves the lanes that
// hold loads in flight per thread), or the profile's subgroup.size (a power of two in the
// device's range) to try another on a device that offers several. The one profile key read
// here rather than in ops: every pipeline is created with it.
uint32_t choose_subgroup_size(const DeviceInfo& info, const std::optional<ProfileSetting>& given) {
  const DeviceFeatures& f = info.features;
  if (!given) {
    if (info.vendor_id == vendor::kIntel && info.type != VK_PHYSICAL_DEVICE_TYPE_CPU && f.min_subgroup_size <= 16 &&
        16 <= f.max_subgroup_size)
      return 16;
    return f.subgroup_size;
  }
  const std::string what = fmt::format("{}: subgroup.size", given->source);
  const uint64_t size = parse_switch_uint(what, given->value, 1, 1024);
  if ((size & (size - 1)) || size < f.min_subgroup_size || size > f.max_subgroup_size)
    fail("{}={}: device '{}' runs subgroups of a power of two from {} to {}", what, given->value, info.name,
         f.min_subgroup_size, f.max_subgroup_size);
  return uint32_t(size);
}

// "12G", "512M", "4096" -> bytes; 0 for text that is not a size.
uint64_t parse_size(const std::string& text) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    return 0;
  }
  std::string unit = text.substr(used);
  double scale = unit.empty() || unit == "B" ? 1
                 : unit == "K" || unit == "KiB" ? 1024.0
                 : unit == "M" || unit == "MiB" ? 1024.0 * 1024
                 : unit == "G" || unit == "GiB" ? 1024.0 * 1024 * 1024
                                                 : 0;
  // Past 2^64 bytes (or inf) is not a size: the cast would be undefined.
  const double bytes = value * scale;
  return bytes > 0 && bytes < 18446744073709551616.0 ? uint64_t(bytes) : 0;
}

// MemAvailable (free plus reclaimable page cache), else all physical memory.
uint64_t host_memory_available() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  while (meminfo >> key >> kib) {
    if (key == "MemAvailable:") return kib * 1024;
    meminfo.ignore(64, '\n');
  }
  return uint64_t(::sysconf(_SC_PHYS_PAGES)) * uint64_t(::sysconf(_SC_PAGESIZE));
}

// Lowers `budget` to the size the environment variable `name` gives, when it is smaller.
void cap_by_env(uint64_t& budget, std::string& source, const char* name) {
  const std::optional<std::string> env = switch_value(name);
  if (!env) return;
  const uint64_t cap = parse_size(*env);
  if (cap == 0) fail("{}='{}' is not a size (e.g. 8G, 512M, 4096)", name, *env);
  if (cap < budget) {
    budget = cap;
    source = fmt::format("{}={}", name, *env);
  }
}

void find_memory_budget(Context& ctx) {
  uint32_t heap = UINT32_MAX;
  for (uint32_t i = 0; i < ctx.memory.memoryHeapCount; ++i)
    if ((ctx.memory.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) &&
        (heap == UINT32_MAX || ctx.memory.memoryHeaps[i].size > ctx.memory.memoryHeaps[heap].size))
      heap = i;
  if (heap == UINT32_MAX) heap = 0;
  ctx.memory_budget = ctx.memory.memoryHeaps[heap].size;
  ctx.memory_budget_source = fmt::format("device-local heap {} size", heap);
  if (has_device_extension(ctx.physical, VK_EXT_MEMORY_BUDGET_EXTENSION_NAME)) {
    VkPhysicalDeviceMemoryBudgetPropertiesEXT budget{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT};
    VkPhysicalDeviceMemoryProperties2 props{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2, &budget};
    vkGetPhysicalDeviceMemoryProperties2(ctx.physical, &props);
    if (budget.heapBudget[heap] > 0) {
      ctx.memory_budget = budget.heapBudget[heap];
      ctx.memory_budget_source = fmt::format("VK_EXT_memory_budget, heap {}", heap);
    }
  }
  if (ctx.info.type == VK_PHYSICAL_DEVICE_TYPE_CPU) {
    // A CPU device (lavapipe) allocates host memory and reports a nominal heap (2 GiB): what
    // the host has available is the real limit.
    const uint64_t available = host_memory_available();
    if (available > 0) {
      ctx.memory_budget = available;
      ctx.memory_budget_source = "host memory, for a CPU device";
    }
  }
  cap_by_env(ctx.memory_budget, ctx.memory_budget_source, "EAGLEVK_DEVICE_MEMORY");
  ctx.host_memory_budget = host_memory_available();
  ctx.host_memory_budget_source = "MemAvailable in /proc/meminfo";
  cap_by_env(ctx.host_memory_budget, ctx.host_memory_budget_source, "EAGLEVK_HOST_MEMORY");
}

}  // namespace

uint32_t validation_errors_in_process() { return process_validation_errors.load(); }
void forgive_validation_errors(uint32_t count) { process_validation_errors -= count; }
uint32_t ignored_validation_errors_in_process() { return process_ignored_validation_errors.load(); }

void Context::check_usable() const {
  if (lost.load())
    throw VulkanError(VK_ERROR_DEVICE_LOST,
                      fmt::format("the Vulkan device '{}' was lost earlier (VK_ERROR_DEVICE_LOST or a hung queue); "
                                  "free everything made on it and open the device again",
                                  info.name));
}

void Context::raise(const VulkanError& e) const {
  if (e.device_lost()) lost = true;
  throw e;
}

void Context::check_result(VkResult result, const char* what) const {
  if (result != VK_SUCCESS) raise(VulkanError(result, fmt::format("Vulkan call {} failed: {}", what, result_name(result))));
}

// A GPU that has not finished one submission in 10 minutes is hung (drivers reset a stuck GPU
// after seconds). A CPU device runs the same submission on host threads, where a one-pass
// prefill at Scout's width takes over 10 minutes on two cores: it gets 2 hours.
static uint64_t fence_timeout(VkPhysicalDeviceType type) {
  const uint64_t default_seconds = type == VK_PHYSICAL_DEVICE_TYPE_CPU ? 7200 : 600;
  const std::optional<std::string> env = switch_value("EAGLEVK_FENCE_TIMEOUT");
  if (!env) return default_seconds * 1'000'000'000ull;
  char* end = nullptr;
  const double seconds = std::strtod(env->c_str(), &end);
  if (end == env->c_str() || *end || !(seconds > 0) || seconds > 1e7)
    fail("EAGLEVK_FENCE_TIMEOUT='{}': expected seconds, more than 0 and at most 10000000", *env);
  return uint64_t(seconds * 1e9);
}

static DeviceInfo with_required_subgroup_size(DeviceInfo info, uint32_t required) {
  DeviceFeatures& f = info.features;
  f.subgroup_size = f.min_subgroup_size = f.max_subgroup_size = required;
  // A workgroup may hold at most maxComputeWorkgroupSubgroups subgroups of the required size.
  if (f.max_compute_workgroup_subgroups)
    f.max_workgroup_invocations =
        std::min<uint64_t>(f.max_workgroup_invocations, uint64_t(required) * f.max_compute_workgroup_subgroups);
  return info;
}

DeviceInfo settled_device_info(const DeviceInfo& probed) {
  const std::optional<ProfileSetting> given = find_profile_setting(profile_settings_from_env(), "subgroup.size");
  if (!probed.features.subgroup_size_control) return probed;
  return with_required_subgroup_size(probed, choose_subgroup_size(probed, given));
}

Context::Context(const ContextOptions& options) {
  check_environment();  // a retired variable fails here; an unknown one is a warning
  const std::optional<ProfileSetting> subgroup_setting =
      find_profile_setting(profile_settings_from_env(), "subgroup.size");
  validation = options.validate;
  instance = create_instance(validation);
  try {
    if (validation) {
      const VkDebugUtilsMessengerCreateInfoEXT info = messenger_info(this);
      auto create = reinterpret_cast<PFN_vkCreateDebugUtilsMessengerEXT>(
          vkGetInstanceProcAddr(instance, "vkCreateDebugUtilsMessengerEXT"));
      if (!create) fail("validation requested but VK_EXT_debug_utils is unavailable");
      EAGLEVK_VK(create(instance, &info, nullptr, &messenger));
    }
    auto devices = physical_devices(instance);
    std::vector<DeviceInfo> infos;
    for (uint32_t i = 0; i < devices.size(); ++i) infos.push_back(probe_device(instance, devices[i], i));
    uint32_t chosen = choose_device(infos, options.device);
    physical = devices[chosen];
    info = infos[chosen];
    VkPhysicalDeviceProperties properties;
    vkGetPhysicalDeviceProperties(physical, &properties);
    fence_timeout_ns = fence_timeout(properties.deviceType);
    if (VK_API_VERSION_MINOR(info.api_version) < 2 && VK_API_VERSION_MAJOR(info.api_version) == 1)
      fail("device '{}' supports Vulkan {}.{}; eaglevk needs 1.2", info.name, VK_API_VERSION_MAJOR(info.api_version),
           VK_API_VERSION_MINOR(info.api_version));
    if (!info.features.subgroup_arithmetic)
      fail("device '{}' lacks subgroup arithmetic in compute shaders, which the matrix-vector kernels need",
           info.name);
    vkGetPhysicalDeviceMemoryProperties(physical, &memory);
    max_binding_range = info.features.max_storage_buffer_range;
    for (int i = 0; i < 3; ++i) max_workgroups[i] = info.features.max_workgroup_count[i];
    max_allocation = info.features.max_memory_allocation ? info.features.max_memory_allocation : UINT64_MAX;
    find_memory_budget(*this);

    queue_family = compute_queue_family(physical);
    float priority = 1.0f;
    VkDeviceQueueCreateInfo queue_info{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
    queue_info.queueFamilyIndex = queue_family;
    queue_info.queueCount = 1;
    queue_info.pQueuePriorities = &priority;
    VkDeviceCreateInfo device_info{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
    device_info.queueCreateInfoCount = 1;
    device_info.pQueueCreateInfos = &queue_info;
    // Subgroup size control: every kernel then runs the subgroups it was tuned for, also where
    // the driver would pick a size per shader (AMD: 32 or 64, Intel: 8 to 32).
    VkPhysicalDeviceSubgroupSizeControlFeatures size_control{
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES};
    std::vector<const char*> extensions;
    driver_picks_subgroup_size = info.features.min_subgroup_size != info.features.max_subgroup_size;
    if (info.features.subgroup_size_control) {
      required_subgroup_size = choose_subgroup_size(info, subgroup_setting);
      size_control.subgroupSizeControl = VK_TRUE;
      size_control.computeFullSubgroups = VK_TRUE;
      size_control.pNext = const_cast<void*>(device_info.pNext);
      device_info.pNext = &size_control;
      extensions.push_back(VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME);
      info = with_required_subgroup_size(info, required_subgroup_size);
    } else if (subgroup_setting) {
      fail("{}: subgroup.size={} is set but device '{}' cannot require a subgroup size "
           "(no VK_EXT_subgroup_size_control for compute shaders)",
           subgroup_setting->source, subgroup_setting->value, info.name);
    }
    // Cooperative matrices for the prefill GEMM's coopmat kernel, whose SPIR-V also declares f16
    // arithmetic and the Vulkan memory model (probe_coopmat_f16 found all three).
    VkPhysicalDeviceCooperativeMatrixFeaturesKHR coopmat{};
    coopmat.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR;
    VkPhysicalDeviceVulkan12Features f12{};
    f12.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES;
    if (info.features.coopmat_m) {
      coopmat.cooperativeMatrix = VK_TRUE;
      f12.shaderFloat16 = VK_TRUE;
      f12.vulkanMemoryModel = VK_TRUE;
      f12.pNext = &coopmat;
      coopmat.pNext = const_cast<void*>(device_info.pNext);
      device_info.pNext = &f12;
      extensions.push_back(VK_KHR_COOPERATIVE_MATRIX_EXTENSION_NAME);
    }
    // The compiler's statistics per pipeline (registers a lane uses, spills), for the kernel table.
    VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR executable_info{
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR};
    if (options.pipeline_statistics &&
        has_device_extension(physical, VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME)) {
      executable_info.pipelineExecutableInfo = VK_TRUE;
      executable_info.pNext = const_cast<void*>(device_info.pNext);
      device_info.pNext = &executable_info;
      extensions.push_back(VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME);
      pipeline_statistics = true;
    }
    device_info.enabledExtensionCount = uint32_t(extensions.size());
    device_info.ppEnabledExtensionNames = extensions.data();
    EAGLEVK_VK(vkCreateDevice(physical, &device_info, nullptr, &device));
    vkGetDeviceQueue(device, queue_family, 0, &queue);
  } catch (...) {
    release();
    throw;
  }
}

Context::~Context() { release(); }

void Context::release() {
  if (device) vkDestroyDevice(device, nullptr);
  device = VK_NULL_HANDLE;
  if (messenger) {
    auto destroy = reinterpret_cast<PFN_vkDestroyDebugUtilsMessengerEXT>(
        vkGetInstanceProcAddr(instance, "vkDestroyDebugUtilsMessengerEXT"));
    if (destroy) destroy(instance, messenger, nullptr);
    messenger = VK_NULL_HANDLE;
  }
  if (instance) vkDestroyInstance(instance, nullptr);
  instance = VK_NULL_HANDLE;
}

uint32_t Context::find_memory_type(uint32_t type_bits, VkMemoryPropertyFlags required, VkMemoryPropertyFlags preferred,
                                   VkMemoryPropertyFlags avoided) const {
  // Without the avoided flags first (system memory rather than a discrete GPU's BAR window for
  // host weights), then with them: an integrated GPU's or lavapipe's host memory is device-local.
  for (VkMemoryPropertyFlags unwanted : {avoided, VkMemoryPropertyFlags(0)})
    for (VkMemoryPropertyFlags wanted : {required | preferred, required})
      for (uint32_t i = 0; i < memory.memoryTypeCount; ++i) {
        const VkMemoryPropertyFlags flags = memory.memoryTypes[i].propertyFlags;
        if ((type_bits & (1u << i)) && (flags & wanted) == wanted && !(flags & unwanted)) return i;
      }
  fail("no Vulkan memory type with flags {:#x}", required);
}

}  // namespace eaglevk::vk
