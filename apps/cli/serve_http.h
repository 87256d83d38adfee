#pragma once
// `eaglevk serve`'s HTTP side: cpp-httplib's routes behind the front (serve_front.h), which
// takes every request off the socket within its limits, and the handlers that turn a request
// into a Job (prompt ids, images, settings), queue it and answer from its channel, whole or as
// server-sent events.
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <eaglevk/eaglevk.hpp>

#include "apps/cli/serve_front.h"
#include "apps/cli/serve_metrics.h"
#include "apps/cli/serve_scheduler.h"
#include "apps/cli/serve_signals.h"

namespace eaglevk::cli::serve {

struct ServerOptions {
  FrontOptions front;                   // the address, the key and the limits on clients
  std::chrono::seconds timeout{600};    // from arrival to the last token
  std::string cors_origin;              // empty: no CORS headers
  std::vector<std::filesystem::path> allowed_image_dirs;
  std::string model_name;               // what "model" must say
  uint64_t default_seed = 0;            // for requests at temperature > 0 without a seed
};

// Serves on `front` (bound before the model loaded, so that a port in use fails at once) until
// a stop signal, then returns 0.
int run_server(const std::shared_ptr<const api::Model>& model, Scheduler& scheduler, Metrics& metrics,
               const ServerOptions& options, Front& front, StopSignals& signals);

}  // namespace eaglevk::cli::serve
