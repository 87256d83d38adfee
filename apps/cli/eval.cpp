// `eaglevk eval`: speculative decoding over a JSONL dataset, for people who measure drafters.
// Prints the vLLM acceptance block over the dataset and a table per category; --json writes
// the configuration, totals, categories and per-prompt records (eval_report.h); --baseline
// also decodes plainly and reports the speed-up (and at temperature 0 whether every output
// matched); --shard evaluates every N-th prompt (eval_shard.h) and `eaglevk eval-merge`
// combines the shards; --resume keeps going after a kill (eval_resume.h); multi-turn lines
// keep the KV caches from turn to turn; --aux-shift-sweep repeats the evaluation with the
// draft's tap ids shifted by -1 and +1 to tell which layer convention the head was trained
// with.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <eaglevk/error.h>

#include "apps/cli/aux_sweep.h"
#include "apps/cli/commands.h"
#include "apps/cli/eval_report.h"
#include "apps/cli/eval_resume.h"
#include "apps/cli/eval_shard.h"
#include "apps/cli/load_progress.h"
#include "apps/cli/model_files.h"
#include "apps/cli/spec_flags.h"
#include "apps/cli/usage.h"
#include "loader/dataset.h"
#include "runtime/engine/elapsed.h"
#include "runtime/engine/generate.h"
#include "runtime/engine/speculative.h"
#include "runtime/engine/speculative_batch.h"
#include "runtime/engine/stop_text.h"
#include "runtime/vk/profile.h"

namespace eaglevk::cli {
namespace {

struct EvalArgs {
  std::string model, draft, dataset, json_out, device, aux_layers, shard, resume;
  std::vector<std::string> stop;
  SpecFlags spec;
  uint32_t n_predict = 128, limit = 0, ctx = 2048, shard_count = 0, logprobs = 0, batch = 0;
  bool chat = false, baseline = false, strict = false, draft_sampling = false, greedy_drafts = false,
       aux_sweep = false, no_kv_reuse = false;
  float temp = 0;
  uint64_t seed = 0;
  CLI::Option* seed_option = nullptr;
};

using PromptResult = EvalRecord;

// Shows progress on a terminal as one rewritten line; elsewhere as plain lines.
struct Progress {
  size_t total;
  bool tty = isatty(STDERR_FILENO);
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  size_t tokens = 0;

  size_t resumed = 0;  // prompts taken from a resume file: not in the rate or the ETA

