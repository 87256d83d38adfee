#pragma once
// Process-wide totals of profiled submissions (EAGLEVK_PROFILE=1): GPU time, count and bytes
// bound per command (shader family and the op's name; the report turns the bytes into GB/s for
// the matrix-vector kernels), host time spent recording and waiting. Every
// Recorder with `profile` set folds its timestamps in after each wait; `profile_report`
// prints them per generated token.
#include <cstdint>
#include <string>

namespace eaglevk::vk {

struct TimedCommand;

// Adds one finished submission: its per-command GPU times and the host's recording and
// waiting time for it.
void add_profiled_submission(const TimedCommand* commands, size_t count, double record_ms, double wait_ms);

// Forgets the totals so far: `run` starts counting after the model's upload.
void profile_reset();

// A table of the totals, normalised by `tokens` (0: not normalised), longest first; empty
// when nothing was profiled.
std::string profile_report(uint64_t tokens);

}  // namespace eaglevk::vk
