#include "runtime/vk/profile.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include <fmt/format.h>

#include "runtime/vk/recorder.h"
#include "runtime/vk/switches.h"

namespace eaglevk::vk {
namespace {

struct CommandTotal {
  double ms = 0;
  uint64_t count = 0;
  uint64_t bytes = 0;
};

struct Totals {
  std::mutex mutex;
  std::map<std::string, CommandTotal> commands;
  uint64_t submissions = 0, replayed = 0;
  double record_ms = 0, wait_ms = 0, gpu_ms = 0;
  // Per submission: the first ones also create pipelines, so the median is the steady cost.
  std::vector<double> record_each;
  std::vector<uint32_t> commands_each;
};

Totals& totals() {
  static Totals t;
  return t;
}

std::atomic<bool>& requested() {
  static std::atomic<bool> r{false};
  return r;
}

}  // namespace

void add_profiled_submission(const TimedCommand* commands, size_t count, double record_ms, double wait_ms,
                             bool replayed) {
  Totals& t = totals();
  std::lock_guard<std::mutex> lock(t.mutex);
  ++t.submissions;
  t.record_ms += record_ms;
  if (replayed) {
    ++t.replayed;
  } else {
    t.record_each.push_back(record_ms);
    t.commands_each.push_back(uint32_t(count));
  }
  t.wait_ms += wait_ms;
  for (size_t i = 0; i < count; ++i) {
    CommandTotal& c = t.commands[commands[i].name];
    c.ms += commands[i].ms;
    ++c.count;
    c.bytes += commands[i].bytes;
    t.gpu_ms += commands[i].ms;
  }
}

void profile_reset() {
  Totals& t = totals();
  std::lock_guard<std::mutex> lock(t.mutex);
  t.commands.clear();
  t.submissions = t.replayed = 0;
  t.record_ms = t.wait_ms = t.gpu_ms = 0;
  t.record_each.clear();
  t.commands_each.clear();
}

bool profiling_requested() {
  return requested().load() || switch_bool("EAGLEVK_PROFILE");
}

void request_profiling() { requested() = true; }

double ProfiledCommand::gbps() const {
  const bool matvec = name.rfind("matvec_", 0) == 0 && name.rfind("matvec_id", 0) != 0;
  return matvec && ms > 0 ? double(bytes) / (ms * 1e6) : 0.0;
}

ProfileSummary profile_summary() {
  Totals& t = totals();
  std::lock_guard<std::mutex> lock(t.mutex);
  ProfileSummary s;
  s.submissions = t.submissions;
  s.replayed = t.replayed;
  s.gpu_ms = t.gpu_ms;
  s.record_ms = t.record_ms;
  s.wait_ms = t.wait_ms;
  std::vector<double> per_command;
  for (size_t i = 0; i < t.record_each.size(); ++i)
    if (t.commands_each[i]) per_command.push_back(1e3 * t.record_each[i] / t.commands_each[i]);
  if (!per_command.empty()) {
    std::nth_element(per_command.begin(), per_command.begin() + per_command.size() / 2, per_command.end());
    s.record_us_per_command = per_command[per_command.size() / 2];
  }
  for (const auto& [name, c] : t.commands) {
    s.per_command.push_back({name, c.ms, c.count, c.bytes});
    s.commands += c.count;
  }
  std::sort(s.per_command.begin(), s.per_command.end(), [](const auto& a, const auto& b) { return a.ms > b.ms; });
  return s;
}

std::string profile_report(uint64_t tokens) { return profile_report(profile_summary(), tokens); }

std::string profile_report(const ProfileSummary& s, uint64_t tokens) {
  if (!s.submissions) return {};
  const double per = tokens ? double(tokens) : 1.0;
  const char* unit = tokens ? "per token" : "in all";
  std::string out = fmt::format(
      "profile ({} submissions, {} replayed, {} {}): GPU {:.3f} ms, {:.1f} commands, host recording {:.3f} ms, "
      "host waiting {:.3f} ms {}\n",
      s.submissions, s.replayed, tokens ? tokens : s.submissions, tokens ? "tokens" : "submissions", s.gpu_ms / per,
      double(s.commands) / per, s.record_ms / per, s.wait_ms / per, unit);
  if (s.record_us_per_command > 0)
    out += fmt::format("host recording per command: {:.1f} us (median over recorded submissions; the first ones also "
                       "create pipelines)\n",
                       s.record_us_per_command);
  // Compare the GB/s with the device's copy bandwidth (eaglevk_bench_ops --benchmark_filter=BM_Copy).
  out += fmt::format("  {:>9} {:>6} {:>9} {:>8}  {}\n", "GPU ms", "%", "commands", "GB/s", "command");
  for (const ProfiledCommand& c : s.per_command) {
    const std::string gbps = c.gbps() > 0 ? fmt::format("{:8.1f}", c.gbps()) : "       -";
    out += fmt::format("  {:9.4f} {:5.1f}% {:9.1f} {}  {}\n", c.ms / per, s.gpu_ms > 0 ? 100 * c.ms / s.gpu_ms : 0.0,
                       double(c.count) / per, gbps, c.name);
  }
  return out;
}

}  // namespace eaglevk::vk
