// `eaglevk eval`: speculative decoding over a JSONL dataset, for people who measure drafters.
// Prints the vLLM acceptance block over the whole dataset; --json writes totals and
// per-prompt statistics; --baseline also decodes plainly and reports the speed-up and
// whether every output matched; --aux-shift-sweep repeats the evaluation with the draft's tap
// ids shifted by -1 and +1 to tell which layer convention the head was trained with.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <eaglevk/error.h>

#include "apps/cli/aux_sweep.h"
#include "apps/cli/commands.h"
#include "apps/cli/load_progress.h"
#include "apps/cli/model_files.h"
#include "apps/cli/spec_flags.h"
#include "apps/cli/usage.h"
#include "loader/dataset.h"
#include "runtime/engine/elapsed.h"
#include "runtime/engine/generate.h"
#include "runtime/engine/speculative.h"

namespace eaglevk::cli {
namespace {

struct EvalArgs {
  std::string model, draft, dataset, json_out, device, aux_layers;
  SpecFlags spec;
  uint32_t n_predict = 128, limit = 0, ctx = 2048;
  bool chat = false, baseline = false, strict = false, draft_sampling = false, aux_sweep = false;
  float temp = 0;
  uint64_t seed = 0;
};

struct PromptResult {
  size_t index = 0, line = 0;
  size_t output_tokens = 0;
  std::vector<std::vector<int32_t>> tokens;  // each generation's ids (one per turn)
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
    double elapsed = engine::seconds_since(start);
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

// One pass over the dataset with one draft.
struct EvalPass {
  std::vector<PromptResult> results;
  std::vector<std::vector<int32_t>> outputs;  // every generation's tokens, in order
  engine::SpecStats total;
  double spec_seconds = 0, plain_seconds = 0;
  size_t spec_tokens = 0, matched = 0;
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
      conversation.push_back({"user", item.turns[g]});
      return chat_ids(conversation);
  }
  return {};
}

EvalPass evaluate(const EvalSetup& e, const models::Eagle3Model& draft, engine::TargetRunner* plain) {
  const EvalArgs& a = e.args;
  const LoadedModel& m = e.m;
  engine::SpeculativeDecoder spec = e.tree.enabled()
                                        ? engine::SpeculativeDecoder(e.gpu, m.model, draft, e.context, e.tree)
                                        : engine::SpeculativeDecoder(e.gpu, m.model, draft, e.context, a.spec.k);
  spec.set_draft_sampling(a.draft_sampling);

  EvalPass pass;
  Progress progress{e.count};
  for (size_t i = 0; i < e.count; ++i) {
    const loader::DatasetItem& item = e.data.items[i];
    PromptResult r;
    r.index = i;
    r.line = item.line;
    // One generation per prompt; MT-bench turns are several, each asked after the model's
    // own answer to the one before, in one conversation.
    std::vector<loader::ChatMessage> conversation;
    size_t generations = item.kind == loader::DatasetItem::Kind::Turns ? item.turns.size() : 1;
    for (size_t g = 0; g < generations; ++g) {
      std::vector<int32_t> ids = item_prompt_ids(a, m, item, g, conversation);
      engine::GenerationOptions options = e.options;
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
      auto out = spec.generate(ids, options, stats);
      r.stats.merge(stats);
      r.output_tokens += out.tokens.size();
      r.seconds += out.prefill_seconds + out.decode_seconds;
      if (plain) {
        auto base = engine::generate(*plain, ids, options);
        r.baseline_seconds += base.prefill_seconds + base.decode_seconds;
        r.matches_baseline = r.matches_baseline && base.tokens == out.tokens;
      }
      if (item.kind == loader::DatasetItem::Kind::Turns)
        conversation.push_back({"assistant", m.tokenizer.decode(out.tokens, /*skip_special=*/true)});
      r.tokens.push_back(out.tokens);
      pass.outputs.push_back(std::move(out.tokens));
    }
    pass.total.merge(r.stats);
    pass.spec_seconds += r.seconds;
    pass.plain_seconds += r.baseline_seconds;
    pass.spec_tokens += r.output_tokens;
    pass.matched += r.matches_baseline;
    pass.results.push_back(r);
    progress.update(i + 1, r);
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
    EvalPass pass = evaluate(e, draft, nullptr);
    draft.aux_layers = base;
    row.stats = pass.total;
    row.output_tokens = pass.spec_tokens;
    row.seconds = pass.spec_seconds;
    outputs_agree = outputs_agree && pass.outputs == first.outputs;
    rows.push_back(row);
  }
  return rows;
}

void write_json(const EvalArgs& a, const engine::TreeParams& tree, const std::filesystem::path& dir, size_t count,
                const loader::Dataset& data, const EvalPass& p, bool baseline, const std::vector<AuxSweepRow>& sweep) {
  nlohmann::json j;
  j["dataset"] = a.dataset;
  j["model"] = dir.string();
  j["draft"] = a.draft;
  if (tree.enabled())
    j["tree"] = {{"spec_steps", tree.steps}, {"spec_topk", tree.topk}, {"spec_draft_tokens", tree.draft_tokens}};
  else
    j["k"] = a.spec.k;
  j["prompts"] = count;
  j["skipped_lines"] = data.problems.size();
  j["totals"] = {{"output_tokens", p.spec_tokens},
                 {"num_drafts", p.total.num_drafts},
                 {"num_draft_tokens", p.total.num_draft_tokens},
                 {"num_accepted_tokens", p.total.num_accepted_tokens},
                 {"mean_acceptance_length", p.total.mean_acceptance_length()},
                 {"acceptance_per_position", p.total.acceptance_per_position()},
                 {"seconds", p.spec_seconds}};
  if (baseline) {
    j["baseline"] = {{"seconds", p.plain_seconds}, {"speedup", p.plain_seconds / p.spec_seconds},
                     {"all_outputs_match", p.matched == count}, {"matching_prompts", p.matched}};
  }
  nlohmann::json per = nlohmann::json::array();
  for (const PromptResult& r : p.results) {
    nlohmann::json e = {{"index", r.index},
                        {"line", r.line},
                        {"output_tokens", r.output_tokens},
                        {"num_drafts", r.stats.num_drafts},
                        {"num_draft_tokens", r.stats.num_draft_tokens},
                        {"num_accepted_tokens", r.stats.num_accepted_tokens},
                        {"acceptance_length", r.stats.mean_acceptance_length()},
                        {"seconds", r.seconds}};
    // The generated ids: one list, or one per turn for a `turns` line.
    const bool turns = data.items[r.index].kind == loader::DatasetItem::Kind::Turns;
    e["tokens"] = turns ? nlohmann::json(r.tokens) : nlohmann::json(r.tokens.empty() ? std::vector<int32_t>{} : r.tokens[0]);
    if (baseline) {
      e["baseline_seconds"] = r.baseline_seconds;
      e["matches_baseline"] = r.matches_baseline;
    }
    per.push_back(e);
  }
  j["per_prompt"] = per;
  if (!sweep.empty()) j["aux_shift_sweep"] = aux_sweep_json(sweep);
  std::ofstream out(a.json_out);
  if (!out) fail("cannot write '{}'", a.json_out);
  out << j.dump(2) << "\n";
}

int eval_command(const EvalArgs& a) {
  if (a.aux_sweep && a.draft.empty())
    usage_fail("--aux-shift-sweep needs a draft (-d): it evaluates the draft's tap layers shifted by -1, 0 and +1");
  if (!a.aux_layers.empty() && a.draft.empty()) usage_fail("--aux-layers needs a draft (-d)");
  if (a.draft.empty()) usage_fail("eval needs a draft (-d)");
  as_usage_error([&] { engine::check_sampling({a.temp, 0, 1.0f, a.seed}); });
  engine::TreeParams tree;
  if (a.spec.tree()) {
    tree = a.spec.tree_params();
    if (a.draft_sampling)
      usage_fail("--draft-sampling is for chain drafting (-k): a tree's children are the draft's top-K tokens");
  } else {
    a.spec.check_chain();
  }
  loader::Dataset data = loader::load_dataset(a.dataset, a.strict);
  for (const auto& p : data.problems) fmt::print(stderr, "eaglevk: {}:{}: skipped: {}\n", a.dataset, p.line, p.message);
  size_t count = a.limit ? std::min<size_t>(a.limit, data.items.size()) : data.items.size();

  std::filesystem::path dir = a.model.empty() ? bundled_model_dir() : std::filesystem::path(a.model);
  std::vector<uint32_t> aux;
  if (!a.aux_layers.empty())
    for (int32_t id : parse_id_list(a.aux_layers, "--aux-layers")) aux.push_back(uint32_t(id));
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
  EvalSetup setup{a, data, count, *gpu, m, context, {}, tree, std::nullopt};
  if (std::any_of(data.items.begin(), data.items.begin() + count, [](const auto& item) { return !item.images.empty(); })) {
    std::string why;
    setup.images = engine::image_support(m.model, dir, m.tokenizer, &why);
    if (!setup.images) fail("{} has lines with images, but {}", a.dataset, why);
  }
  engine::GenerationOptions& o = setup.options;
  o.n_predict = a.n_predict;
  o.eos_ids = engine::merge_eos_ids(m.model.config().eos_token_ids, m.tokenizer.eos_ids());
  o.sampling = {a.temp, 0, 1.0f, a.seed};

  if (a.aux_sweep) fmt::print(stderr, "eaglevk: aux shift +0: draft taps layers {}\n", format_ids(configured));
  const EvalPass p = evaluate(setup, draft, plain.get());
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

  fmt::print("{}", p.total.block());
  if (plain)
    fmt::print("baseline: {:.1f} tokens/s plain, {:.1f} tokens/s speculative, speed-up {:.2f}x; outputs match: {}/{}\n",
               p.spec_tokens / p.plain_seconds, p.spec_tokens / p.spec_seconds, p.plain_seconds / p.spec_seconds,
               p.matched, count);
  if (!a.json_out.empty()) write_json(a, setup.tree, dir, count, data, p, plain != nullptr, sweep);
  if (plain && p.matched != count) return 2;
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
                  "JSONL: lines with prompt, turns or messages (messages may hold text and image parts)")
      ->required();
  add_spec_flags(sub, args->spec);
  sub->add_option("-n,--n-predict", args->n_predict, "new tokens per generation")->capture_default_str();
  sub->add_option("--limit", args->limit, "evaluate only the first N prompts");
  sub->add_flag("--chat", args->chat, "render `prompt` lines as a user turn with the chat template");
  sub->add_option("--temp", args->temp, "temperature (0: greedy)")->capture_default_str();
  sub->add_option("--seed", args->seed, "random seed")->capture_default_str();
  sub->add_option("--ctx", args->ctx, "context length")->capture_default_str();
  sub->add_flag("--draft-sampling", args->draft_sampling, "draw drafts from the draft's distribution (T > 0)");
  sub->add_flag("--baseline", args->baseline, "also decode plainly: speed-up and output equality");
  sub->add_flag("--strict", args->strict, "stop at the first bad line instead of skipping it");
  sub->add_option("--aux-layers", args->aux_layers, "tap layer ids a,b,c (overrides the draft config)");
  sub->add_flag("--aux-shift-sweep", args->aux_sweep,
                "evaluate with the tap ids shifted by -1, 0, +1 and report the best (see below)");
  sub->add_option("--json", args->json_out,
                  "write totals and per-prompt statistics to this file (with the sweep: \"aux_shift_sweep\" rows)");
  sub->add_option("--device", args->device, "Vulkan device index or name");
  register_runner(sub, [args] { return eval_command(*args); });
}

}  // namespace eaglevk::cli
