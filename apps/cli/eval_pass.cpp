#include "apps/cli/eval_pass.h"

#include <optional>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <eaglevk/error.h>

namespace eaglevk::cli {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Shows progress on a terminal as one rewritten line; elsewhere as plain lines.
struct Progress {
  size_t total;
  bool tty = isatty(STDERR_FILENO);
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  size_t tokens = 0;

  size_t resumed = 0;  // prompts taken from a resume file: not in the rate or the ETA

  void update(size_t done, const PromptResult& last) {
    tokens += last.output_tokens;
    double elapsed = seconds_since(start);
    const size_t run = done - resumed;
    double eta = run ? elapsed / run * (total - done) : 0;
    double tps = elapsed > 0 ? tokens / elapsed : 0;
    if (tty) {
      int width = 30, filled = int(width * done / total);
      fmt::print(stderr, "\r[{}{}] {}/{}  {:.1f} tok/s  ETA {:.0f}s   ", std::string(filled, '#'),
                 std::string(width - filled, '.'), done, total, tps, eta);
      if (done == total) fmt::print(stderr, "\n");
    } else {
      fmt::print(stderr, "eval: {}/{} prompts, {:.1f} tok/s, ETA {:.0f}s (line {}: {} tokens, AL {:.2f})\n", done,
                 total, tps, eta, last.line, last.output_tokens, last.stats.mean_acceptance_length());
    }
  }
};

// A line's images, read from their files.
std::vector<loader::RgbImage> item_images(const loader::DatasetItem& item) {
  std::vector<loader::RgbImage> images;
  for (const std::filesystem::path& path : item.images) images.push_back(loader::load_image(path));
  return images;
}

// The line's prompt with its images made ready once (placeholders expanded, the vision tower
// run) for the draft's session and the baseline's alike; a prompt the images do not fit is
// refused naming its line.
api::ImagePrompt item_image_prompt(const EvalSetup& e, const loader::DatasetItem& item, std::span<const int32_t> ids,
                                   std::span<const loader::RgbImage> images) {
  try {
    return api::prepare_images(*e.model, ids, images);
  } catch (const Error& err) {
    fail("{}:{}: {}", e.args.dataset, item.line, err.what());
  }
}

}  // namespace

// The prompt of generation `g` of an item; `conversation` carries a multi-turn item's turns
// and answers so far.
std::vector<int32_t> item_prompt_ids(const EvalArgs& a, const api::Model& m, const loader::DatasetItem& item,
                                     size_t g, std::vector<loader::ChatMessage>& conversation, std::string* text) {
  // A line too long for the context is refused before it is encoded (check_text_fits).
  const std::string where = fmt::format("{}:{}", a.dataset, item.line);
  auto chat_ids = [&](const std::vector<loader::ChatMessage>& messages) {
    if (!m.chat) fail("{}: this line needs the chat template: {}", where, m.chat_error);
    std::string rendered = m.chat->render(messages, true);
    check_text_fits(m, rendered, where);
    std::vector<int32_t> ids = m.tokenizer.encode(rendered, false);
    if (text) *text = std::move(rendered);
    return ids;
  };
  switch (item.kind) {
    case loader::DatasetItem::Kind::Prompt:
      if (a.chat) return chat_ids({{"user", item.prompt}});
      check_text_fits(m, item.prompt, where);
      if (text) *text = item.prompt;
      return m.tokenizer.encode(item.prompt, true);
    case loader::DatasetItem::Kind::Messages: return chat_ids(item.messages);
    case loader::DatasetItem::Kind::Turns:
      if (g == 0 && !item.system.empty()) conversation.push_back({"system", item.system});
      conversation.push_back({"user", item.turns[g]});
      return chat_ids(conversation);
  }
  return {};
}

