#pragma once
// Process-wide totals of profiled submissions (EAGLEVK_PROFILE=1, or request_profiling): GPU
// time, count and bytes bound per command (shader family and the op's name; the report turns
// the bytes into GB/s for the matrix-vector kernels), host time spent recording and waiting.
// Every Recorder with `profile` set folds its timestamps in after each wait; `profile_summary`
// returns them and `profile_report` prints them per generated token.
#include <cstdint>
#include <string>
#include <vector>

namespace eaglevk::vk {

struct TimedCommand;

// Whether Recorders created from now on profile: EAGLEVK_PROFILE=1, or request_profiling().
bool profiling_requested();
// Makes Recorders created from now on profile (`bench --profile` after its timed runs).
void request_profiling();

// Adds one finished submission: its per-command GPU times and the host's recording and
// waiting time for it; `replayed` when its commands were recorded for an earlier one.
void add_profiled_submission(const TimedCommand* commands, size_t count, double record_ms, double wait_ms,
                             bool replayed);

// Forgets the totals so far: `run` starts counting after the model's upload.
void profile_reset();

struct ProfiledCommand {
  std::string name;
  double ms = 0;
  uint64_t count = 0, bytes = 0;
  // GB/s of the bound bytes for the matrix-vector kernels, which read every byte of their
  // bindings once (the weights, mostly); 0 for the others, which bind more than they touch.
  double gbps() const;
};

struct ProfileSummary {
  uint64_t submissions = 0, commands = 0;
  uint64_t replayed = 0;  // submissions of commands recorded for an earlier one (no recording)
  double gpu_ms = 0, record_ms = 0, wait_ms = 0;
  // The steady host cost: the median over recorded submissions of recording time per command
  // (the first submissions also create pipelines).
  double record_us_per_command = 0;
  std::vector<ProfiledCommand> per_command;  // longest first
};
ProfileSummary profile_summary();

// A table of `summary`, normalised by `tokens` (0: not normalised), longest first; empty when
// nothing was profiled. Without a summary: the totals so far.
std::string profile_report(const ProfileSummary& summary, uint64_t tokens);
std::string profile_report(uint64_t tokens);

}  // namespace eaglevk::vk
