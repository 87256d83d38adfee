#pragma once
// `eaglevk serve`'s counters and GET /metrics (Prometheus text format 0.0.4). Counters only
// grow; gauges (queue length, running sequences) are read when the page is asked for. The
// handlers count answers by status, the scheduler counts tokens and speculation, so that a client
// can check the page against what it received: generated tokens equal the sum of the answers'
// usage.completion_tokens.
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include <eaglevk/eaglevk.hpp>  // engine::SpecStats, through the facade

namespace eaglevk::cli::serve {

struct MetricsGauges {
  uint64_t queued = 0, running = 0, parallel = 0, max_queue = 0;
};

class Metrics {
 public:
  // An answered request: the endpoint's path and the HTTP status (200 for a finished one, also
  // when it streamed).
  void count_request(const std::string& endpoint, int status);
  // A sequence that ended in the scheduler: its tokens and speculation counters; cancelled ones
  // (a client that went away) are counted apart.
  void count_generation(uint64_t prompt_tokens, uint64_t generated_tokens, const engine::SpecStats& stats,
                        bool cancelled);
  // Seconds the scheduler spent decoding (rounds and prefills), for tokens per second.
  void add_busy_seconds(double seconds);
  std::string text(const MetricsGauges& gauges) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  uint64_t prompt_tokens_ = 0, generated_tokens_ = 0, sequences_ = 0, cancelled_ = 0;
  double busy_seconds_ = 0;
  engine::SpecStats stats_;
};

}  // namespace eaglevk::cli::serve
