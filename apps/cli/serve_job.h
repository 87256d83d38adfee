#pragma once
// One request on its way through `eaglevk serve`: what the HTTP handler prepared (prompt ids,
// decoded images, the sequence's settings), and the channel through which the scheduler thread,
// which alone decodes, hands it text as it is generated and the outcome at the end. The handler
// thread waits on the channel; nothing else is shared.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <eaglevk/eaglevk.hpp>

#include "apps/cli/serve_request.h"

namespace eaglevk::cli::serve {

using Clock = std::chrono::steady_clock;

struct Job {
  Request request;
  std::vector<int32_t> prompt;
  std::vector<loader::RgbImage> images;  // a vision request: decoded by a Session, not the batch
  api::SequenceParams params;
  Clock::time_point deadline;            // past it the scheduler ends the request (--timeout)

  // Set by the handler when its client went away: the scheduler cancels the sequence at its next
  // round (or drops the job from the queue).
  std::atomic<bool> abandoned{false};

  // The channel, under `mutex`: text generated since the handler last took it, and the end.
  std::mutex mutex;
  std::condition_variable changed;
  std::string text;
  std::vector<int32_t> ids;
  std::vector<engine::TokenLogprobs> logprobs;  // a stream with logprobs: those of `ids`' tokens
  bool finished = false;
  std::optional<HttpError> error;  // set with finished when the request failed
  api::GenerateOutput output;      // set with finished otherwise
  bool timed_out = false;

  // The scheduler's own: the pieces of the round being decoded, published after the round.
  std::string round_text;
  std::vector<int32_t> round_ids;
  std::vector<engine::TokenLogprobs> round_logprobs;
  size_t logprobs_taken = 0;  // the sequence's log-probabilities already moved to round_logprobs

  // Scheduler side.
  void publish();  // round_text/ids/logprobs into the channel
  void finish(api::GenerateOutput out);
  void fail(HttpError e);

  // Handler side: waits until there is text or the end (or `wait` passes); moves the text out,
  // and the log-probabilities when `logprobs` is given (else they stay for a later call).
  // Returns whether the job finished.
  bool wait(std::string& text, std::vector<int32_t>& ids, std::chrono::milliseconds wait,
            std::vector<engine::TokenLogprobs>* logprobs = nullptr);
};

}  // namespace eaglevk::cli::serve
