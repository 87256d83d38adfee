#include "apps/cli/serve_metrics.h"

#include <algorithm>
#include <iterator>

#include <fmt/core.h>

namespace eaglevk::cli::serve {

void Metrics::count_request(const std::string& endpoint, int status) {
  // Paths no route serves are one label: a client must not grow the page without bound.
  static const char* const known[] = {"/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics"};
  const bool listed = std::find(std::begin(known), std::end(known), endpoint) != std::end(known);
  std::lock_guard lock(mutex_);
  ++requests_[{listed ? endpoint : "other", status}];
}

void Metrics::count_generation(uint64_t prompt_tokens, uint64_t generated_tokens, const engine::SpecStats& stats,
                               bool cancelled) {
  std::lock_guard lock(mutex_);
  prompt_tokens_ += prompt_tokens;
  generated_tokens_ += generated_tokens;
  ++sequences_;
  if (cancelled) ++cancelled_;
  stats_.merge(stats);
}

void Metrics::add_busy_seconds(double seconds) {
  std::lock_guard lock(mutex_);
  busy_seconds_ += seconds;
}

std::string Metrics::text(const MetricsGauges& g) const {
  std::lock_guard lock(mutex_);
  std::string out;
  auto metric = [&](const char* name, const char* type, const char* help) {
    out += fmt::format("# HELP eaglevk_{} {}\n# TYPE eaglevk_{} {}\n", name, help, name, type);
  };
  metric("requests_total", "counter", "HTTP requests answered, by endpoint and status");
  for (const auto& [key, count] : requests_)
    out += fmt::format("eaglevk_requests_total{{endpoint=\"{}\",status=\"{}\"}} {}\n", key.first, key.second, count);
  metric("queue_length", "gauge", "requests waiting for a sequence slot");
  out += fmt::format("eaglevk_queue_length {}\n", g.queued);
  metric("queue_capacity", "gauge", "the most requests that may wait (--max-queue)");
  out += fmt::format("eaglevk_queue_capacity {}\n", g.max_queue);
  metric("sequences_running", "gauge", "sequences decoding now");
  out += fmt::format("eaglevk_sequences_running {}\n", g.running);
  metric("sequences_capacity", "gauge", "the most sequences decoding together (--parallel)");
  out += fmt::format("eaglevk_sequences_capacity {}\n", g.parallel);
  metric("sequences_total", "counter", "sequences that finished decoding, cancelled ones included");
  out += fmt::format("eaglevk_sequences_total {}\n", sequences_);
  metric("sequences_cancelled_total", "counter", "sequences ended early because their client went away or timed out");
  out += fmt::format("eaglevk_sequences_cancelled_total {}\n", cancelled_);
  metric("prompt_tokens_total", "counter", "prompt tokens prefilled");
  out += fmt::format("eaglevk_prompt_tokens_total {}\n", prompt_tokens_);
  metric("generated_tokens_total", "counter", "tokens generated");
  out += fmt::format("eaglevk_generated_tokens_total {}\n", generated_tokens_);
  metric("busy_seconds_total", "counter", "seconds spent prefilling and decoding");
  out += fmt::format("eaglevk_busy_seconds_total {:.6f}\n", busy_seconds_);
  metric("generated_tokens_per_second", "gauge", "generated tokens over busy seconds");
  out += fmt::format("eaglevk_generated_tokens_per_second {:.3f}\n",
                     busy_seconds_ > 0 ? double(generated_tokens_) / busy_seconds_ : 0.0);
  metric("drafts_total", "counter", "verify passes that carried draft tokens");
  out += fmt::format("eaglevk_drafts_total {}\n", stats_.num_drafts);
  metric("draft_tokens_total", "counter", "draft tokens proposed");
  out += fmt::format("eaglevk_draft_tokens_total {}\n", stats_.num_draft_tokens);
  metric("accepted_tokens_total", "counter", "draft tokens accepted");
  out += fmt::format("eaglevk_accepted_tokens_total {}\n", stats_.num_accepted_tokens);
  metric("acceptance_length", "gauge", "mean tokens per verify pass: 1 + accepted / drafts");
  out += fmt::format("eaglevk_acceptance_length {:.6f}\n", stats_.num_drafts ? stats_.mean_acceptance_length() : 0.0);
  metric("acceptance_rate_by_position", "gauge", "drafts whose token at this position was accepted, over drafts");
  const std::vector<double> per_position = stats_.acceptance_per_position();
  for (size_t i = 0; i < per_position.size(); ++i)
    out += fmt::format("eaglevk_acceptance_rate_by_position{{position=\"{}\"}} {:.6f}\n", i, per_position[i]);
  return out;
}

}  // namespace eaglevk::cli::serve
