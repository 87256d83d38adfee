#pragma once
// A progress line on stderr while weights upload: bytes, rate and time left. Shown only on a
// terminal and only once a load has taken a second, so that small models and pipes stay quiet.
#include <chrono>
#include <cstdint>
#include <functional>

namespace eaglevk::cli {

class LoadProgress {
 public:
  // `total` is what the files hold (the memory plan's weights); uploads report to it through
  // observer(), which api::load_model calls with each upload's bytes.
  explicit LoadProgress(uint64_t total);
  ~LoadProgress();
  LoadProgress(const LoadProgress&) = delete;
  LoadProgress& operator=(const LoadProgress&) = delete;
  // Empty when stderr is no terminal: nothing to draw.
  std::function<void(uint64_t bytes)> observer();

 private:
  void advance(uint64_t bytes);

  uint64_t total_ = 0, done_ = 0;
  bool terminal_ = false, shown_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace eaglevk::cli
