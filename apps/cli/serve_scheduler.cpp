#include "apps/cli/serve_scheduler.h"

#include <algorithm>
#include <iterator>
#include <optional>

#include <fmt/core.h>

namespace eaglevk::cli::serve {
namespace {

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

HttpError server_error(int status, std::string message, std::string code = {}) {
  return HttpError{status, std::move(message), "server_error", "", std::move(code)};
}

// A request the facade refused for what it asked (a prompt too long once its images are laid
// out, a token outside the vocabulary, a model that takes no images) is the client's error.
bool client_error(const api::ApiError& e) {
  return e.kind == api::ErrorKind::InvalidArgument || e.kind == api::ErrorKind::ContextFull ||
         e.kind == api::ErrorKind::Model;
}

HttpError error_of(const api::ApiError& e) {
  if (e.kind == api::ErrorKind::ContextFull) return {400, e.what(), "invalid_request_error", "", "context_length_exceeded"};
  if (client_error(e)) return {400, e.what(), "invalid_request_error", "", ""};
  return server_error(500, e.what());
}

// Streams each token's text into the job's round (published after the round); false ends the
// sequence when its client went away or its time is up (checked here too, so that a request
// stops at its next token, not only between rounds).
api::PieceCallback collect_into(Job* job) {
  return [job](int32_t token, std::string_view piece) {
    job->round_text += piece;
    if (token >= 0) job->round_ids.push_back(token);
    if (Clock::now() > job->deadline) job->timed_out = true;
    return !job->abandoned.load() && !job->timed_out;
  };
}

// A sequence's log-probabilities from index `from` on: a finished one's from its output (the
// batch has handed them over), a running one's from the batch.
std::vector<engine::TokenLogprobs> logprobs_from(const api::BatchSession& batch, uint32_t id,
                                                 const std::optional<api::GenerateOutput>& taken, size_t from) {
  if (!taken) return batch.logprobs(id, from);
  const std::vector<engine::TokenLogprobs>& all = taken->logprobs;
  if (from >= all.size()) return {};
  return {all.begin() + std::ptrdiff_t(from), all.end()};
}

}  // namespace

Scheduler::Scheduler(std::shared_ptr<const api::Model> model, const api::BatchParams& params,
                     const engine::TreeParams& tree, size_t max_queue, Metrics& metrics)
    : model_(std::move(model)), tree_(tree), metrics_(metrics), queue_(max_queue) {
  greedy_drafts_ = params.greedy_drafts;
  if (tree_.enabled()) {
    // What each request's Session will decide (api::Session clips the context the same way).
    context_ = std::min(params.context, model_->max_context());
    speculative_ = model_->draft != nullptr;
  } else {
    batch_.emplace(model_, params);
    context_ = batch_->context();
    speculative_ = batch_->speculative();
  }
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() {
  stop_ = true;
  for (const std::shared_ptr<Job>& job : queue_.close()) job->fail(server_error(503, "the server is shutting down"));
  thread_.join();
  fail_all(server_error(503, "the server is shutting down"));
}

bool Scheduler::submit(std::shared_ptr<Job> job) { return queue_.push(std::move(job)); }

MetricsGauges Scheduler::gauges() const {
  return {queue_.size(), running_count_.load(), batch_ ? batch_->params().sequences : 1u, queue_.capacity()};
}

void Scheduler::loop() {
  while (!stop_) {
    try {
      admit();
      end_abandoned();
      if (batch_ && batch_->running()) {
        const Clock::time_point start = Clock::now();
        batch_->step();
        metrics_.add_busy_seconds(seconds_since(start));
      }
      deliver();
    } catch (const std::exception& e) {
      // The batch's device state is not to be trusted after a failed round: every request now and
      // later is answered 503, and /health says so.
      fmt::print(stderr, "eaglevk: error: decoding failed: {}; the server now refuses requests\n", e.what());
      healthy_ = false;
      fail_all(server_error(500, fmt::format("decoding failed: {}", e.what())));
      for (const std::shared_ptr<Job>& job : queue_.close())
        job->fail(server_error(503, "the server cannot decode any more (see its log)", "unavailable"));
      return;
    }
    if (running_.empty()) queue_.wait(std::chrono::milliseconds(200));
  }
}

void Scheduler::admit() {
  while (!stop_) {
    const std::shared_ptr<Job> job = queue_.front();
    if (!job) return;
    if (job->abandoned) {
      queue_.pop(job);
      job->fail(HttpError{499, "the client went away", "invalid_request_error", "", ""});
      continue;
    }
    if (Clock::now() > job->deadline) {
      queue_.pop(job);
      job->fail(server_error(503, "the request waited in the queue past --timeout", "timeout"));
      continue;
    }
    if (!job->images.empty() || !batch_) {
      queue_.pop(job);
      run_alone(job);
      continue;
    }
    if (!batch_->can_start(job->params)) return;  // until a sequence of the batch is free
    queue_.pop(job);
    try {
      const Clock::time_point start = Clock::now();
      const uint32_t id = batch_->start(job->prompt, job->params, collect_into(job.get()));
      metrics_.add_busy_seconds(seconds_since(start));
      running_[id] = job;
      running_count_ = running_.size();
    } catch (const api::ApiError& e) {
      job->fail(error_of(e));
      if (!client_error(e)) throw;
    } catch (...) {
      job->fail(server_error(500, "decoding failed"));
      throw;
    }
  }
}

void Scheduler::run_alone(const std::shared_ptr<Job>& job) {
  api::SessionParams p;
  p.context = context_;
  p.k = batch_ ? batch_->params().k : 0;
  p.tree = tree_;
  p.greedy_drafts = greedy_drafts_;
  p.sampling = job->params.sampling;
  p.max_new_tokens = job->params.max_new_tokens;
  p.ignore_eos = job->params.ignore_eos;
  p.stop = job->params.stop;
  p.logprobs = job->params.logprobs;
  Job* j = job.get();
  const Clock::time_point start = Clock::now();
  try {
    api::Session session(model_, p);
    api::GenerateOutput out = session.generate(
        job->prompt,
        [j, &session](int32_t token, std::string_view piece) {
          j->round_text += piece;
          if (token >= 0) j->round_ids.push_back(token);
          if (j->request.stream && j->request.logprobs) {
            std::vector<engine::TokenLogprobs> fresh = session.logprobs_so_far(j->logprobs_taken);
            j->logprobs_taken += fresh.size();
            std::move(fresh.begin(), fresh.end(), std::back_inserter(j->round_logprobs));
          }
          j->publish();
          if (Clock::now() > j->deadline) j->timed_out = true;
          return !j->abandoned.load() && !j->timed_out;
        },
        job->images);
    metrics_.add_busy_seconds(seconds_since(start));
    if (j->request.stream && j->request.logprobs && j->logprobs_taken < out.logprobs.size()) {
      // Tokens whose text the stop strings held back until the end: their log-probabilities too.
      std::copy(out.logprobs.begin() + std::ptrdiff_t(j->logprobs_taken), out.logprobs.end(),
                std::back_inserter(j->round_logprobs));
      j->logprobs_taken = out.logprobs.size();
    }
    metrics_.count_generation(out.prompt_tokens, out.tokens.size(), out.stats, out.stopped_by_caller);
    if (j->timed_out)
      job->fail(server_error(503, "the request ran past --timeout", "timeout"));
    else
      job->finish(std::move(out));
  } catch (const api::ApiError& e) {
    job->fail(error_of(e));
    if (e.kind == api::ErrorKind::DeviceLost) throw;
  }
}

void Scheduler::end_abandoned() {
  const Clock::time_point now = Clock::now();
  for (auto& [id, job] : running_) {
    if (batch_->finished(id)) continue;
    if (now > job->deadline) job->timed_out = true;
    if (job->abandoned || job->timed_out) batch_->cancel(id);
  }
}

void Scheduler::deliver() {
  for (auto it = running_.begin(); it != running_.end();) {
    const auto& [id, job] = *it;
    const bool done = batch_->finished(id);
    std::optional<api::GenerateOutput> taken;
    if (done) taken = batch_->take(id);
    if (job->request.stream && job->request.logprobs) {
      // The log-probabilities of the tokens this round emitted go out with their text.
      std::vector<engine::TokenLogprobs> fresh = logprobs_from(*batch_, id, taken, job->logprobs_taken);
      job->logprobs_taken += fresh.size();
      std::move(fresh.begin(), fresh.end(), std::back_inserter(job->round_logprobs));
    }
    job->publish();
    if (!done) {
      ++it;
      continue;
    }
    api::GenerateOutput out = std::move(*taken);
    metrics_.count_generation(out.prompt_tokens, out.tokens.size(), out.stats, out.stopped_by_caller);
    if (job->timed_out)
      job->fail(server_error(503, "the request ran past --timeout", "timeout"));
    else
      job->finish(std::move(out));
    it = running_.erase(it);
  }
  running_count_ = running_.size();
}

void Scheduler::fail_all(const HttpError& e) {
  for (auto& [id, job] : running_) job->fail(e);
  running_.clear();
  running_count_ = 0;
}

}  // namespace eaglevk::cli::serve
