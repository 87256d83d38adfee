#include "apps/cli/setting_names.h"

namespace eaglevk::cli {

const char* flag_of(Setting setting) {
  switch (setting) {
    case Setting::None: return "";
    case Setting::Context: return "--ctx";
    case Setting::ChainDraftTokens: return "-k";
    case Setting::Batch: return "--batch";
    case Setting::TreeSteps: return "--spec-steps";
    case Setting::TreeTopK: return "--spec-topk";
    case Setting::TreeDraftTokens: return "--spec-draft-tokens";
    case Setting::TapLayers: return "--aux-layers";
    case Setting::VisionProjector: return "--mmproj";
    case Setting::Temperature: return "--temp";
    case Setting::TopK: return "--top-k";
    case Setting::TopP: return "--top-p";
    case Setting::Logprobs: return "--logprobs";
    case Setting::StopStrings: return "--stop";
    case Setting::ExpertsInHost: return "--experts-in-host";
    case Setting::Devices: return "--devices";
    case Setting::LayerSplit: return "--split";
  }
  return "";
}

std::string message_with_flag(const Error& e) {
  const char* flag = flag_of(e.setting);
  return *flag ? fmt::format("{}: {}", flag, e.what()) : std::string(e.what());
}

}  // namespace eaglevk::cli
