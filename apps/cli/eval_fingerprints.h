#pragma once
// What tells eval's inputs apart whatever paths name them, and the comparison eval --resume and
// eval-merge make with it. Eval's configuration (the "config" of a report, a shard's report and
// a resume file's header) holds the settings that decide the outputs, the paths of its inputs
// for people to read, and under "fingerprints" what identifies each input:
//   "dataset":       {"sha256", "bytes"} of the JSONL file, and "images" {"count", "sha256"}
//                    when its lines have images (their bytes, in order);
//   "model", "draft", "mmproj": loader::fingerprint_json of each checkpoint;
//   "chat_template": {"sha256", "bytes"} of a --chat-template file.
// Two configurations agree when every setting and every fingerprint agrees; the paths are not
// compared, so shards given the same dataset by a relative and an absolute path merge, and a
// draft replaced at the same path is refused.
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loader/dataset.h"

namespace eaglevk::cli {

struct EvalInputs {
  std::filesystem::path model, draft, mmproj, chat_template, dataset;  // empty mmproj, template: none
  const loader::Dataset* data = nullptr;  // the dataset as loaded (its image paths)
};

// Reads every input (the weights whole or sampled: loader/checkpoint_fingerprint.h).
nlohmann::json eval_fingerprints(const EvalInputs& inputs);

// How the configuration recorded in a file (`theirs`) differs from `ours`, as a clause naming
// the setting or the input ("'ctx' is 2048 there and 1024 here", "the draft's fingerprint
// differs ..."); empty when they agree. A configuration without fingerprints (written before
// eval recorded them) never agrees: nothing would show that its models are these.
std::string config_difference(const nlohmann::json& theirs, const nlohmann::json& ours);

// The inputs that two agreeing configurations name by different paths, one note each ("the
// dataset is data.jsonl there and /data/data.jsonl here, with the same fingerprint"): accepted,
// and said, since a path that changed may be news to whoever reads the merged report.
std::vector<std::string> moved_inputs(const nlohmann::json& theirs, const nlohmann::json& ours);

}  // namespace eaglevk::cli
