#pragma once
// SIGINT and SIGTERM for `eaglevk serve`: blocked in every thread from construction on (it must
// come before the Vulkan driver and the scheduler start threads of their own, which would
// otherwise take the signal and end the process at once), and awaited by one thread. The first
// signal calls what on_stop() set (the server stops taking requests and finishes those under
// way), or ends the process (status 130) while nothing is set (a model still loading). A second
// signal ends the process at once, whatever is under way: a request may decode for --timeout.
#include <atomic>
#include <functional>
#include <mutex>
#include <thread>

namespace eaglevk::cli::serve {

class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  void on_stop(std::function<void()> stop);

 private:
  std::mutex mutex_;
  std::function<void()> stop_;
  std::atomic<bool> closing_{false};
  std::thread waiter_;
};

}  // namespace eaglevk::cli::serve
