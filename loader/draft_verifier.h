#pragma once
// Whether an EAGLE-3 draft names the target it runs with. Speculators checkpoints record the
// verifier they were trained against (`speculators_config.verifier`: `name_or_path` and
// `architectures`); a draft used with another target still runs (losslessly: the target
// decides every token) but accepts little, which a user should hear about once, at load.
#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace eaglevk::loader {

// A warning sentence when the draft config names a verifier of another model family or
// another model than `target_path` (a folder or a GGUF file, whose name may carry a quant
// suffix) and the target config's `_name_or_path`; nullopt when they agree or the draft
// names none.
std::optional<std::string> verifier_mismatch(const nlohmann::json& draft_config, const nlohmann::json& target_config,
                                             const std::filesystem::path& target_path);

}  // namespace eaglevk::loader
