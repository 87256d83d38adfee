#include "apps/cli/eval_resume.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <eaglevk/error.h>

#include "apps/cli/eval_fingerprints.h"
#include "loader/json_excerpt.h"
#include "loader/text_file.h"

namespace eaglevk::cli {
namespace {

constexpr const char* kHeaderKey = "eaglevk_eval_resume";
constexpr size_t kMaxDepth = 64;  // records are 3 levels deep; anything deeper was not written by eval

// Parses one line; nothing when it is not a whole JSON value of sane depth.
std::optional<nlohmann::json> parse_line(const std::string& line) {
  nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || loader::json_nested_deeper_than(j, kMaxDepth)) return std::nullopt;
  return j;
}

nlohmann::json header(const nlohmann::json& config, const EvalShard& shard) {
  return {{kHeaderKey, 1}, {"config", config}, {"shard", {{"index", shard.index}, {"count", shard.count}}}};
}

}  // namespace

std::optional<nlohmann::json> ResumeFile::stored_config(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  std::istringstream in(loader::read_text_file(path));
  std::string first;
  if (!std::getline(in, first)) return std::nullopt;
  const std::optional<nlohmann::json> h = parse_line(first);
  if (!h || !h->is_object() || !h->contains(kHeaderKey) || !h->contains("config")) return std::nullopt;
  return (*h)["config"];
}

ResumeFile::ResumeFile(std::string path, const nlohmann::json& config, const EvalShard& shard)
    : path_(std::move(path)) {
  std::error_code ec;
  const bool exists = std::filesystem::exists(path_, ec) && std::filesystem::file_size(path_, ec) > 0;
  size_t keep = 0;  // bytes of whole lines
  if (exists) {
    const std::string text = loader::read_text_file(path_);
    size_t pos = 0, number = 0;
    while (pos < text.size()) {
      const size_t end = text.find('\n', pos);
      ++number;
      const bool last = end == std::string::npos || end + 1 >= text.size();
      const std::string line = text.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
      const std::optional<nlohmann::json> j = end == std::string::npos ? std::nullopt : parse_line(line);
      if (!j) {
        // Only the last line may be cut short (the process died while writing it).
        if (last) {
          fmt::print(stderr, "eaglevk: --resume {}: dropping the unfinished last line {}\n", path_, number);
          break;
        }
        fail("--resume {}:{}: not a JSON line (this file was not written by eval --resume)", path_, number);
      }
      if (number == 1) {
        if (!j->is_object() || !j->contains(kHeaderKey))
          fail("--resume {}: the first line is not an eval --resume header (a file of something else?)", path_);
        const std::string why = config_difference(j->value("config", nlohmann::json()), config);
        if (!why.empty())
          fail("--resume {} was written by another configuration: {}; use another file, or the same inputs and "
               "settings",
               path_, why);
        for (const std::string& note : moved_inputs(j->value("config", nlohmann::json()), config))
          fmt::print(stderr, "eaglevk: --resume {}: {}\n", path_, note);
        const nlohmann::json want = header(config, shard)["shard"];
        if (j->value("shard", nlohmann::json()) != want)
          fail("--resume {} holds shard {} and this run is shard {}", path_, loader::json_text(j->value("shard", nlohmann::json())),
               loader::json_text(want));
      } else {
        EvalRecord r;
        try {
          r = record_from_json(*j);
        } catch (const Error& e) {
          fail("--resume {}:{}: {}", path_, number, e.what());
        }
        done_[r.index] = std::move(r);
      }
      pos = end + 1;
      keep = pos;
    }
  }
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("--resume: cannot write '{}': {}", path_, std::strerror(errno));
  if (::ftruncate(fd_, off_t(keep)) != 0 || ::lseek(fd_, off_t(keep), SEEK_SET) < 0)
    fail("--resume: cannot write '{}': {}", path_, std::strerror(errno));
  if (keep == 0) {
    const std::string line = header(config, shard).dump() + "\n";
    if (::write(fd_, line.data(), line.size()) != ssize_t(line.size()) || ::fsync(fd_) != 0)
      fail("--resume: cannot write '{}': {}", path_, std::strerror(errno));
  }
}

ResumeFile::~ResumeFile() {
  if (fd_ >= 0) ::close(fd_);
}

void ResumeFile::append(const EvalRecord& record) {
  const std::string line = record_to_json(record).dump() + "\n";
  size_t written = 0;
  while (written < line.size()) {
    const ssize_t n = ::write(fd_, line.data() + written, line.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("--resume: cannot write '{}': {}", path_, std::strerror(errno));
    written += size_t(n);
  }
  if (::fsync(fd_) != 0) fail("--resume: cannot write '{}': {}", path_, std::strerror(errno));
}

}  // namespace eaglevk::cli
