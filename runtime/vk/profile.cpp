#include "runtime/vk/profile.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <vector>

#include <fmt/format.h>

#include "runtime/vk/recorder.h"

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
  uint64_t submissions = 0;
  double record_ms = 0, wait_ms = 0, gpu_ms = 0;
  // Per submission: the first ones also create pipelines, so the median is the steady cost.
  std::vector<double> record_each;
  std::vector<uint32_t> commands_each;
};

Totals& totals() {
  static Totals t;
  return t;
}

}  // namespace

void add_profiled_submission(const TimedCommand* commands, size_t count, double record_ms, double wait_ms) {
  Totals& t = totals();
  std::lock_guard<std::mutex> lock(t.mutex);
  ++t.submissions;
  t.record_ms += record_ms;
  t.record_each.push_back(record_ms);
  t.commands_each.push_back(uint32_t(count));
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
  t.submissions = 0;
  t.record_ms = t.wait_ms = t.gpu_ms = 0;
  t.record_each.clear();
  t.commands_each.clear();
}

std::string profile_report(uint64_t tokens) {
  Totals& t = totals();
  std::lock_guard<std::mutex> lock(t.mutex);
  if (!t.submissions) return {};
  const double per = tokens ? double(tokens) : 1.0;
  const char* unit = tokens ? "per token" : "in all";
  std::string out = fmt::format(
      "profile ({} submissions, {} {}): GPU {:.3f} ms, host recording {:.3f} ms, host waiting {:.3f} ms {}\n",
      t.submissions, tokens ? tokens : t.submissions, tokens ? "tokens" : "submissions", t.gpu_ms / per,
      t.record_ms / per, t.wait_ms / per, unit);
  // The steady host cost: the median over submissions of recording time per command.
  std::vector<double> per_command;
  for (size_t i = 0; i < t.record_each.size(); ++i)
    if (t.commands_each[i]) per_command.push_back(1e3 * t.record_each[i] / t.commands_each[i]);
  if (!per_command.empty()) {
    std::nth_element(per_command.begin(), per_command.begin() + per_command.size() / 2, per_command.end());
    out += fmt::format("host recording per command: {:.1f} us (median over submissions; the first ones also create "
                       "pipelines)\n",
                       per_command[per_command.size() / 2]);
  }
  std::vector<std::pair<std::string, CommandTotal>> rows(t.commands.begin(), t.commands.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
  // GB/s only for the matrix-vector kernels, which read every byte of their bindings once (the
  // weights, mostly); others bind more than they touch (an embedding table, routed experts).
  // Compare with the device's copy bandwidth (eaglevk_bench_ops --benchmark_filter=BM_Copy).
  out += fmt::format("  {:>9} {:>6} {:>9} {:>8}  {}\n", "GPU ms", "%", "commands", "GB/s", "command");
  for (const auto& [name, c] : rows) {
    const bool matvec = name.rfind("matvec_", 0) == 0 && name.rfind("matvec_id", 0) != 0;
    const std::string gbps = matvec && c.ms > 0 ? fmt::format("{:8.1f}", double(c.bytes) / (c.ms * 1e6)) : "       -";
    out += fmt::format("  {:9.4f} {:5.1f}% {:9.1f} {}  {}\n", c.ms / per, t.gpu_ms > 0 ? 100 * c.ms / t.gpu_ms : 0.0,
                       double(c.count) / per, gbps, name);
  }
  return out;
}

}  // namespace eaglevk::vk
