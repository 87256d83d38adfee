// `eaglevk eval`: speculative decoding over a JSONL dataset, for people who measure drafters.
// Prints the vLLM acceptance block over the whole dataset; --json writes totals and
// per-prompt statistics; --baseline also decodes plainly and reports the speed-up and
// whether every output matched.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <eaglevk/error.h>

#include "apps/cli/commands.h"
#include "apps/cli/model_files.h"
#include "runtime/engine/dataset.h"
#include "runtime/engine/generate.h"
#include "runtime/engine/speculative.h"

namespace eaglevk::cli {
namespace {

struct EvalArgs {
  std::string model, draft, dataset, json_out, device;
  uint32_t k = 3, n_predict = 128, limit = 0, ctx = 2048;
  bool chat = false, baseline = false, strict = false, draft_sampling = false;
  float temp = 0;
  uint64_t seed = 0;
};

struct PromptResult {
  size_t index = 0, line = 0;
  size_t output_tokens = 0;
  engine::SpecStats stats;
  double seconds = 0, baseline_seconds = 0;
  bool matches_baseline = true;
};

// Shows progress on a terminal as one rewritten line; elsewhere as plain lines.
struct Progress {
  size_t total;
  bool tty = isatty(STDERR_FILENO);
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  size_t tokens = 0;