namespace {

// A line's record: a new one, before its first generation.
PromptResult new_record(const EvalSetup& e, size_t i, bool has_baseline) {
  const loader::DatasetItem& item = e.data.items[i];
  PromptResult r;
  r.index = i;
  r.line = item.line;
  r.category = item.category;
  r.turns = item.kind == loader::DatasetItem::Kind::Turns;
  r.has_baseline = has_baseline;
  return r;
}

// Adds one finished generation to its line's record (and a multi-turn line's answer to its
// conversation).
void add_generation(const EvalSetup& e, PromptResult& r, api::GenerateOutput out,
                    std::vector<loader::ChatMessage>& conversation) {
  r.stats.merge(out.stats);
  r.output_tokens += out.tokens.size();
  r.prompt_tokens += out.prompt_tokens;
  r.reused_tokens += out.reused_tokens;
  r.seconds += out.prefill_seconds + out.decode_seconds;
  r.stop_reasons.push_back(api::stop_reason(out));
  if (e.session.logprobs) {
    if (r.logprobs.is_null()) r.logprobs = nlohmann::json::array();
    r.logprobs.push_back(logprobs_json(out.logprobs));
  }
  if (r.turns) conversation.push_back({"assistant", e.model->tokenizer.decode(out.tokens, /*skip_special=*/true)});
  r.tokens.push_back(std::move(out.tokens));
}

// Evaluates one dataset line: each of its generations, speculative and (with a plain session)
// plain. A multi-turn line asks each turn after the model's own answer to the one before, in
// one conversation whose KV caches are kept from turn to turn.
PromptResult evaluate_item(const EvalSetup& e, api::Session& spec, api::Session* plain, size_t i) {
  const EvalArgs& a = e.args;
  const api::Model& m = *e.model;
  const loader::DatasetItem& item = e.data.items[i];
  PromptResult r = new_record(e, i, plain != nullptr);
  std::vector<loader::ChatMessage> conversation;
  const size_t generations = r.turns ? item.turns.size() : 1;
  std::vector<loader::RgbImage> images;
  for (size_t g = 0; g < generations; ++g) {
    std::string prompt_text;
    std::vector<int32_t> ids = item_prompt_ids(a, m, item, g, conversation, &prompt_text);
    r.prompt_texts.push_back(std::move(prompt_text));
    if (g == 0) images = item_images(item);
    std::optional<api::ImagePrompt> prepared;
    if (!images.empty()) prepared = item_image_prompt(e, item, ids, images);
    const size_t length = prepared ? prepared->ids.size() : ids.size();
    if (length >= e.session.context)
      fail("{}:{}: the prompt has {} tokens {}", a.dataset, item.line, length, context_advice(m, e.session.context));
    // A line's first generation starts a new sequence, so its result does not depend on the
    // line before it (nor on the shard it runs in). Prompts with images prefill whole.
    const bool reuse = g > 0 && !a.no_kv_reuse && item.images.empty();
    auto generate = [&](api::Session& session) {
      if (prepared) return session.generate(*prepared);
      return reuse ? session.generate_reusing_prefix(ids) : session.generate(ids);
    };
    api::GenerateOutput out = generate(spec);
    if (plain) {
      const api::GenerateOutput base = generate(*plain);
      r.baseline_seconds += base.prefill_seconds + base.decode_seconds;
      r.baseline_tokens += base.tokens.size();
      r.matches_baseline = r.matches_baseline && base.tokens == out.tokens;
    }
    add_generation(e, r, std::move(out), conversation);
  }
  return r;
}

// A line in flight in one slot of the batch session: its record, its turn and conversation.
struct LineInFlight {
  size_t index = 0;
  size_t generation = 0, generations = 1;
  PromptResult record;
  std::vector<loader::ChatMessage> conversation;
};

// The `pending` lines, B at a time (continuous batching): when a line's last
// generation ends, the next line takes its slot; a multi-turn line asks each turn in the same
// slot, continuing from its caches. Records come back in `pending`'s order.
std::vector<PromptResult> evaluate_batched(const EvalSetup& e, const std::vector<size_t>& pending,
                                           const std::function<void(const PromptResult&)>& on_done) {
  const EvalArgs& a = e.args;
  const api::Model& m = *e.model;
  api::BatchParams batch_params;
  batch_params.sequences = e.batch;
  batch_params.context = e.session.context;
  batch_params.k = e.session.k;
  batch_params.greedy_drafts = e.session.greedy_drafts;
  api::BatchSession batch(e.model, batch_params);
  api::SequenceParams params;
  params.sampling = e.session.sampling;
  params.max_new_tokens = e.session.max_new_tokens;
  params.stop = e.session.stop;
  params.logprobs = e.session.logprobs;
  std::vector<std::optional<LineInFlight>> lines(e.batch);
  std::map<size_t, PromptResult> done;
  size_t next = 0;
  auto start_generation = [&](uint32_t slot) {
    LineInFlight& line = *lines[slot];
    const loader::DatasetItem& item = e.data.items[line.index];
    std::string prompt_text;
    std::vector<int32_t> ids = item_prompt_ids(a, m, item, line.generation, line.conversation, &prompt_text);
    line.record.prompt_texts.push_back(std::move(prompt_text));
    if (ids.size() >= e.session.context)
      fail("{}:{}: the prompt has {} tokens {}", a.dataset, item.line, ids.size(), context_advice(m, e.session.context));
    batch.start_at(slot, ids, params, /*reuse_prefix=*/line.generation > 0 && !a.no_kv_reuse);
  };
  // Takes the generations that `ended` and fills free slots until every slot runs or the lines
  // are all done (a generation may end as it starts: collect() hands those on).
  auto settle = [&](std::vector<uint32_t> ended) {
    for (bool changed = true; changed; ended = batch.collect()) {
      changed = false;
      std::vector<bool> is_ended(e.batch, false);
      for (uint32_t slot : ended) is_ended[slot] = true;
      for (uint32_t slot = 0; slot < e.batch; ++slot) {
        if (is_ended[slot]) {
          LineInFlight& line = *lines[slot];
          add_generation(e, line.record, batch.take(slot), line.conversation);
          if (++line.generation < line.generations) {
            start_generation(slot);
          } else {
            on_done(line.record);
            done.emplace(line.index, std::move(line.record));
            lines[slot].reset();
          }
          changed = true;
        }
        if (!lines[slot] && next < pending.size()) {
          const size_t i = pending[next++];
          const loader::DatasetItem& item = e.data.items[i];
          if (!item.images.empty())
            fail("{}:{}: a line with images needs --batch 1", a.dataset, item.line);
          LineInFlight& line = lines[slot].emplace();
          line.index = i;
          line.record = new_record(e, i, false);
          line.generations = line.record.turns ? item.turns.size() : 1;
          start_generation(slot);
          changed = true;
        }
      }
    }
  };
  settle({});
  while (batch.running()) settle(batch.step());
  std::vector<PromptResult> records;
  for (size_t i : pending) records.push_back(std::move(done.at(i)));
  return records;
}

}  // namespace