  void update(size_t done, const PromptResult& last) {
    tokens += last.output_tokens;
    double elapsed = engine::seconds_since(start);
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

// One pass over the dataset (this shard of it) with one draft.
struct EvalPass {
  std::vector<PromptResult> results;
  std::vector<std::vector<int32_t>> outputs;  // every generation's tokens, in order
  engine::SpecStats total;
  double spec_seconds = 0;
  size_t spec_tokens = 0;
};

// What every pass shares: the dataset, the target and the generation settings.
struct EvalSetup {
  const EvalArgs& args;
  const loader::Dataset& data;
  size_t count = 0;
  ops::Gpu& gpu;
  const LoadedModel& m;
  uint32_t context = 0;
  engine::GenerationOptions options;
  engine::TreeParams tree;  // enabled: tree drafting instead of -k
  std::optional<engine::ImageSupport> images;  // set when a line has images and the model takes them
  EvalShard shard;
  bool draft_sampling = false;  // the scheme at temperature > 0 (chain only)
  uint32_t batch = 1;           // sequences decoded together (chain drafting, text lines)
};

// A line's images: their placeholders expanded and their features computed.
engine::ImagePrompt item_image_prompt(const EvalSetup& e, const loader::DatasetItem& item, std::vector<int32_t> ids) {
  std::vector<loader::RgbImage> images;
  for (const std::filesystem::path& path : item.images) images.push_back(loader::load_image(path));
  try {
    return engine::build_image_prompt(e.gpu, *e.images, ids, images);
  } catch (const Error& err) {
    fail("{}:{}: {}", e.args.dataset, item.line, err.what());
  }
}

// The prompt of generation `g` of an item; `conversation` carries a multi-turn item's turns
// and answers so far.
std::vector<int32_t> item_prompt_ids(const EvalArgs& a, const LoadedModel& m, const loader::DatasetItem& item,
                                     size_t g, std::vector<loader::ChatMessage>& conversation) {
  auto chat_ids = [&](const std::vector<loader::ChatMessage>& messages) {
    if (!m.chat) fail("{}:{}: this line needs the chat template: {}", a.dataset, item.line, m.chat_error);
    return m.tokenizer.encode(m.chat->render(messages, true), false);
  };
  switch (item.kind) {
    case loader::DatasetItem::Kind::Prompt:
      return a.chat ? chat_ids({{"user", item.prompt}}) : m.tokenizer.encode(item.prompt, true);
    case loader::DatasetItem::Kind::Messages: return chat_ids(item.messages);
    case loader::DatasetItem::Kind::Turns:
      if (g == 0 && !item.system.empty()) conversation.push_back({"system", item.system});
      conversation.push_back({"user", item.turns[g]});
      return chat_ids(conversation);
  }
  return {};
}

// A token callback that ends generation at the first --stop string (none: no callback, so
// nothing is decoded).
struct StopWatch {
  const loader::Tokenizer& tokenizer;
  const std::vector<std::string>& stops;
  std::optional<engine::GeneratedText> text;

  engine::TokenCallback callback() {
    if (stops.empty()) return {};
    text.emplace(tokenizer, stops);
    return [this](int32_t id) {
      text->push(id);
      return !text->stopped();
    };
  }
  bool stopped() const { return text && text->stopped(); }
};

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
void add_generation(const EvalSetup& e, PromptResult& r, engine::GenerationResult out, const engine::SpecStats& stats,
                    bool stopped_by_text, std::vector<loader::ChatMessage>& conversation) {
  r.stats.merge(stats);
  r.output_tokens += out.tokens.size();
  r.prompt_tokens += out.prompt.size();
  r.reused_tokens += out.reused_tokens;
  r.seconds += out.prefill_seconds + out.decode_seconds;
  r.stop_reasons.push_back(engine::stop_reason(out, stopped_by_text));
  if (e.options.logprobs) {
    if (r.logprobs.is_null()) r.logprobs = nlohmann::json::array();
    r.logprobs.push_back(logprobs_json(out.logprobs));
  }
  if (r.turns) conversation.push_back({"assistant", e.m.tokenizer.decode(out.tokens, /*skip_special=*/true)});
  r.tokens.push_back(std::move(out.tokens));
}

// Evaluates one dataset line: each of its generations, speculative and (with a plain runner)
// plain. A multi-turn line asks each turn after the model's own answer to the one before, in
// one conversation whose KV caches are kept from turn to turn.
PromptResult evaluate_item(const EvalSetup& e, engine::SpeculativeDecoder& spec, engine::TargetRunner* plain, size_t i) {
  const EvalArgs& a = e.args;
  const LoadedModel& m = e.m;
  const loader::DatasetItem& item = e.data.items[i];
  PromptResult r = new_record(e, i, plain != nullptr);
  std::vector<loader::ChatMessage> conversation;
  const size_t generations = r.turns ? item.turns.size() : 1;
  for (size_t g = 0; g < generations; ++g) {
    std::vector<int32_t> ids = item_prompt_ids(a, m, item, g, conversation);
    engine::GenerationOptions options = e.options;
    // A line's first generation starts a new sequence, so its result does not depend on the
    // line before it (nor on the shard it runs in).
    options.reuse_prefix = g > 0 && !a.no_kv_reuse;
    engine::ImagePrompt image_prompt;
    if (!item.images.empty()) {
      image_prompt = item_image_prompt(e, item, std::move(ids));
      ids = image_prompt.ids;
      options.images = &image_prompt.images;
    }
    if (ids.size() >= e.context)
      fail("{}:{}: the prompt has {} tokens but the context holds {} (raise --ctx)", a.dataset, item.line, ids.size(),
           e.context);
    engine::SpecStats stats;
    StopWatch watch{m.tokenizer, a.stop};
    auto out = spec.generate(ids, options, stats, watch.callback());
    if (plain) {
      StopWatch plain_watch{m.tokenizer, a.stop};
      auto base = engine::generate(*plain, ids, options, plain_watch.callback());
      r.baseline_seconds += base.prefill_seconds + base.decode_seconds;
      r.baseline_tokens += base.tokens.size();
      r.matches_baseline = r.matches_baseline && base.tokens == out.tokens;
    }
    add_generation(e, r, std::move(out), stats, watch.stopped(), conversation);
  }
  return r;
}

// A line in flight in one slot of the batched decoder: its record, its turn and conversation.
struct LineInFlight {
  size_t index = 0;
  size_t generation = 0, generations = 1;
  PromptResult record;
  std::vector<loader::ChatMessage> conversation;
  std::unique_ptr<StopWatch> watch;
};

// The lines of `mine` not yet done, B at a time (continuous batching): when a line's last
// generation ends, the next line takes its slot; a multi-turn line asks each turn in the same
// slot, continuing from its caches. Records come back in `mine`'s order.
std::vector<PromptResult> evaluate_batched(const EvalSetup& e, const models::Eagle3Model& draft,
                                           const std::vector<size_t>& todo,
                                           const std::function<void(const PromptResult&)>& on_done) {
  const EvalArgs& a = e.args;
  engine::BatchDecoder batch(e.gpu, e.m.model, draft, e.context, a.spec.k, e.batch);
  batch.set_draft_sampling(e.draft_sampling);
  std::vector<std::optional<LineInFlight>> lines(e.batch);
  std::map<size_t, PromptResult> done;
  size_t next = 0;
  auto start_generation = [&](uint32_t slot) {
    LineInFlight& line = *lines[slot];
    const loader::DatasetItem& item = e.data.items[line.index];
    std::vector<int32_t> ids = item_prompt_ids(a, e.m, item, line.generation, line.conversation);
    if (ids.size() >= e.context)
      fail("{}:{}: the prompt has {} tokens but the context holds {} (raise --ctx)", a.dataset, item.line, ids.size(),
           e.context);
    engine::GenerationOptions options = e.options;
    options.reuse_prefix = line.generation > 0 && !a.no_kv_reuse;
    line.watch = std::make_unique<StopWatch>(StopWatch{e.m.tokenizer, a.stop, std::nullopt});
    batch.start(slot, std::move(ids), options, line.watch->callback());
  };
  // Fills free slots and collects finished generations until every slot runs or the lines
  // are all done (a generation may end as it starts).
  auto settle = [&] {
    for (bool changed = true; changed;) {
      changed = false;
      for (uint32_t slot = 0; slot < e.batch; ++slot) {
        if (batch.finished(slot)) {
          LineInFlight& line = *lines[slot];
          engine::SpecStats stats;
          engine::GenerationResult out = batch.take(slot, stats);
          add_generation(e, line.record, std::move(out), stats, line.watch->stopped(), line.conversation);
          if (++line.generation < line.generations) {
            start_generation(slot);
          } else {
            on_done(line.record);
            done.emplace(line.index, std::move(line.record));
            lines[slot].reset();
          }
          changed = true;
        }
        if (!lines[slot] && next < todo.size()) {
          const size_t i = todo[next++];
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
  settle();
  while (batch.any_running()) {
    batch.round();
    settle();
  }
  std::vector<PromptResult> records;
  for (size_t i : todo) records.push_back(std::move(done.at(i)));
  return records;
}

EvalPass evaluate(const EvalSetup& e, const models::Eagle3Model& draft, engine::TargetRunner* plain,
                  ResumeFile* resume) {
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
  std::vector<size_t> todo;
  for (size_t i : mine)
    if (!resume || !resume->done().count(i)) todo.push_back(i);
  size_t finished = progress.resumed;
  auto on_done = [&](const PromptResult& r) {
    if (resume) resume->append(r);
    progress.update(++finished, r);
  };

  std::vector<PromptResult> fresh;
  if (e.batch > 1) {
    fresh = evaluate_batched(e, draft, todo, on_done);
  } else {
    engine::SpeculativeDecoder spec =
        e.tree.enabled() ? engine::SpeculativeDecoder(e.gpu, e.m.model, draft, e.context, e.tree)
                         : engine::SpeculativeDecoder(e.gpu, e.m.model, draft, e.context, e.args.spec.k);
    spec.set_draft_sampling(e.draft_sampling);
    for (size_t i : todo) {
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

// --aux-shift-sweep: the configured ids first (that pass also gives the usual report), then
// the same loaded head tapping one layer shallower and one deeper (the taps are only which
// hidden states the decoder copies out; the weights do not change). The ids are restored.
std::vector<AuxSweepRow> aux_sweep(const EvalSetup& e, models::Eagle3Model& draft, const EvalPass& first,
                                   bool& outputs_agree) {
  const std::vector<uint32_t> base = draft.aux_layers;
  const uint32_t layers = uint32_t(e.m.model.config().num_hidden_layers);
  std::vector<AuxSweepRow> rows;
  outputs_agree = true;
  for (int shift : kAuxShifts) {
    AuxSweepRow row;
    row.shift = shift;
    if (shift == 0) {
      row.ids = base;
      row.stats = first.total;
      row.output_tokens = first.spec_tokens;
      row.seconds = first.spec_seconds;
      rows.push_back(row);
      continue;
    }
    std::optional<std::vector<uint32_t>> ids = shift_aux_layers(base, shift, layers, row.skipped);
    if (!ids) {
      fmt::print(stderr, "eaglevk: aux shift {:+d} skipped: {}\n", shift, row.skipped);
      rows.push_back(row);
      continue;
    }
    row.ids = *ids;
    fmt::print(stderr, "eaglevk: aux shift {:+d}: draft taps layers {}\n", shift, format_ids(row.ids));
    draft.aux_layers = row.ids;  // in range (shift_aux_layers) and still sorted and distinct
    EvalPass pass = evaluate(e, draft, nullptr, nullptr);
    draft.aux_layers = base;
    row.stats = pass.total;
    row.output_tokens = pass.spec_tokens;
    row.seconds = pass.spec_seconds;
    outputs_agree = outputs_agree && pass.outputs == first.outputs;
    rows.push_back(row);
  }
  return rows;
}

// The settings that decide the outputs: a resume file and the shards of a merge must agree on
// every one. (The device and the shard are recorded beside them.)
nlohmann::json eval_config(const EvalArgs& a, const std::filesystem::path& dir, const engine::TreeParams& tree,
                           const std::vector<uint32_t>& aux, uint64_t seed, bool draft_sampling, size_t count) {
  nlohmann::json c;
  c["dataset"] = a.dataset;
  c["model"] = dir.string();
  c["draft"] = a.draft;
  if (tree.enabled())
    c["tree"] = {{"spec_steps", tree.steps}, {"spec_topk", tree.topk}, {"spec_draft_tokens", tree.draft_tokens}};
  else
    c["k"] = a.spec.k;
  c["aux_layers"] = aux;
  c["temperature"] = a.temp;
  c["seed"] = seed;
  c["draft_sampling"] = draft_sampling;
  c["n_predict"] = a.n_predict;
  c["prompts"] = count;
  c["chat"] = a.chat;
  c["ctx"] = a.ctx;
  c["stop"] = a.stop;
  c["kv_reuse"] = !a.no_kv_reuse;
  c["baseline"] = a.baseline;
  c["logprobs"] = a.logprobs;
  return c;
}

// FNV-1a of the dataset file: a resume file or a shard from another version of the dataset
// is refused even when the path is the same.
std::string dataset_digest(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  uint64_t h = 1469598103934665603ull;
  char buf[65536];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    for (std::streamsize i = 0; i < in.gcount(); ++i) h = (h ^ uint8_t(buf[i])) * 1099511628211ull;
  }
  return fmt::format("{:016x}", h);
}

// --seed, else the seed of the run being resumed, else a random one (printed so that the run
// can be repeated). Greedy decoding draws nothing: its seed is 0, so that shards and resumed
// runs agree without one.
uint64_t choose_seed(const EvalArgs& a, const EvalShard& shard) {
  if (a.seed_option->count()) return a.seed;
  if (a.temp == 0) return 0;
  if (!a.resume.empty()) {
    const std::optional<nlohmann::json> stored = ResumeFile::stored_config(a.resume);
    if (stored && stored->contains("seed") && (*stored)["seed"].is_number_unsigned()) return (*stored)["seed"].get<uint64_t>();
  }
  if (shard.count > 1) usage_fail("--shard at temperature > 0 needs --seed: every shard must draw with the same seed");
  return announced_random_seed();
}

// --batch, or when not given the most sequences worth decoding together: kDefaultEvalBatch
// for chain drafting over text lines, one otherwise (trees, images and --baseline, whose
// speed-up compares one prompt at a time, run one line after another).
constexpr uint32_t kDefaultEvalBatch = 4;
uint32_t eval_batch(const EvalArgs& a, const engine::TreeParams& tree, bool has_images) {
  if (a.batch == 0) return tree.enabled() || has_images || a.baseline ? 1 : kDefaultEvalBatch;
  if (a.batch > 1) {
    if (tree.enabled()) usage_fail("--batch {} is for chain drafting (-k); tree drafting runs --batch 1", a.batch);
    if (has_images) usage_fail("--batch {}: {} has lines with images, which run --batch 1", a.batch, a.dataset);
    if (a.baseline) usage_fail("--baseline compares one prompt at a time: it runs --batch 1");
  }
  return a.batch;
}

int eval_command(const EvalArgs& a) {
  if (a.aux_sweep && a.draft.empty())
    usage_fail("--aux-shift-sweep needs a draft (-d): it evaluates the draft's tap layers shifted by -1, 0 and +1");
  if (!a.aux_layers.empty() && a.draft.empty()) usage_fail("--aux-layers needs a draft (-d)");
  if (a.draft.empty()) usage_fail("eval needs a draft (-d)");
  if (a.aux_sweep && !a.resume.empty()) usage_fail("--resume does not go with --aux-shift-sweep");
  if (a.draft_sampling && a.greedy_drafts) usage_fail("--draft-sampling and --greedy-drafts choose opposite schemes");
  as_usage_error([&] { engine::check_sampling({a.temp, 0, 1.0f, a.seed}); });
  as_usage_error([&] { engine::StopText check(a.stop); });
  if (a.logprobs > engine::kMaxLogprobs) usage_fail("--logprobs is at most {}, got {}", engine::kMaxLogprobs, a.logprobs);
  if (a.batch > engine::kMaxBatch) usage_fail("--batch is at most {}, got {}", engine::kMaxBatch, a.batch);
  const EvalShard shard = resolve_shard(a.shard, a.shard_count);
  engine::TreeParams tree;
  if (a.spec.tree()) {
    tree = a.spec.tree_params();
    if (a.draft_sampling)
      usage_fail("--draft-sampling is for chain drafting (-k): a tree's children are the draft's top-K tokens");
  } else {
    a.spec.check_chain();
  }
  // At T > 0 chain drafts are drawn from the draft's distribution unless --greedy-drafts: it
  // accepts more than proposing the draft's argmax (both keep the target's distribution).
  const bool draft_sampling = !tree.enabled() && a.temp > 0 && !a.greedy_drafts;
  const auto wall_start = std::chrono::steady_clock::now();
  loader::Dataset data = loader::load_dataset(a.dataset, a.strict);
  for (const auto& p : data.problems) fmt::print(stderr, "eaglevk: {}:{}: skipped: {}\n", a.dataset, p.line, p.message);
  size_t count = a.limit ? std::min<size_t>(a.limit, data.items.size()) : data.items.size();
  if (shard.count > 1)
    fmt::print(stderr, "eaglevk: shard {}/{}: {} of {} prompts\n", shard.index, shard.count,
               count > shard.index ? (count - shard.index + shard.count - 1) / shard.count : 0, count);

  const bool has_images =
      std::any_of(data.items.begin(), data.items.begin() + count, [](const auto& item) { return !item.images.empty(); });
  const uint32_t batch = eval_batch(a, tree, has_images);

  std::filesystem::path dir = a.model.empty() ? bundled_model_dir() : std::filesystem::path(a.model);
  std::vector<uint32_t> aux;
  if (!a.aux_layers.empty())
    for (int32_t id : parse_id_list(a.aux_layers, "--aux-layers")) aux.push_back(uint32_t(id));
  const uint64_t seed = choose_seed(a, shard);
  nlohmann::json config = eval_config(a, dir, tree, aux, seed, draft_sampling, count);
  config["dataset_fnv1a"] = dataset_digest(a.dataset);
  // Opened before loading: a file from another configuration is refused at once. (With
  // --spec-draft-tokens auto the tree's size is decided later; the configuration names auto.)
  std::unique_ptr<ResumeFile> resume;
  if (!a.resume.empty()) resume = std::make_unique<ResumeFile>(a.resume, config, shard);

  auto gpu = open_gpu(a.device);
  const ContextPlan plan = plan_context(gpu->ctx, dir, a.draft, engine::kPrefillRows, a.ctx);
  const uint32_t context = plan.context;
  auto progress = std::make_unique<LoadProgress>(gpu->ctx, plan.weight_bytes);
  LoadedModel m = load_model(gpu->ctx, dir);
  models::Eagle3Model draft = models::load_eagle3(gpu->ctx, a.draft, m.model.config(), aux);
  progress.reset();
  const std::vector<uint32_t> configured = draft.aux_layers;
  std::unique_ptr<engine::TargetRunner> plain;
  if (a.baseline) plain = std::make_unique<engine::TargetRunner>(*gpu, m.model, context, engine::kPrefillRows);

  if (tree.enabled() && a.spec.auto_tokens()) {
    // Calibrated on the first prompts of the dataset (their first turn).
    std::vector<std::vector<int32_t>> prompts;
    for (size_t i = 0; i < std::min<size_t>(count, 4); ++i) {
      std::vector<loader::ChatMessage> conversation;
      prompts.push_back(item_prompt_ids(a, m, data.items[i], 0, conversation));
    }
    tree = resolve_tree(tree, *gpu, m.model, dir, draft, a.draft, prompts);
  }
  EvalSetup setup{a, data, count, *gpu, m, context, {}, tree, std::nullopt, shard, draft_sampling};
  if (has_images) {
    std::string why;
    setup.images = engine::image_support(m.model, dir, m.tokenizer, &why);
    if (!setup.images) fail("{} has lines with images, but {}", a.dataset, why);
  }
  setup.batch = batch;
  engine::GenerationOptions& o = setup.options;
  o.n_predict = a.n_predict;
  o.eos_ids = engine::merge_eos_ids(m.model.config().eos_token_ids, m.tokenizer.eos_ids());
  o.sampling = {a.temp, 0, 1.0f, seed};
  o.logprobs = a.logprobs;

  if (a.aux_sweep) fmt::print(stderr, "eaglevk: aux shift +0: draft taps layers {}\n", format_ids(configured));
  const EvalPass p = evaluate(setup, draft, plain.get(), resume.get());
  std::vector<AuxSweepRow> sweep;
  bool sweep_outputs_agree = true;
  if (a.aux_sweep) {
    sweep = aux_sweep(setup, draft, p, sweep_outputs_agree);
    fmt::print("{}", aux_sweep_report(sweep, configured, uint32_t(m.model.config().num_hidden_layers)));
    // Greedy speculative decoding is lossless whatever the taps, so only acceptance may differ.
    if (a.temp == 0)
      fmt::print("greedy outputs identical in every row: {}\n", sweep_outputs_agree ? "yes" : "NO (a bug: please report)");
    fmt::print("\nthe configured ids (shift +0) in detail:\n");
  }

  EvalReport report;
  report.config = config;
  if (tree.enabled()) report.config["tree"]["spec_draft_tokens"] = tree.draft_tokens;  // auto's choice
  report.shards = {shard};
  report.device = gpu->ctx.info.name;
  report.dataset_prompts = count;
  report.skipped_lines = data.problems.size();
  report.records = p.results;
  report.wall_seconds = engine::seconds_since(wall_start);
  report.batch = batch;
  fmt::print("{}", report_text(report, plain != nullptr, a.temp));
  if (!a.json_out.empty()) {
    nlohmann::json j = report_to_json(report, plain != nullptr);
    if (!sweep.empty()) j["aux_shift_sweep"] = aux_sweep_json(sweep);
    std::ofstream out(a.json_out);
    if (!out) fail("cannot write '{}'", a.json_out);
    out << j.dump(2) << "\n";
  }
  // EAGLEVK_PROFILE=1: GPU time per command family per generated token (eval's submissions,
  // prefills included), and the host's recording and waiting time.
  if (const std::string profile = vk::profile_report(p.spec_tokens); !profile.empty()) fmt::print(stderr, "{}", profile);
  // At temperature 0 speculative output must equal plain output; at T > 0 both are samples.
  const EvalTotals totals = totals_of(p.results);
  if (plain && a.temp == 0 && totals.matched != totals.prompts) return 2;
  return a.temp == 0 && !sweep_outputs_agree ? 2 : 0;
}

}  // namespace

void add_eval_command(CLI::App& app) {
  auto args = std::make_shared<EvalArgs>();
  CLI::App* sub = app.add_subcommand("eval", "Measure a drafter's acceptance over a JSONL dataset");
  sub->footer(
      "--aux-shift-sweep runs the whole evaluation three times, with the draft's tap layer ids (from its config or\n"
      "--aux-layers) shifted by -1, 0 and +1, and prints a table of acceptance per shift, the best shift and the\n"
      "--aux-layers to pass. Engines disagree whether tap id i means the residual stream entering layer i (vLLM,\n"
      "llama.cpp, eaglevk) or the output of layer i (SGLang for ModelOpt heads); the head accepts most under the\n"
      "convention it was trained with. At --temp 0 the outputs are the same in every row.");
  sub->add_option("-m,--model", args->model, "target: model folder or GGUF file (default: the bundled tiny model)");
  sub->add_option("-d,--draft", args->draft, "EAGLE-3 draft head: folder or GGUF file (required)");
  sub->add_option("--dataset", args->dataset,
                  "JSONL: lines with prompt, turns, messages (text and image parts) or ShareGPT conversations, and an "
                  "optional category")
      ->required();
  add_spec_flags(sub, args->spec);
  sub->add_option("-n,--n-predict", args->n_predict, "new tokens per generation")->capture_default_str();
  sub->add_option("--limit", args->limit, "evaluate only the first N prompts");
  sub->add_flag("--chat", args->chat, "render `prompt` lines as a user turn with the chat template");
  sub->add_option("--temp", args->temp, "temperature (0: greedy)")->capture_default_str();
  args->seed_option =
      sub->add_option("--seed", args->seed, "random seed (default at T > 0: a random one, printed; shards need one)");
  sub->add_option("--ctx", args->ctx, "context length")->capture_default_str();
  sub->add_flag("--draft-sampling", args->draft_sampling,
                "draw chain drafts from the draft's distribution at T > 0 (the default; kept for scripts)");
  sub->add_flag("--greedy-drafts", args->greedy_drafts,
                "at T > 0, propose the draft's argmax instead (vLLM's default scheme; lower acceptance)");
  sub->add_option("--stop", args->stop, "end a generation at this text (repeatable)");
  sub->add_option("--logprobs", args->logprobs,
                  "record each generated token's log-probability and the N most likely tokens (in --json)");
  sub->add_flag("--baseline", args->baseline,
                "also decode plainly: speed-up, and at T = 0 whether every output is the same");
  sub->add_option("--shard", args->shard,
                  "evaluate prompts i, i+N, ... only: i/N, or auto (Slurm array or Kubernetes Indexed Job)");
  sub->add_option("--shard-count", args->shard_count, "with --shard auto in a Kubernetes Indexed Job: the completions");
  sub->add_option("--resume", args->resume,
                  "append each finished prompt to this JSONL file and skip the prompts already in it");
  sub->add_option("--batch", args->batch,
                  "sequences decoded together, the next line taking a finished one's place (default: 4 for chain "
                  "drafting over text lines, else 1); outputs and acceptance do not depend on it");
  sub->add_flag("--no-kv-reuse", args->no_kv_reuse, "prefill every turn of a conversation from its start");
  sub->add_flag("--strict", args->strict, "stop at the first bad line instead of skipping it");
  sub->add_option("--aux-layers", args->aux_layers, "tap layer ids a,b,c (overrides the draft config)");
  sub->add_flag("--aux-shift-sweep", args->aux_sweep,
                "evaluate with the tap ids shifted by -1, 0, +1 and report the best (see below)");
  sub->add_option("--json", args->json_out,
                  "write the configuration, totals, categories and per-prompt records to this file (with the sweep: "
                  "\"aux_shift_sweep\" rows)");
  sub->add_option("--device", args->device, "Vulkan device index or name");
  register_runner(sub, [args] { return eval_command(*args); });
}

}  // namespace eaglevk::cli
