#include "apps/cli/serve_signals.h"

#include <pthread.h>
#include <signal.h>

#include <cstdlib>

#include <fmt/core.h>

namespace eaglevk::cli::serve {

StopSignals::StopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  waiter_ = std::thread([this, set] {
    bool stopping = false;
    while (true) {
      int signal = 0;
      sigwait(&set, &signal);
      if (closing_) return;
      std::lock_guard lock(mutex_);
      if (stopping) {
        fmt::print(stderr, "eaglevk: second stop signal ({}): exiting without finishing the requests under way\n", signal);
        std::_Exit(130);
      }
      if (!stop_) {
        fmt::print(stderr, "eaglevk: stopped by signal {} before serving\n", signal);
        std::_Exit(130);
      }
      fmt::print(stderr, "eaglevk: stopping: finishing the requests under way (a second Ctrl-C ends them)\n");
      stop_();
      stopping = true;
    }
  });
}

StopSignals::~StopSignals() {
  closing_ = true;
  pthread_kill(waiter_.native_handle(), SIGTERM);  // wakes the waiter if no signal came
  waiter_.join();
}

void StopSignals::on_stop(std::function<void()> stop) {
  std::lock_guard lock(mutex_);
  stop_ = std::move(stop);
}

}  // namespace eaglevk::cli::serve
