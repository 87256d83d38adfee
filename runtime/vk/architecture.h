#pragma once
// Which GPU generation a device is, worked out once from what it reports (vendor and device
// ids, driver, subgroup sizes, cooperative matrices), so that kernel choices name an
// architecture rather than a bare PCI id (runtime/ops/device_profile.h holds the choices).
#include <cstdint>
#include <string_view>

namespace eaglevk::vk {

struct DeviceInfo;

// PCI vendor ids (VkPhysicalDeviceProperties::vendorID); Mesa's software devices report
// Khronos's VK_VENDOR_ID_MESA.
namespace vendor {
constexpr uint32_t kNvidia = 0x10de;
constexpr uint32_t kAmd = 0x1002;
constexpr uint32_t kIntel = 0x8086;
constexpr uint32_t kApple = 0x106b;
constexpr uint32_t kMesa = 0x10005;
}  // namespace vendor

enum class Architecture {
  Unknown,
  NvidiaPreTuring,  // Pascal, Volta: no tensor cores eaglevk can use
  NvidiaTuring,     // Turing, Ampere, Ada: Turing and later, cooperative matrices
  NvidiaHopper,     // GH100 (H100, H200, GH200)
  AmdGcn,           // wave64 only
  AmdRdna1,
  AmdRdna2,
  AmdRdna3,         // WMMA cooperative matrices
  AmdRdna4,
  IntelGen,         // before Xe
  IntelXe,          // Xe-LP, Xe-HPG (Arc Alchemist)
  IntelXe2,         // Battlemage, Lunar Lake: subgroups of 16 at least
  AppleMoltenVk,    // Apple silicon through MoltenVK
  Lavapipe,         // Mesa's llvmpipe on the CPU
  OtherCpu,         // another CPU device
};

std::string_view architecture_name(Architecture arch);  // "nvidia-hopper", "amd-rdna3", "lavapipe"
// From the probed properties (before a Context requires a subgroup size).
Architecture detect_architecture(const DeviceInfo& info);

}  // namespace eaglevk::vk
