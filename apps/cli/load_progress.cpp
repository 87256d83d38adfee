#include "apps/cli/load_progress.h"

#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>

#include <eaglevk/eaglevk.hpp>  // engine::format_bytes

namespace eaglevk::cli {

LoadProgress::LoadProgress(uint64_t total)
    : total_(total), terminal_(::isatty(STDERR_FILENO) == 1), start_(std::chrono::steady_clock::now()) {}

std::function<void(uint64_t)> LoadProgress::observer() {
  if (!terminal_) return {};
  return [this](uint64_t bytes) { advance(bytes); };
}

LoadProgress::~LoadProgress() {
  if (shown_) fmt::print(stderr, "\r\033[K");  // the line goes; what follows starts clean
}

void LoadProgress::advance(uint64_t bytes) {
  done_ += bytes;
  const auto now = std::chrono::steady_clock::now();
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  if (elapsed < 1.0 || (shown_ && now - last_draw_ < std::chrono::milliseconds(100))) return;
  shown_ = true;
  last_draw_ = now;
  const uint64_t done = std::min(done_, total_);
  const double rate = double(done) / elapsed;
  const double left = rate > 0 ? double(total_ - done) / rate : 0;
  const int width = 24, filled = total_ ? int(width * double(done) / double(total_)) : width;
  fmt::print(stderr, "\r\033[Keaglevk: loading [{:=<{}}{:<{}}] {} / {}  {}/s  {:.0f} s left", "", filled, "",
             width - filled, engine::format_bytes(done), engine::format_bytes(total_),
             engine::format_bytes(uint64_t(rate)), left);
  std::fflush(stderr);
}

}  // namespace eaglevk::cli
