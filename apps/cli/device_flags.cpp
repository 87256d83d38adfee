#include "apps/cli/device_flags.h"

#include <cmath>
#include <sstream>

#include "apps/cli/usage.h"

namespace eaglevk::cli {
namespace {

std::vector<std::string> comma_list(const std::string& csv, const char* flag) {
  std::vector<std::string> items;
  std::stringstream in(csv);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) usage_fail("{} has an empty entry: '{}'", flag, csv);
    items.push_back(item);
  }
  if (items.empty()) usage_fail("{} is empty", flag);
  return items;
}

}  // namespace

void add_device_flags(CLI::App* sub, DeviceFlags& f) {
  sub->add_option("--device", f.device, "Vulkan device index or name (see `eaglevk devices`)");
  sub->add_option("--devices", f.devices,
                  "split the layers across these devices in order (one may repeat)")
      ->type_name("I,J,...");
  sub->add_option("--split", f.split, "each device's share of the layers (default: by free memory)")
      ->type_name("3,1");
}

api::Runtime open_runtime_of(const DeviceFlags& f) {
  if (!f.device.empty() && !f.devices.empty()) usage_fail("give either --device or --devices, not both");
  if (!f.split.empty() && f.devices.empty()) usage_fail("--split needs --devices (the devices it shares the layers among)");
  if (f.devices.empty()) return api::open_runtime(f.device);
  const std::vector<std::string> names = comma_list(f.devices, "--devices");
  // The count of shares against the devices is the load's rule (api::LoadOptions::split).
  return api::open_runtime(std::span<const std::string>(names));
}

std::vector<double> split_shares(const DeviceFlags& f) {
  std::vector<double> shares;
  if (f.split.empty()) return shares;
  for (const std::string& item : comma_list(f.split, "--split")) {
    size_t used = 0;
    double share = 0;
    try {
      share = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || !std::isfinite(share) || share <= 0)
      usage_fail("--split takes positive numbers, got '{}'", item);
    shares.push_back(share);
  }
  return shares;
}

}  // namespace eaglevk::cli
