#pragma once
// `eaglevk serve`'s HTTP side (cpp-httplib): the routes, the API key, the body limit, and the
// handlers that turn a request into a Job (prompt ids, images, settings), queue it and answer
// from its channel, whole or as server-sent events.
#include <chrono>
#include <cstdint>
#include <atomic>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <eaglevk/eaglevk.hpp>

#include "apps/cli/serve_metrics.h"
#include "apps/cli/serve_scheduler.h"

namespace eaglevk::cli::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8080;                 // 0: a free port, printed when listening
  std::string api_key;                  // empty: none asked for
  uint64_t max_body_bytes = 32 << 20;
  std::chrono::seconds timeout{600};    // from arrival to the last token
  std::vector<std::filesystem::path> allowed_image_dirs;
  std::string model_name;               // what "model" must say
  uint64_t default_seed = 0;            // for requests at temperature > 0 without a seed
  size_t http_threads = 16;
};

// SIGINT and SIGTERM for the server: blocked in every thread from construction on (it must come
// before the Vulkan driver and the scheduler start threads of their own, which would otherwise
// take the signal and end the process at once), and awaited by one thread that calls what
// on_stop() set, or ends the process (status 130) while nothing is set (a model still loading).
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

// Serves until a stop signal (then returns 0); fails when the address cannot be bound.
int run_server(const std::shared_ptr<const api::Model>& model, Scheduler& scheduler, Metrics& metrics,
               const ServerOptions& options, StopSignals& signals);

}  // namespace eaglevk::cli::serve