EvalPass evaluate(const EvalSetup& e, api::Session* plain, ResumeFile* resume) {
  std::vector<size_t> mine;
  for (size_t i = 0; i < e.count; ++i)
    if (in_shard(e.shard, i)) mine.push_back(i);
  Progress progress{mine.size()};
  if (resume) {
    for (const auto& [index, record] : resume->done())
      if (index >= e.count || !in_shard(e.shard, index))
        fail("--resume holds prompt {}, which is not among this run's {} prompts of shard {}/{}", index, e.count,
             e.shard.index, e.shard.count);
    progress.resumed = resume->done().size();
    if (progress.resumed)
      fmt::print(stderr, "eaglevk: --resume: {} of {} prompts already done\n", progress.resumed, mine.size());
  }
  std::vector<size_t> pending;
  for (size_t i : mine)
    if (!resume || !resume->done().count(i)) pending.push_back(i);
  size_t finished = progress.resumed;
  auto on_done = [&](const PromptResult& r) {
    if (resume) resume->append(r);
    progress.update(++finished, r);
  };

  std::vector<PromptResult> fresh;
  if (e.batch > 1) {
    fresh = evaluate_batched(e, pending, on_done);
  } else {
    api::Session spec(e.model, e.session);
    for (size_t i : pending) {
      fresh.push_back(evaluate_item(e, spec, plain, i));
      on_done(fresh.back());
    }
  }

  EvalPass pass;
  size_t next_fresh = 0;
  for (size_t i : mine) {
    const bool resumed = resume && resume->done().count(i);
    PromptResult r = resumed ? resume->done().at(i) : std::move(fresh[next_fresh++]);
    pass.total.merge(r.stats);
    pass.spec_seconds += r.seconds;
    pass.spec_tokens += r.output_tokens;
    for (const auto& t : r.tokens) pass.outputs.push_back(t);
    pass.results.push_back(std::move(r));
  }
  return pass;
}

}  // namespace eaglevk::cli
