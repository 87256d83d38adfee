#pragma once
// `eaglevk eval --resume FILE`: every finished prompt's record is appended to FILE as one JSON
// line, after a first line with the run's configuration and shard. A run started again with
// the same FILE skips the prompts recorded there, so a killed run continues where it stopped;
// a file written by another configuration is refused with the setting or the input whose
// fingerprint differs (eval_fingerprints.h).
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "apps/cli/eval_report.h"

namespace eaglevk::cli {

class ResumeFile {
 public:
  // Reads FILE when it exists (a last line cut short by a kill is dropped and cut from the
  // file), or starts it with this run's header.
  ResumeFile(std::string path, const nlohmann::json& config, const EvalShard& shard);
  ~ResumeFile();
  ResumeFile(const ResumeFile&) = delete;
  ResumeFile& operator=(const ResumeFile&) = delete;

  const std::map<size_t, EvalRecord>& done() const { return done_; }
  // One write of the whole line, then fsync: after a crash the file ends with whole records,
  // or with part of the last one, which the next run drops.
  void append(const EvalRecord& record);

  // The configuration in FILE's header, if FILE exists and has one (eval takes the seed from
  // it when --seed is not given, so a resumed run draws what the first would have).
  static std::optional<nlohmann::json> stored_config(const std::string& path);

 private:
  std::string path_;
  int fd_ = -1;
  std::map<size_t, EvalRecord> done_;
};

}  // namespace eaglevk::cli
