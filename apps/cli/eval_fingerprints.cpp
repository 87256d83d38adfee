#include "apps/cli/eval_fingerprints.h"

#include <fstream>

#include <fmt/format.h>

#include "loader/checkpoint_fingerprint.h"
#include "loader/json_excerpt.h"
#include "loader/sha256.h"

namespace eaglevk::cli {
namespace {

using nlohmann::json;

// The inputs in the order they are compared, the config key of each one's path, and its name
// in messages.
struct Input {
  const char* key;
  const char* name;
  bool checkpoint;
  bool always;  // every run has one
};
constexpr Input kInputs[] = {{"dataset", "the dataset", false, true},
                             {"model", "the target", true, true},
                             {"draft", "the draft", true, true},
                             {"mmproj", "the mmproj", true, false},
                             {"chat_template", "the --chat-template file", false, false}};

json file_fingerprint(const std::filesystem::path& path) {
  uint64_t bytes = 0;
  const std::string sha = loader::sha256_file(path, &bytes);
  return {{"sha256", sha}, {"bytes", bytes}};
}

// The images of the dataset's lines, in order. One that cannot be read counts by its name: the
// line reports it when its turn comes, as it did before fingerprints.
json images_fingerprint(const loader::Dataset& data) {
  loader::Sha256 h;
  uint64_t count = 0;
  for (const loader::DatasetItem& item : data.items)
    for (const std::filesystem::path& image : item.images) {
      ++count;
      std::error_code ec;
      if (std::filesystem::is_regular_file(image, ec))
        h.field(loader::sha256_file(image));
      else
        h.field("unreadable " + image.filename().string());
    }
  if (count == 0) return nullptr;
  return {{"count", count}, {"sha256", h.hex()}};
}

std::string short_hex(const json& v) { return v.is_string() ? v.get<std::string>().substr(0, 12) + "..." : "?"; }

std::string file_record_problem(const json& record) {
  if (!record.is_object() || !record.contains("sha256") || !record["sha256"].is_string()) return "has no 'sha256'";
  return "";
}

// A dataset or template file: its bytes, then (the dataset) its images.
std::string file_difference(const json& theirs, const json& ours) {
  if (theirs["sha256"] != ours["sha256"])
    return fmt::format("its contents differ (sha256 {} there, {} here)", short_hex(theirs["sha256"]), short_hex(ours["sha256"]));
  const json none;
  if (theirs.value("images", none) != ours.value("images", none)) return "its images differ";
  return "";
}

std::string path_text(const json& config, const char* key) {
  return config.contains(key) && config[key].is_string() ? config[key].get<std::string>().substr(0, 200) : "?";
}

// The first input whose fingerprint differs, named with its paths.
std::string fingerprints_difference(const json& theirs, const json& ours) {
  const json& a = theirs["fingerprints"];
  const json& b = ours.at("fingerprints");
  if (!a.is_object()) return "its 'fingerprints' is not an object";
  for (const Input& input : kInputs) {
    const bool there = a.contains(input.key), here = b.contains(input.key);
    if (input.always && !there) return fmt::format("it records no fingerprint of {}", input.name);
    if (there != here) return fmt::format("{} is given {} and not {}", input.name, there ? "there" : "here", there ? "here" : "there");
    if (!there) continue;
    const std::string problem = input.checkpoint ? loader::fingerprint_record_problem(a[input.key])
                                                 : file_record_problem(a[input.key]);
    if (!problem.empty()) return fmt::format("{}'s recorded fingerprint {}", input.name, problem);
    const std::string why = input.checkpoint ? loader::fingerprint_difference(a[input.key], b[input.key])
                                             : file_difference(a[input.key], b[input.key]);
    if (why.empty()) continue;
    const std::string then = path_text(theirs, input.key), now = path_text(ours, input.key);
    if (then == now)
      return fmt::format("{}'s fingerprint differs although its path {} is the same (replaced at the same path?): {}",
                         input.name, now, why);
    return fmt::format("{}'s fingerprint differs ({} there, {} here): {}", input.name, then, now, why);
  }
  return "";
}

bool is_path_key(const std::string& key) {
  for (const Input& input : kInputs)
    if (key == input.key) return true;
  return false;
}

}  // namespace

json eval_fingerprints(const EvalInputs& in) {
  json f;
  f["dataset"] = file_fingerprint(in.dataset);
  if (in.data)
    if (json images = images_fingerprint(*in.data); !images.is_null()) f["dataset"]["images"] = images;
  f["model"] = loader::fingerprint_json(loader::fingerprint_checkpoint(in.model));
  f["draft"] = loader::fingerprint_json(loader::fingerprint_checkpoint(in.draft));
  if (!in.mmproj.empty()) f["mmproj"] = loader::fingerprint_json(loader::fingerprint_checkpoint(in.mmproj));
  if (!in.chat_template.empty()) f["chat_template"] = file_fingerprint(in.chat_template);
  return f;
}

std::string config_difference(const json& theirs, const json& ours) {
  if (!theirs.is_object()) return "its configuration is not an object";
  if (!theirs.contains("fingerprints"))
    return "it records no fingerprints of its models and dataset (an eaglevk from before they were recorded wrote it), "
           "so nothing shows which files it ran";
  // The settings first, by name; the inputs by fingerprint, not by path.
  for (const auto& [key, value] : ours.items()) {
    if (is_path_key(key) || key == "fingerprints") continue;
    if (!theirs.contains(key)) return fmt::format("'{}' is missing there", key);
    if (theirs[key] != value)
      return fmt::format("'{}' is {} there and {} here", key, loader::json_text(theirs[key]), loader::json_text(value));
  }
  for (const auto& [key, value] : theirs.items())
    if (!is_path_key(key) && !ours.contains(key))
      return fmt::format("it has '{}', which this version does not write", key.substr(0, 40));
  return fingerprints_difference(theirs, ours);
}

std::vector<std::string> moved_inputs(const json& theirs, const json& ours) {
  std::vector<std::string> notes;
  for (const Input& input : kInputs) {
    if (!ours.contains(input.key)) continue;
    const std::string then = path_text(theirs, input.key), now = path_text(ours, input.key);
    if (then != now) notes.push_back(fmt::format("{} is {} there and {} here, with the same fingerprint", input.name, then, now));
  }
  return notes;
}

}  // namespace eaglevk::cli
