// `eaglevk eval`: speculative decoding over a JSONL dataset, for people who measure drafters.
// Prints the vLLM acceptance block over the dataset and a table per category; --json writes
// the configuration, totals, categories and per-prompt records (eval_report.h); --baseline
// also decodes plainly and reports the speed-up (and at temperature 0 whether every output
// matched); --shard evaluates every N-th prompt (eval_shard.h) and `eaglevk eval-merge`
// combines the shards; --resume keeps going after a kill (eval_resume.h); multi-turn lines
// keep the KV caches from turn to turn; --aux-shift-sweep repeats the evaluation with the
// draft's tap ids shifted by -1 and +1 to tell which layer convention the head was trained
// with.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <set>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <eaglevk/error.h>

#include "apps/cli/aux_sweep.h"
#include "apps/cli/commands.h"
#include "apps/cli/eval_fingerprints.h"
#include "apps/cli/eval_pass.h"
#include "apps/cli/integer_flags.h"
#include "apps/cli/usage.h"
#include "loader/input_path.h"
#include "loader/output_file.h"

namespace eaglevk::cli {
namespace {

// --aux-shift-sweep: the configured ids first (that pass also gives the usual report), then
// the same loaded head tapping one layer shallower and one deeper (the taps are only which
// hidden states the decoder copies out; the weights do not change). The ids are restored.
std::vector<AuxSweepRow> aux_sweep(const EvalSetup& e, const EvalPass& first, bool& outputs_agree) {
  const api::Model& m = *e.model;
  const api::ModelInfo info = api::model_info(m);
  const std::vector<uint32_t> base = info.draft_taps;
  const uint32_t layers = info.layers;
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
    api::set_draft_taps(m, row.ids);  // in range (shift_aux_layers) and still sorted and distinct
    EvalPass pass = evaluate(e, nullptr, nullptr);
    api::set_draft_taps(m, base);
    row.stats = pass.total;
    row.output_tokens = pass.spec_tokens;
    row.seconds = pass.spec_seconds;
    outputs_agree = outputs_agree && pass.outputs == first.outputs;
    rows.push_back(row);
  }
  return rows;
}

// The settings that decide the outputs: a resume file and the shards of a merge must agree on
// every one. The inputs' paths are recorded for people to read; their fingerprints, added once
// the plan has checked the paths, are what is compared (eval_fingerprints.h). (The device and
// the shard are recorded beside them.)
nlohmann::json eval_config(const EvalArgs& a, const std::filesystem::path& dir, const engine::TreeParams& tree,
                           const std::vector<uint32_t>& aux, uint64_t seed, bool draft_sampling, size_t count) {
  nlohmann::json c;
  c["dataset"] = a.dataset;
  c["model"] = dir.string();
  c["draft"] = a.draft;
  if (!a.mmproj.empty()) c["mmproj"] = a.mmproj;
  if (!a.chat_template.empty()) c["chat_template"] = a.chat_template;
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

// --seed, else the seed of the run being resumed, else a random one (printed so that the run
// can be repeated). Greedy decoding draws nothing: its seed is 0, so that shards and resumed
// runs agree without one.
uint64_t choose_seed(const EvalArgs& a, const EvalShard& shard) {
  const std::optional<uint64_t> given = a.seed_option->count() ? parse_seed(a.seed) : std::nullopt;  // -1: none
  if (given) return *given;
  if (a.temp == 0) return 0;
  if (!a.resume.empty()) {
    const std::optional<nlohmann::json> stored = ResumeFile::stored_config(a.resume);
    if (stored && stored->contains("seed") && (*stored)["seed"].is_number_unsigned()) return (*stored)["seed"].get<uint64_t>();
  }
  if (shard.count > 1) usage_fail("--shard at temperature > 0 needs --seed: every shard must draw with the same seed");
  return announced_random_seed();
}

// --batch, or when not given the most sequences worth decoding together: kDefaultEvalBatch
// for chain drafting over text lines (8 beat 4 on lavapipe too: docs/perf.md; memory may
// lower it, batch_that_fits), one otherwise (trees, images and --baseline, whose speed-up
// compares one prompt at a time, run one line after another).
constexpr uint32_t kDefaultEvalBatch = 8;
uint32_t eval_batch(const EvalArgs& a, const engine::TreeParams& tree, bool has_images) {
  if (a.batch == 0) return tree.enabled() || has_images || a.baseline ? 1 : kDefaultEvalBatch;
  if (a.batch > 1) {
    if (tree.enabled()) usage_fail("--batch {} is for chain drafting (-k); tree drafting runs --batch 1", a.batch);
    if (has_images) usage_fail("--batch {}: {} has lines with images, which run --batch 1", a.batch, a.dataset);
    if (a.baseline) usage_fail("--baseline compares one prompt at a time: it runs --batch 1");
  }
  return a.batch;
}

// B sequences hold B contexts of KV cache, in one binding per layer: an explicit --batch that
// does not fit is refused with what it needs; the default shrinks until it fits.
uint32_t batch_that_fits(const EvalArgs& a, uint32_t batch, const engine::MemoryPlan& memory, uint32_t context) {
  auto problem = [&](uint32_t b) { return api::batch_memory_problem(memory, b, context); };
  if (a.batch > 1) {
    if (std::string p = problem(batch); !p.empty()) fail("--batch {}: {}; lower --batch or --ctx", batch, p);
    return batch;
  }
  while (batch > 1 && !problem(batch).empty()) --batch;
  return batch;
}

int eval_command(const EvalArgs& a) {
  if (a.aux_sweep && a.draft.empty())
    usage_fail("--aux-shift-sweep needs a draft (-d): it evaluates the draft's tap layers shifted by -1, 0 and +1");
  if (!a.aux_layers.empty() && a.draft.empty()) usage_fail("--aux-layers needs a draft (-d)");
  if (a.draft.empty()) usage_fail("eval needs a draft (-d)");
  if (a.aux_sweep && !a.resume.empty()) usage_fail("--resume does not go with --aux-shift-sweep");
  if (a.draft_sampling && a.greedy_drafts) usage_fail("--draft-sampling and --greedy-drafts choose opposite schemes");
  as_usage_error([&] { engine::check_sampling({a.temp, 0, 1.0f, 0}); });
  if (a.temp == 0 && (a.draft_sampling || a.greedy_drafts))
    fmt::print(stderr, "eaglevk: warning: {} does nothing at --temp 0: greedy drafts are the draft's argmax\n",
               a.draft_sampling ? "--draft-sampling" : "--greedy-drafts");
  // Output and resume paths are checked before the evaluation that fills them.
  if (!a.json_out.empty())
    if (std::string p = loader::output_problem(a.json_out, "--json"); !p.empty()) fail("{}", p);
  for (const std::string& folder : a.allowed_image_dirs)
    if (std::string p = loader::folder_problem(folder, "--allowed-image-dir"); !p.empty()) fail("{}", p);
  if (!a.resume.empty())
    if (const loader::PathKind kind = loader::path_kind(a.resume);
        kind != loader::PathKind::File && kind != loader::PathKind::Missing)
      fail("--resume: {} (it is read, then appended to)", loader::file_problem(a.resume));
  as_usage_error([&] { api::check_stop_strings(a.stop); });
  as_usage_error([&] { engine::check_logprobs(a.logprobs); });
  if (a.batch > api::kMaxBatchSequences) usage_fail("--batch is at most {}, got {}", api::kMaxBatchSequences, a.batch);
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
  const bool draft_sampling = engine::draws_drafts({a.temp}, tree.enabled(), a.greedy_drafts);
  const auto wall_start = std::chrono::steady_clock::now();
  loader::Dataset data = loader::load_dataset(a.dataset, a.strict, {a.allowed_image_dirs.begin(), a.allowed_image_dirs.end()});
  for (const auto& p : data.problems) fmt::print(stderr, "eaglevk: {}:{}: skipped: {}\n", a.dataset, p.line, p.message);
  std::set<std::string> warned_roles;
  for (const loader::DatasetItem& item : data.items)
    warn_unusual_roles(item.messages, fmt::format("{}:{}", a.dataset, item.line), &warned_roles);
  size_t count = a.limit ? std::min<size_t>(a.limit, data.items.size()) : data.items.size();
  if (shard.count > 1)
    fmt::print(stderr, "eaglevk: shard {}/{}: {} of {} prompts\n", shard.index, shard.count,
               count > shard.index ? (count - shard.index + shard.count - 1) / shard.count : 0, count);

  const bool has_images =
      std::any_of(data.items.begin(), data.items.begin() + count, [](const auto& item) { return !item.images.empty(); });
  const uint32_t requested_batch = eval_batch(a, tree, has_images);

  std::filesystem::path dir = a.model.empty() ? bundled_model_dir() : std::filesystem::path(a.model);
  std::vector<uint32_t> aux;
  if (!a.aux_layers.empty())
    for (int32_t id : parse_id_list(a.aux_layers, "--aux-layers")) aux.push_back(uint32_t(id));
  const uint64_t seed = choose_seed(a, shard);
  nlohmann::json config = eval_config(a, dir, tree, aux, seed, draft_sampling, count);

  const api::Runtime runtime = open_runtime_of(a.devices);
  api::LoadPlan plan = plan_model(
      runtime, dir, {a.draft, aux, api::kSessionMaxRows, a.ctx, a.mmproj, a.chat_template, a.check_tensors,
                           a.experts_in_host, split_shares(a.devices)});
  config["fingerprints"] = eval_fingerprints({dir, a.draft, a.mmproj, a.chat_template, a.dataset, &data});
  // Opened before the weights upload: a file from another configuration is refused at once.
  // (With --spec-draft-tokens auto the tree's size is decided later; the configuration names
  // auto.)
  std::unique_ptr<ResumeFile> resume;
  if (!a.resume.empty()) resume = std::make_unique<ResumeFile>(a.resume, config, shard);
  const uint32_t context = plan.context;
  const uint32_t batch = batch_that_fits(a, requested_batch, plan.memory, context);
  const std::shared_ptr<const api::Model> loaded = load_planned(runtime, std::move(plan));
  const api::Model& m = *loaded;
  const api::ModelInfo info = api::model_info(m);
  const std::vector<uint32_t>& configured = info.draft_taps;

  if (tree.enabled() && a.spec.auto_tokens()) {
    // Calibrated on the first prompts of the dataset (their first turn).
    std::vector<std::vector<int32_t>> prompts;
    for (size_t i = 0; i < std::min<size_t>(count, 4); ++i) {
      std::vector<loader::ChatMessage> conversation;
      prompts.push_back(item_prompt_ids(a, m, data.items[i], 0, conversation));
    }
    tree = resolve_tree(m, tree, prompts);
  }
  if (has_images && !m.images)
    throw Error(fmt::format("{} has lines with images, but {}", a.dataset, m.no_images_reason), m.no_images_setting);
  EvalSetup setup{a, data, count, loaded, {}, shard, batch};
  api::SessionParams& s = setup.session;
  s.context = context;
  s.k = tree.enabled() ? 0 : a.spec.k;
  s.tree = tree;
  s.sampling = {a.temp, 0, 1.0f, seed};
  s.max_new_tokens = a.n_predict;
  s.greedy_drafts = a.greedy_drafts;
  s.stop = a.stop;
  s.logprobs = a.logprobs;
  // --baseline: the same model decoding plainly (its own KV caches, no draft).
  std::unique_ptr<api::Session> plain;
  if (a.baseline) {
    api::SessionParams plain_params = s;
    plain_params.k = 0;
    plain_params.tree = {};
    plain = std::make_unique<api::Session>(loaded, plain_params);
  }

  if (a.aux_sweep) fmt::print(stderr, "eaglevk: aux shift +0: draft taps layers {}\n", format_ids(configured));
  const EvalPass p = evaluate(setup, plain.get(), resume.get());
  std::vector<AuxSweepRow> sweep;
  bool sweep_outputs_agree = true;
  if (a.aux_sweep) {
    sweep = aux_sweep(setup, p, sweep_outputs_agree);
    fmt::print("{}", aux_sweep_report(sweep, configured, info.layers));
    // Greedy speculative decoding is lossless whatever the taps, so only acceptance may differ.
    if (a.temp == 0)
      fmt::print("greedy outputs identical in every row: {}\n", sweep_outputs_agree ? "yes" : "NO (a bug: please report)");
    fmt::print("\nthe configured ids (shift +0) in detail:\n");
  }

  EvalReport report;
  report.config = config;
  if (tree.enabled()) report.config["tree"]["spec_draft_tokens"] = tree.draft_tokens;  // auto's choice
  report.shards = {shard};
  report.device = runtime.device_name;
  report.dataset_prompts = count;
  report.skipped_lines = data.problems.size();
  report.records = p.results;
  report.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  report.batch = batch;
  fmt::print("{}", report_text(report, plain != nullptr, a.temp));
  if (!a.json_out.empty()) {
    nlohmann::json j = report_to_json(report, plain != nullptr);
    if (!sweep.empty()) j["aux_shift_sweep"] = aux_sweep_json(sweep);
    loader::write_output_file(a.json_out, [&](std::ostream& out) { out << j.dump(2) << "\n"; });
  }
  // EAGLEVK_PROFILE=1: GPU time per command family per generated token (eval's submissions,
  // prefills included), and the host's recording and waiting time.
  if (const std::string profile = api::profile_report(p.spec_tokens); !profile.empty()) fmt::print(stderr, "{}", profile);
  // At temperature 0 speculative output must equal plain output; at T > 0 both are samples.
  const EvalTotals totals = totals_of(p.results);
  if (plain && a.temp == 0 && totals.matched != totals.prompts) return 2;
  return a.temp == 0 && !sweep_outputs_agree ? 2 : 0;
}

}  // namespace

void add_eval_command(CLI::App& app) {
  auto args = std::make_shared<EvalArgs>();
  CLI::App* sub = app.add_subcommand("eval", "Measure a drafter's acceptance over a JSONL dataset");
  sub->footer("Example: eaglevk eval -d assets/tiny-llama3-eagle3 --dataset tests/data/eval_mix.jsonl --baseline");
  sub->add_option("-m,--model", args->model, "target: model folder or GGUF file (default: the bundled tiny model)");
  sub->add_option("-d,--draft", args->draft, "EAGLE-3 draft head: folder or GGUF file (required)");
  sub->add_option("--mmproj", args->mmproj,
                  "llama.cpp's vision file (mmproj-*.gguf) for a Llama-4 GGUF target");
  sub->add_option("--dataset", args->dataset,
                  "JSONL: prompt, turns, messages or conversations, and a category")
      ->required();
  sub->add_option("--allowed-image-dir", args->allowed_image_dirs,
                  "a folder besides the dataset's own its images may be in")->type_name("DIR");
  add_spec_flags(sub, args->spec);
  add_check_tensors_flags(sub, args->check_tensors);
  add_experts_in_host_flags(sub, args->experts_in_host);
  sub->add_option("-n,--n-predict", args->n_predict, "new tokens per generation")
      ->capture_default_str()
      ->check(integer_flag<uint32_t>());
  sub->add_option("--limit", args->limit, "evaluate only the first N prompts")->check(integer_flag<uint32_t>());
  sub->add_flag("--chat", args->chat, "render `prompt` lines as a user turn with the chat template");
  sub->add_option("--chat-template", args->chat_template,
                  "a Jinja chat template file to use instead of the target's")->type_name("FILE");
  sub->add_option("--temp", args->temp, "temperature (0: greedy)")->capture_default_str();
  args->seed_option =
      sub->add_option("--seed", args->seed, "random seed; -1 or none at T > 0: a random one (shards need one)");
  sub->add_option("--ctx", args->ctx, "context length")->capture_default_str()->check(integer_flag<uint32_t>());
  sub->add_flag("--draft-sampling", args->draft_sampling,
                "at T > 0: draw drafts from the draft's distribution (the default)");
  sub->add_flag("--greedy-drafts", args->greedy_drafts,
                "at T > 0: propose the draft's argmax instead (vLLM's default)");
  sub->add_option("--stop", args->stop, "end a generation at this text (repeatable)");
  sub->add_option("--logprobs", args->logprobs,
                  "record each token's log-probability and the N most likely (--json)")
      ->check(integer_flag<uint32_t>());
  sub->add_flag("--baseline", args->baseline,
                "also decode plainly: the speed-up, and at T = 0 equal outputs");
  sub->add_option("--shard", args->shard,
                  "prompts i, i+N, ... only: i/N, or auto (Slurm array, Indexed Job)");
  sub->add_option("--shard-count", args->shard_count, "with --shard auto in a Kubernetes Indexed Job: the completions")
      ->check(integer_flag<uint32_t>());
  sub->add_option("--resume", args->resume,
                  "append finished prompts to this JSONL file; skip those already in it");
  sub->add_option("--batch", args->batch,
                  "sequences decoded together (default 8 with -k, 1 with a tree)")
      ->check(integer_flag<uint32_t>());
  sub->add_flag("--no-kv-reuse", args->no_kv_reuse, "prefill every turn of a conversation from its start");
  sub->add_flag("--strict", args->strict, "stop at the first bad line instead of skipping it");
  sub->add_option("--aux-layers", args->aux_layers, "tap layer ids a,b,c (overrides the draft config)");
  sub->add_flag("--aux-shift-sweep", args->aux_sweep,
                "evaluate with the tap ids shifted by -1, 0, +1; report the best");
  sub->add_option("--json", args->json_out,
                  "write the configuration, totals and per-prompt records here");
  add_device_flags(sub, args->devices);
  register_runner(sub, [args] { return eval_command(*args); });
}

}  // namespace eaglevk::cli
