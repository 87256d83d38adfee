#pragma once
// A progress line on stderr while weights upload: bytes, rate and time left. Shown only on a
// terminal and only once a load has taken a second, so that small models and pipes stay quiet.
#include <chrono>
#include <cstdint>

#include "runtime/vk/context.h"

namespace eaglevk::cli {

class LoadProgress {
 public:
  // `total` is what the files hold (the memory plan's weights); uploads report to it through
  // vk::Context::on_upload until this object goes.
  LoadProgress(vk::Context& ctx, uint64_t total);
  ~LoadProgress();
  LoadProgress(const LoadProgress&) = delete;
  LoadProgress& operator=(const LoadProgress&) = delete;

 private:
  void advance(uint64_t bytes);

  vk::Context& ctx_;
  uint64_t total_ = 0, done_ = 0;
  bool terminal_ = false, shown_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace eaglevk::cli
