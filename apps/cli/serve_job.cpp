#include "apps/cli/serve_job.h"

#include <algorithm>
#include <iterator>

namespace eaglevk::cli::serve {

void Job::publish() {
  if (round_text.empty() && round_ids.empty() && round_logprobs.empty()) return;
  {
    std::lock_guard lock(mutex);
    text += round_text;
    ids.insert(ids.end(), round_ids.begin(), round_ids.end());
    std::move(round_logprobs.begin(), round_logprobs.end(), std::back_inserter(logprobs));
  }
  round_text.clear();
  round_ids.clear();
  round_logprobs.clear();
  changed.notify_all();
}

void Job::finish(api::GenerateOutput out) {
  publish();
  {
    std::lock_guard lock(mutex);
    output = std::move(out);
    finished = true;
  }
  changed.notify_all();
}

void Job::fail(HttpError e) {
  {
    std::lock_guard lock(mutex);
    error = std::move(e);
    finished = true;
  }
  changed.notify_all();
}

bool Job::wait(std::string& out_text, std::vector<int32_t>& out_ids, std::chrono::milliseconds wait,
               std::vector<engine::TokenLogprobs>* out_logprobs) {
  std::unique_lock lock(mutex);
  changed.wait_for(lock, wait,
                   [&] { return finished || !text.empty() || !ids.empty() || (out_logprobs && !logprobs.empty()); });
  if (out_logprobs) {
    std::move(logprobs.begin(), logprobs.end(), std::back_inserter(*out_logprobs));
    logprobs.clear();
  }
  out_text += text;
  out_ids.insert(out_ids.end(), ids.begin(), ids.end());
  text.clear();
  ids.clear();
  return finished;
}

}  // namespace eaglevk::cli::serve
