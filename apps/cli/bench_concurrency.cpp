#include "apps/cli/bench_concurrency.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <map>
#include <random>

#include <fmt/core.h>

namespace eaglevk::cli {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// One request on its way: when its client sent it, and when its last token group came.
struct Timing {
  Clock::time_point sent, last;
  uint64_t round = 0;
  bool first = false;
};

}  // namespace

double percentile(std::vector<double> samples, double fraction) {
  if (samples.empty()) return 0;
  std::sort(samples.begin(), samples.end());
  const size_t rank = size_t(std::ceil(fraction * double(samples.size())));
  return samples[std::min(samples.size() - 1, rank == 0 ? 0 : rank - 1)];
}

ConcurrencyResult bench_concurrency(const std::shared_ptr<const api::Model>& model, uint32_t clients,
                                    uint32_t requests_per_client, uint32_t n_prompt, uint32_t n_gen, uint32_t k,
                                    uint32_t context) {
  api::BatchParams params;
  params.sequences = clients;
  params.context = context;
  params.k = model->draft ? k : 0;
  api::BatchSession batch(model, params);
  api::SequenceParams sequence;
  sequence.max_new_tokens = n_gen;
  sequence.ignore_eos = true;
  std::mt19937 rng(1234);
  const int32_t vocab = model->vocab_size();
  auto random_prompt = [&] {
    std::vector<int32_t> ids(std::max<uint32_t>(n_prompt, 1));
    for (int32_t& id : ids) id = int32_t(rng() % uint32_t(vocab));
    return ids;
  };
  // The untimed request: the pipelines of prefill, rounds and sampling are built here.
  {
    const uint32_t id = batch.start(random_prompt(), sequence);
    while (!batch.finished(id)) batch.step();
    batch.take(id);
  }

  ConcurrencyResult r;
  r.clients = clients;
  const size_t total = size_t(clients) * requests_per_client;
  engine::SpecStats stats;
  uint64_t round = 0;
  std::map<uint32_t, std::shared_ptr<Timing>> live;
  // When each client sent the request it waits to start: all at once at first, then each as soon
  // as its last one finished.
  const Clock::time_point begin = Clock::now();
  std::deque<Clock::time_point> sent(clients, begin);
  size_t started = 0;
  while (r.requests < total) {
    while (started < total && !sent.empty() && batch.can_start(sequence)) {
      auto timing = std::make_shared<Timing>();
      timing->sent = sent.front();
      sent.pop_front();
      Timing* t = timing.get();
      const uint32_t id = batch.start(random_prompt(), sequence, [&r, &round, t](int32_t, std::string_view) {
        const Clock::time_point now = Clock::now();
        if (!t->first) {
          r.ttft.push_back(seconds_between(t->sent, now));
          t->first = true;
        } else if (t->round != round) {
          r.itl.push_back(seconds_between(t->last, now));
        }
        t->last = now;
        t->round = round;
        return true;
      });
      live[id] = std::move(timing);
      ++started;
    }
    ++round;
    if (batch.running()) batch.step();
    for (auto it = live.begin(); it != live.end();) {
      if (!batch.finished(it->first)) {
        ++it;
        continue;
      }
      const api::GenerateOutput out = batch.take(it->first);
      r.output_tokens += out.tokens.size();
      stats.merge(out.stats);
      ++r.requests;
      sent.push_back(Clock::now());
      it = live.erase(it);
    }
  }
  r.seconds = seconds_between(begin, Clock::now());
  r.acceptance_length = stats.num_drafts ? stats.mean_acceptance_length() : 0;
  return r;
}

std::string concurrency_table(const std::string& model, const std::string& device,
                              const std::vector<ConcurrencyResult>& results) {
  // "-" when there is no sample: a sequence whose tokens all came at once has no gaps.
  auto ms = [](const std::vector<double>& samples, double fraction) {
    return samples.empty() ? std::string("-") : fmt::format("{:.0f} ms", percentile(samples, fraction) * 1e3);
  };
  std::string out =
      "| model | device | clients | requests | req/s | output t/s | TTFT p50 | TTFT p99 | ITL p50 | ITL p99 | AL |\n"
      "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
  for (const ConcurrencyResult& r : results)
    out += fmt::format("| {} | {} | {} | {} | {:.2f} | {:.1f} | {} | {} | {} | {} | {} |\n", model, device, r.clients,
                       r.requests, r.requests / r.seconds, r.output_tokens / r.seconds, ms(r.ttft, 0.5), ms(r.ttft, 0.99),
                       ms(r.itl, 0.5), ms(r.itl, 0.99),
                       r.acceptance_length > 0 ? fmt::format("{:.2f}", r.acceptance_length) : "-");
  return out;
}

nlohmann::json concurrency_json(const std::string& model, const std::string& device, const ConcurrencyResult& r) {
  return {{"model", model},
          {"device", device},
          {"test", fmt::format("concurrency {}", r.clients)},
          {"clients", r.clients},
          {"requests", r.requests},
          {"seconds", r.seconds},
          {"requests_per_s", r.requests / r.seconds},
          {"output_tokens_per_s", r.output_tokens / r.seconds},
          {"ttft_p50_s", percentile(r.ttft, 0.5)},
          {"ttft_p99_s", percentile(r.ttft, 0.99)},
          {"itl_p50_s", r.itl.empty() ? nlohmann::json(nullptr) : nlohmann::json(percentile(r.itl, 0.5))},
          {"itl_p99_s", r.itl.empty() ? nlohmann::json(nullptr) : nlohmann::json(percentile(r.itl, 0.99))},
          {"mean_acceptance_length", r.acceptance_length}};
}

}  // namespace eaglevk::cli
