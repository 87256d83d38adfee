#include "runtime/vk/profile.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <vector>

#include <fmt/format.h>

#include "runtime/vk/recorder.h"

namespace eaglevk::vk {
namespace {

struct Totals {
  std::mutex mutex;
  std::map<std::string, std::pair<double, uint64_t>> commands;  // GPU ms, count
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
    auto& c = t.commands[commands[i].name];
    c.first += commands[i].ms;
    ++c.second;
    t.gpu_ms += commands[i].ms;
  }
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
  std::vector<std::pair<std::string, std::pair<double, uint64_t>>> rows(t.commands.begin(), t.commands.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
  out += fmt::format("  {:>9} {:>6} {:>9}  {}\n", "GPU ms", "%", "commands", "command");
  for (const auto& [name, c] : rows)
    out += fmt::format("  {:9.4f} {:5.1f}% {:9.1f}  {}\n", c.first / per, t.gpu_ms > 0 ? 100 * c.first / t.gpu_ms : 0.0,
                       double(c.second) / per, name);
  return out;
}

}  // namespace eaglevk::vk
