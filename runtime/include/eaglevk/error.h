#pragma once
// The one exception type eaglevk throws for bad input and failed Vulkan calls. The CLI turns
// it into a message and a non-zero exit; the C API turns it into a status and last-error text.
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace eaglevk {

// The user setting an error is about. Layers below the front doors describe a setting in words
// ("tree top-k 17 is out of range") and tag the error with it; each front door names it in its
// own language (the CLI's flag, the C API's field), so no layer below speaks either.
enum class Setting {
  None,
  Context,          // the session's context length
  ChainDraftTokens, // draft tokens per round of the chain
  Batch,            // sequences decoded together
  TreeSteps,        // draft levels of a tree
  TreeTopK,         // children per tree node
  TreeDraftTokens,  // verified tree tokens, the root included (or its automatic choice)
  TapLayers,        // the three target layers an EAGLE-3 head reads
  VisionProjector,  // llama.cpp's separate vision file (mmproj) for a GGUF text model
  Temperature,      // the sampling temperature
  TopK,             // top-k filtering of the sampled distribution
  TopP,             // top-p (nucleus) filtering
  Logprobs,         // most likely tokens reported per generated token
  StopStrings,      // texts that end generation
  ExpertsInHost,    // the routed experts' weights in host memory
  Devices,          // the devices a model's layers are split across
  LayerSplit,       // each device's share of the layers
};

struct Error : std::runtime_error {
  explicit Error(const std::string& message, Setting setting = Setting::None)
      : std::runtime_error(message), setting(setting) {}
  Setting setting;
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

// An error about one setting; the message describes it in words, never by a flag or field name.
template <typename... Args>
[[noreturn]] void fail_setting(Setting setting, fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...), setting);
}

}  // namespace eaglevk