  void update(size_t done, const PromptResult& last) {
    tokens += last.output_tokens;
    double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    double eta = done ? elapsed / done * (total - done) : 0;
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

int eval_command(const EvalArgs& a) {
  if (a.draft.empty()) fail("eval needs a draft (-d)");
  engine::Dataset data = engine::load_dataset(a.dataset, a.strict);
  for (const auto& p : data.problems) fmt::print(stderr, "eaglevk: {}:{}: skipped: {}\n", a.dataset, p.line, p.message);
  size_t count = a.limit ? std::min<size_t>(a.limit, data.items.size()) : data.items.size();

  std::filesystem::path dir = a.model.empty() ? bundled_model_dir() : std::filesystem::path(a.model);
  auto gpu = open_gpu(a.device);
  LoadedModel m = load_model(gpu->ctx, dir);
  models::Eagle3Model draft = models::load_eagle3(gpu->ctx, a.draft, m.model.config());
  uint32_t context = std::min<uint32_t>(a.ctx, uint32_t(m.model.config().max_position_embeddings));
  engine::SpeculativeDecoder spec(*gpu, m.model, draft, context, a.k);
  spec.set_draft_sampling(a.draft_sampling);
  std::unique_ptr<engine::TargetRunner> plain;
  if (a.baseline) plain = std::make_unique<engine::TargetRunner>(*gpu, m.model, context, 128);

  engine::GenerationOptions o;
  o.n_predict = a.n_predict;
  o.eos_ids = m.model.config().eos_token_ids;
  for (int32_t id : m.tokenizer.eos_ids())
    if (std::find(o.eos_ids.begin(), o.eos_ids.end(), id) == o.eos_ids.end()) o.eos_ids.push_back(id);
  o.sampling = {a.temp, 0, 1.0f, a.seed};

  auto chat_ids = [&](const std::vector<loader::ChatMessage>& messages, size_t line) {
    if (!m.chat) fail("{}:{}: the model has no chat template for this line", a.dataset, line);
    return m.tokenizer.encode(m.chat->render(messages, true), false);
  };

  std::vector<PromptResult> results;
  Progress progress{count};
  engine::SpecStats total;
  double spec_seconds = 0, plain_seconds = 0;
  size_t spec_tokens = 0, matched = 0;
  for (size_t i = 0; i < count; ++i) {
    const engine::DatasetItem& item = data.items[i];
    PromptResult r;
    r.index = i;
    r.line = item.line;
    // One generation per prompt; MT-bench turns are several, each asked after the model's
    // own answer to the one before, in one conversation.
    std::vector<std::vector<int32_t>> prompts;
    std::vector<loader::ChatMessage> conversation;
    size_t generations = item.kind == engine::DatasetItem::Kind::Turns ? item.turns.size() : 1;
    for (size_t g = 0; g < generations; ++g) {
      std::vector<int32_t> ids;
      switch (item.kind) {
        case engine::DatasetItem::Kind::Prompt:
          ids = a.chat ? chat_ids({{"user", item.prompt}}, item.line) : m.tokenizer.encode(item.prompt, true);
          break;
        case engine::DatasetItem::Kind::Messages: ids = chat_ids(item.messages, item.line); break;
        case engine::DatasetItem::Kind::Turns:
          conversation.push_back({"user", item.turns[g]});
          ids = chat_ids(conversation, item.line);
          break;
      }
      if (ids.size() >= context)
        fail("{}:{}: the prompt has {} tokens but the context holds {} (raise --ctx)", a.dataset, item.line, ids.size(),
             context);
      engine::SpecStats stats;
      auto out = spec.generate(ids, o, stats);
      r.stats.merge(stats);
      r.output_tokens += out.tokens.size();
      r.seconds += out.prefill_seconds + out.decode_seconds;
      if (plain) {
        auto base = engine::generate(*plain, ids, o);
        r.baseline_seconds += base.prefill_seconds + base.decode_seconds;
        r.matches_baseline = r.matches_baseline && base.tokens == out.tokens;
      }
      if (item.kind == engine::DatasetItem::Kind::Turns)
        conversation.push_back({"assistant", m.tokenizer.decode(out.tokens, /*skip_special=*/true)});
    }
    total.merge(r.stats);
    spec_seconds += r.seconds;
    plain_seconds += r.baseline_seconds;
    spec_tokens += r.output_tokens;
    matched += r.matches_baseline;
    results.push_back(r);
    progress.update(i + 1, r);
  }

  fmt::print("{}", total.block());
  if (plain)
    fmt::print("baseline: {:.1f} tokens/s plain, {:.1f} tokens/s speculative, speed-up {:.2f}x; outputs match: {}/{}\n",
               spec_tokens / plain_seconds, spec_tokens / spec_seconds, plain_seconds / spec_seconds, matched, count);
  if (!a.json_out.empty()) {
    nlohmann::json j;
    j["dataset"] = a.dataset;
    j["model"] = dir.string();
    j["draft"] = a.draft;
    j["k"] = a.k;
    j["prompts"] = count;
    j["skipped_lines"] = data.problems.size();
    j["totals"] = {{"output_tokens", spec_tokens},
                   {"num_drafts", total.num_drafts},
                   {"num_draft_tokens", total.num_draft_tokens},
                   {"num_accepted_tokens", total.num_accepted_tokens},
                   {"mean_acceptance_length", total.mean_acceptance_length()},
                   {"acceptance_per_position", total.acceptance_per_position()},
                   {"seconds", spec_seconds}};
    if (plain) {
      j["baseline"] = {{"seconds", plain_seconds}, {"speedup", plain_seconds / spec_seconds},
                       {"all_outputs_match", matched == count}, {"matching_prompts", matched}};
    }
    nlohmann::json per = nlohmann::json::array();
    for (const PromptResult& r : results) {
      nlohmann::json e = {{"index", r.index},
                          {"line", r.line},
                          {"output_tokens", r.output_tokens},
                          {"num_drafts", r.stats.num_drafts},
                          {"num_draft_tokens", r.stats.num_draft_tokens},
                          {"num_accepted_tokens", r.stats.num_accepted_tokens},
                          {"acceptance_length", r.stats.mean_acceptance_length()},
                          {"seconds", r.seconds}};
      if (plain) {
        e["baseline_seconds"] = r.baseline_seconds;
        e["matches_baseline"] = r.matches_baseline;
      }
      per.push_back(e);
    }
    j["per_prompt"] = per;
    std::ofstream out(a.json_out);
    if (!out) fail("cannot write '{}'", a.json_out);
    out << j.dump(2) << "\n";
  }
  return plain && matched != count ? 2 : 0;
}

}  // namespace

void add_eval_command(CLI::App& app) {
  auto args = std::make_shared<EvalArgs>();
  CLI::App* sub = app.add_subcommand("eval", "Measure a drafter's acceptance over a JSONL dataset");
  sub->add_option("-m,--model", args->model, "target model folder (default: the bundled tiny model)");
  sub->add_option("-d,--draft", args->draft, "EAGLE-3 draft head folder")->required();
  sub->add_option("--dataset", args->dataset, "JSONL: lines with prompt, turns or messages")->required();
  sub->add_option("-k,--num-spec-tokens", args->k, "draft tokens per round")->capture_default_str();
  sub->add_option("-n,--n-predict", args->n_predict, "new tokens per generation")->capture_default_str();
  sub->add_option("--limit", args->limit, "evaluate only the first N prompts");
  sub->add_flag("--chat", args->chat, "render `prompt` lines as a user turn with the chat template");
  sub->add_option("--temp", args->temp, "temperature (0: greedy)")->capture_default_str();
  sub->add_option("--seed", args->seed, "random seed")->capture_default_str();
  sub->add_option("--ctx", args->ctx, "context length")->capture_default_str();
  sub->add_flag("--draft-sampling", args->draft_sampling, "draw drafts from the draft's distribution (T > 0)");
  sub->add_flag("--baseline", args->baseline, "also decode plainly: speed-up and output equality");
  sub->add_flag("--strict", args->strict, "stop at the first bad line instead of skipping it");
  sub->add_option("--json", args->json_out, "write totals and per-prompt statistics to this file");
  sub->add_option("--device", args->device, "Vulkan device index or name");
  register_runner(sub, [args] { return eval_command(*args); });
}

}  // namespace eaglevk::cli
