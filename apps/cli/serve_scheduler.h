#pragma once
// The one thread that decodes for `eaglevk serve`. It owns the BatchSession: between rounds it
// admits queued requests (in arrival order), runs one round of every running sequence, hands
// each request its new text, and takes the sequences that finished. HTTP handler threads only
// parse, queue and wait (serve_job.h).
//
// A text request starts as soon as a sequence of the batch is free, whatever its sampling
// settings (each row of a round samples with its own). Two rules remain:
//  - A request with images decodes alone, in an api::Session run between two rounds (the
//    batch's sequences pause meanwhile): BatchSession takes no images. One at a time.
//  - With tree drafting (the --spec-* flags) every request decodes alone in an api::Session:
//    the decoder drafts trees for one sequence at a time, so there is no batch at all.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <thread>

#include <eaglevk/eaglevk.hpp>

#include "apps/cli/serve_job.h"
#include "apps/cli/serve_metrics.h"
#include "apps/cli/serve_queue.h"

namespace eaglevk::cli::serve {

class Scheduler {
 public:
  // `tree`, when enabled, makes every request a tree-drafting Session of its own (params.k and
  // params.sequences are then unused).
  Scheduler(std::shared_ptr<const api::Model> model, const api::BatchParams& params, const engine::TreeParams& tree,
            size_t max_queue, Metrics& metrics);
  ~Scheduler();  // ends the thread; waiting and running requests are failed with 503
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a request; false when the queue is full.
  bool submit(std::shared_ptr<Job> job);
  // False once decoding failed on the device: the server then answers 503.
  bool healthy() const { return healthy_; }
  uint32_t context() const { return context_; }
  bool speculative() const { return speculative_; }
  MetricsGauges gauges() const;

 private:
  void loop();
  void admit();
  void run_alone(const std::shared_ptr<Job>& job);
  void end_abandoned();
  void deliver();
  void fail_all(const HttpError& e);

  std::shared_ptr<const api::Model> model_;
  engine::TreeParams tree_;
  std::optional<api::BatchSession> batch_;  // absent with tree drafting
  uint32_t context_ = 0;
  bool speculative_ = false;
  bool greedy_drafts_ = false;
  Metrics& metrics_;
  BoundedQueue<Job> queue_;
  std::map<uint32_t, std::shared_ptr<Job>> running_;  // by sequence id
  std::atomic<size_t> running_count_{0};
  std::atomic<bool> stop_{false}, healthy_{true};
  std::thread thread_;
};

}  // namespace eaglevk::cli::serve
