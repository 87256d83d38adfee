#include "runtime/vk/architecture.h"

#include <algorithm>
#include <cctype>
#include <string>

#include "runtime/vk/features.h"

namespace eaglevk::vk {

std::string_view architecture_name(Architecture arch) {
  switch (arch) {
    case Architecture::NvidiaPreTuring: return "nvidia-pre-turing";
    case Architecture::NvidiaTuring: return "nvidia-turing+";
    case Architecture::NvidiaHopper: return "nvidia-hopper";
    case Architecture::AmdGcn: return "amd-gcn";
    case Architecture::AmdRdna1: return "amd-rdna1";
    case Architecture::AmdRdna2: return "amd-rdna2";
    case Architecture::AmdRdna3: return "amd-rdna3";
    case Architecture::AmdRdna4: return "amd-rdna4";
    case Architecture::IntelGen: return "intel-gen";
    case Architecture::IntelXe: return "intel-xe";
    case Architecture::IntelXe2: return "intel-xe2";
    case Architecture::AppleMoltenVk: return "apple-moltenvk";
    case Architecture::Lavapipe: return "lavapipe";
    case Architecture::OtherCpu: return "cpu";
    case Architecture::Unknown: break;
  }
  return "unknown";
}

namespace {

bool in(uint32_t id, uint32_t first, uint32_t last) { return id >= first && id <= last; }

// NVIDIA's device ids grow with the generation: Turing's begin at 0x1e00 (TU102), GH100's are
// 0x2300..0x23ff (H100 0x2330, H200 0x2335, GH200 0x2342). Cooperative matrices through
// VK_KHR_cooperative_matrix also mean Turing or later, whatever the id.
Architecture nvidia(const DeviceInfo& info) {
  if (in(info.device_id, 0x2300, 0x23ff)) return Architecture::NvidiaHopper;
  if (info.device_id >= 0x1e00 || info.features.coopmat_m) return Architecture::NvidiaTuring;
  return Architecture::NvidiaPreTuring;
}

// GCN runs only wave64; RDNA offers 32 and 64. Discrete RDNA parts by device id (Navi 1x
// 0x7310..0x734f, Navi 2x 0x73a0..0x743f, Navi 3x 0x7440..0x74ff, Navi 4x 0x7550..0x75ff);
// others (APUs) by what they offer: WMMA cooperative matrices mean RDNA3 or later.
Architecture amd(const DeviceInfo& info) {
  const DeviceFeatures& f = info.features;
  if (f.min_subgroup_size == 64 && f.max_subgroup_size == 64) return Architecture::AmdGcn;
  const uint32_t id = info.device_id;
  if (in(id, 0x7550, 0x75ff)) return Architecture::AmdRdna4;
  if (in(id, 0x7440, 0x74ff)) return Architecture::AmdRdna3;
  if (in(id, 0x73a0, 0x743f)) return Architecture::AmdRdna2;
  if (in(id, 0x7310, 0x734f)) return Architecture::AmdRdna1;
  return f.coopmat_m ? Architecture::AmdRdna3 : Architecture::AmdRdna2;
}

// Xe2 runs no subgroups below 16 (as llama.cpp tells it apart); Xe from its device ids (Tiger
// Lake 0x9a40..0x9aff, Alder Lake and later 0x4600 up, Arc 0x5690..0x56ff) or matrices.
Architecture intel(const DeviceInfo& info) {
  if (info.features.min_subgroup_size >= 16) return Architecture::IntelXe2;
  const uint32_t id = info.device_id;
  if (in(id, 0x9a40, 0x9aff) || id >= 0x4600 || info.features.coopmat_m) return Architecture::IntelXe;
  return Architecture::IntelGen;
}

bool contains(std::string text, std::string_view part) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return text.find(part) != std::string::npos;
}

}  // namespace

Architecture detect_architecture(const DeviceInfo& info) {
  if (info.type == VK_PHYSICAL_DEVICE_TYPE_CPU)
    return info.driver_id == VK_DRIVER_ID_MESA_LLVMPIPE || contains(info.name, "llvmpipe") ? Architecture::Lavapipe
                                                                                             : Architecture::OtherCpu;
  if (info.vendor_id == vendor::kApple || info.driver_id == VK_DRIVER_ID_MOLTENVK) return Architecture::AppleMoltenVk;
  switch (info.vendor_id) {
    case vendor::kNvidia: return nvidia(info);
    case vendor::kAmd: return amd(info);
    case vendor::kIntel: return intel(info);
    default: return Architecture::Unknown;
  }
}

}  // namespace eaglevk::vk
