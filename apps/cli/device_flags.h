#pragma once
// The device flags of run, eval, bench and serve: --device (one Vulkan device) or --devices
// (a model's layers split across several, issue 47) with --split (each one's share).
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include <eaglevk/eaglevk.hpp>

namespace eaglevk::cli {

struct DeviceFlags {
  std::string device;   // --device: an index or a name
  std::string devices;  // --devices: several, comma-separated (a name may repeat)
  std::string split;    // --split: each device's share of the layers, comma-separated
};

void add_device_flags(CLI::App* sub, DeviceFlags& flags);

// The runtime the flags name: one device, or each of --devices opened (a device named twice is
// opened twice). Usage errors for flags that do not go together or are malformed.
api::Runtime open_runtime_of(const DeviceFlags& flags);

// api::LoadOptions::split from --split (empty: in proportion to each device's memory).
std::vector<double> split_shares(const DeviceFlags& flags);

}  // namespace eaglevk::cli
