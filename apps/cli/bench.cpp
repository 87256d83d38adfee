// `eaglevk bench`: prefill (ppN) and decode (tgN) tokens/s over repetitions, as a markdown
// table in the manner of llama-bench, or JSON; and the load: time from files to device, and
// the process's peak host memory.
#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <random>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <eaglevk/eaglevk.hpp>
#include <eaglevk/error.h>

#include "apps/cli/device_flags.h"
#include "apps/cli/bench_concurrency.h"
#include "apps/cli/commands.h"
#include "apps/cli/integer_flags.h"
#include "apps/cli/model_files.h"
#include "apps/cli/spec_flags.h"
#include "apps/cli/usage.h"

namespace eaglevk::cli {
namespace {

struct BenchArgs {
  std::string model, draft, output = "md";
  DeviceFlags devices;
  uint32_t n_prompt = 512, n_gen = 128, reps = 5, depth = 0;
  std::vector<uint32_t> concurrency;  // --concurrency: clients per measurement
  bool profile = false;
  SpecFlags spec;
  std::optional<bool> check_tensors, experts_in_host;
};

// One profiled decode run (bench --profile): per generated token, or per speculative round.
struct ProfiledRun {
  std::string test;
  uint64_t tokens = 0, rounds = 0;
  api::ProfileSummary summary;
};

nlohmann::json profile_json(const ProfiledRun& r) {
  const double per = double(std::max<uint64_t>(r.tokens, 1));
  nlohmann::json commands = nlohmann::json::array();
  for (const api::ProfiledCommand& c : r.summary.per_command)
    commands.push_back({{"command", c.name}, {"gpu_ms_per_token", c.ms / per}, {"count_per_token", double(c.count) / per},
                        {"gb_per_s", c.gbps()}});
  nlohmann::json j = {{"test", "profile " + r.test},
                      {"tokens", r.tokens},
                      {"submissions", r.summary.submissions},
                      {"replayed_submissions", r.summary.replayed},
                      {"gpu_ms_per_token", r.summary.gpu_ms / per},
                      {"commands_per_token", double(r.summary.commands) / per},
                      {"host_record_ms_per_token", r.summary.record_ms / per},
                      {"host_wait_ms_per_token", r.summary.wait_ms / per},
                      {"host_record_us_per_command", r.summary.record_us_per_command},
                      {"commands", commands}};
  if (r.rounds) {
    j["rounds"] = r.rounds;
    j["host_record_ms_per_round"] = r.summary.record_ms / double(r.rounds);
  }
  return j;
}

// The process's peak resident memory (ru_maxrss, KiB on Linux).
uint64_t peak_host_memory() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return uint64_t(u.ru_maxrss) * 1024;
}

struct Stat {
  std::string test;
  std::vector<double> tps;
  double acceptance_length = 0;
  double mean() const {
    double s = 0;
    for (double v : tps) s += v;
    return tps.empty() ? 0 : s / tps.size();
  }
  double stddev() const {
    if (tps.size() < 2) return 0;
    double m = mean(), s = 0;
    for (double v : tps) s += (v - m) * (v - m);
    return std::sqrt(s / (tps.size() - 1));
  }
};

int bench_command(const BenchArgs& a) {
  std::filesystem::path dir = a.model.empty() ? bundled_model_dir() : std::filesystem::path(a.model);
  if (a.reps == 0) usage_fail("-r must be at least 1");
  if (a.n_prompt == 0 && a.n_gen == 0) usage_fail("-p 0 and -n 0 leave bench nothing to measure: give one of them tokens");
  if (a.n_gen == 0 && a.profile) usage_fail("--profile profiles the decode tests: not with -n 0");
  if (a.n_gen == 0 && a.depth) usage_fail("--depth {} places the decode tests: not with -n 0", a.depth);
  if (a.draft.empty() && a.spec.k_option->count()) usage_fail("-k needs a draft (-d): it sets the draft tokens per round");
  engine::TreeParams tree;
  if (a.spec.tree()) {
    if (a.draft.empty()) usage_fail("the --spec-* tree flags need a draft (-d)");
    tree = a.spec.tree_params(/*with_k=*/true);
  }
  if (!a.draft.empty()) a.spec.check_chain();
  if (!a.concurrency.empty()) {
    if (a.n_gen == 0) usage_fail("--concurrency measures generation: not with -n 0");
    if (a.profile || a.depth || a.spec.tree())
      usage_fail("--concurrency measures the batch decoder: not with --profile, --depth or the --spec-* tree flags");
  }
  const api::Runtime runtime = open_runtime_of(a.devices);
  const std::string& device_name = runtime.device_name;
  // The decode tests start after `depth` tokens of context (llama-bench's -d), which the
  // prefill writes untimed: attention's cost grows with it.
  // In 64 bits: -n 4294967295 must not wrap to a small context.
  const uint64_t need = std::max<uint64_t>(a.n_prompt, uint64_t(a.depth) + a.n_gen + 1) + 8;
  const uint32_t context = uint32_t(std::min<uint64_t>(need, UINT32_MAX));
  const uint32_t max_rows = std::min<uint32_t>(std::max<uint32_t>(a.n_prompt, 1), 512);
  api::LoadPlan plan = plan_model(runtime, dir, {a.draft, {}, max_rows, context, {}, {}, a.check_tensors, a.experts_in_host,
                                                  split_shares(a.devices)});
  if (need > plan.memory.model_max_context)
    fail("-p/-n/--depth need {} positions; the model allows {}", need, plan.memory.model_max_context);
  // Loading is measured too: wall time from the files to weights on the device.
  const auto load_start = std::chrono::steady_clock::now();
  const std::shared_ptr<const api::Model> loaded = load_planned(runtime, std::move(plan));
  const double load_seconds = engine::seconds_since(load_start);
  const api::ModelInfo info = api::model_info(*loaded);
  const bool draft = loaded->draft != nullptr;
  const std::string name = api::model_name(dir);
  if (!a.concurrency.empty()) {
    std::vector<ConcurrencyResult> results;
    nlohmann::json j = nlohmann::json::array();
    // Each sequence holds its prompt and everything it generates.
    const uint64_t sequence = uint64_t(std::max<uint32_t>(a.n_prompt, 1)) + a.n_gen + 1;
    if (sequence > loaded->max_context())
      fail("-p {} and -n {} need {} positions a sequence; the model allows {}", a.n_prompt, a.n_gen, sequence,
           loaded->max_context());
    for (uint32_t clients : a.concurrency) {
      if (std::string problem = api::batch_memory_problem(loaded->memory, clients, uint32_t(sequence)); !problem.empty())
        fail("--concurrency {}: {}", clients, problem);
      results.push_back(bench_concurrency(loaded, clients, a.reps, a.n_prompt, a.n_gen, a.spec.k, uint32_t(sequence)));
      fmt::print(stderr, "bench: {} clients: {:.2f} requests/s\n", clients, results.back().requests / results.back().seconds);
      j.push_back(concurrency_json(name, device_name, results.back()));
    }
    fmt::print("{}", a.output == "json" ? j.dump(2) + "\n" : concurrency_table(name, device_name, results));
    return 0;
  }
  // A plain session of prompt-sized prefill passes, a chain one and (with tree flags) a tree
  // one. Every generation ignores EOS; the prefill tests generate 1 token.
  auto make = [&](uint32_t k, const engine::TreeParams& shape, uint32_t rows) {
    api::SessionParams p;
    p.context = context;
    p.k = k;
    p.tree = shape;
    p.max_rows = rows;
    p.ignore_eos = true;
    return std::make_unique<api::Session>(loaded, p);
  };
  const std::unique_ptr<api::Session> runner = make(0, {}, max_rows);

  const std::vector<int32_t> bos = {info.bos_token_id >= 0 ? info.bos_token_id : 0};
  if (draft && tree.enabled()) tree = resolve_tree(*loaded, tree, {bos});

  std::mt19937 rng(1234);
  std::vector<int32_t> prompt(a.n_prompt);
  for (int32_t& id : prompt) id = int32_t(rng() % uint32_t(info.vocab_size));
  // BOS, then depth - 1 random tokens.
  std::vector<int32_t> context_tokens = bos;
  while (context_tokens.size() < a.depth) context_tokens.push_back(int32_t(rng() % uint32_t(info.vocab_size)));
  const std::string at = a.depth ? fmt::format(" @ d{}", a.depth) : "";
  Stat pp{fmt::format("pp{}", a.n_prompt), {}}, tg{fmt::format("tg{}{}", a.n_gen, at), {}},
      spec{fmt::format("spec-tg{}{} k={}", a.n_gen, at, a.spec.k), {}},
      spec_tree{fmt::format("spec-tree-tg{}{} S={} K={} M={}", a.n_gen, at, tree.steps, tree.topk, tree.draft_tokens), {}};
  std::unique_ptr<api::Session> decoder, tree_decoder;
  if (draft) decoder = make(a.spec.k, {}, api::kSessionMaxRows);
  if (draft && tree.enabled()) tree_decoder = make(0, tree, api::kSessionMaxRows);
  engine::SpecStats spec_stats, tree_stats;
  // Progress on stderr as each measurement finishes: a large model's repetitions take minutes.
  auto report = [&](uint32_t rep, const std::string& test, double tps) {
    if (rep == 0)
      fmt::print(stderr, "bench: warm-up {} done ({:.1f} t/s, not counted)\n", test, tps);
    else
      fmt::print(stderr, "bench: {} {}/{}: {:.2f} t/s\n", test, rep, a.reps, tps);
  };
  // The first token comes from the prefill: a decode test generates n_gen + 1.
  const uint32_t decoded = a.n_gen + 1;
  // One warm-up run builds the pipelines.
  for (uint32_t rep = 0; rep <= a.reps; ++rep) {
    if (a.n_prompt) {
      runner->set_max_new_tokens(1);
      auto r = runner->generate(prompt);
      if (rep) pp.tps.push_back(a.n_prompt / r.prefill_seconds);
      report(rep, pp.test, a.n_prompt / r.prefill_seconds);
    }
    if (a.n_gen) {
      const std::vector<int32_t>& start = context_tokens;
      runner->set_max_new_tokens(decoded);
      auto r = runner->generate(start);
      if (rep) tg.tps.push_back(a.n_gen / r.decode_seconds);
      report(rep, tg.test, a.n_gen / r.decode_seconds);
      if (decoder) {
        decoder->set_max_new_tokens(decoded);
        auto rs = decoder->generate(start);
        if (rep) {
          spec.tps.push_back(a.n_gen / rs.decode_seconds);
          spec_stats.merge(rs.stats);
        }
        report(rep, spec.test, a.n_gen / rs.decode_seconds);
      }
      if (tree_decoder) {
        tree_decoder->set_max_new_tokens(decoded);
        auto rs = tree_decoder->generate(start);
        if (rep) {
          spec_tree.tps.push_back(a.n_gen / rs.decode_seconds);
          tree_stats.merge(rs.stats);
        }
        report(rep, spec_tree.test, a.n_gen / rs.decode_seconds);
      }
    }
  }
  // --profile: after the timed runs, one decode of n_gen tokens (and one speculative, with a
  // draft, and one with trees, with tree flags) on fresh sessions whose recorders write a
  // timestamp after every command, so the timestamps cost nothing above.
  std::vector<ProfiledRun> profiled;
  if (a.profile && a.n_gen) {
    api::request_profiling();
    // The context is prefilled first, unprofiled; the profiled generation continues from its
    // caches (generate_reusing_prefix), so that it runs the last context token and then n_gen
    // decode steps or rounds: n_gen + 1 tokens.
    auto profile = [&](api::Session& session, const std::string& test, bool rounds) {
      session.set_max_new_tokens(1);
      session.generate(context_tokens);
      session.set_max_new_tokens(decoded);
      api::profile_reset();
      auto r = session.generate_reusing_prefix(context_tokens);
      profiled.push_back({test, r.tokens.size(), rounds ? r.stats.num_drafts : 0, api::profile_summary()});
    };
    profile(*make(0, {}, max_rows), tg.test, false);
    if (draft) profile(*make(a.spec.k, {}, api::kSessionMaxRows), spec.test, true);
    if (tree_decoder) profile(*make(0, tree, api::kSessionMaxRows), spec_tree.test, true);
  }
  spec.acceptance_length = spec_stats.mean_acceptance_length();
  spec_tree.acceptance_length = tree_stats.mean_acceptance_length();
  const uint64_t peak_rss = peak_host_memory();

  std::string size = fmt::format("{:.2f} MiB", info.weight_bytes / double(1 << 20));
  std::string params = info.parameters >= 1000000000 ? fmt::format("{:.2f} B", info.parameters / 1e9)
                                                     : fmt::format("{:.2f} M", info.parameters / 1e6);
  std::vector<Stat> stats;
  if (a.n_prompt) stats.push_back(pp);
  if (a.n_gen) stats.push_back(tg);
  if (a.n_gen && decoder) stats.push_back(spec);
  if (a.n_gen && tree_decoder) stats.push_back(spec_tree);
  if (a.output == "json") {
    nlohmann::json j = nlohmann::json::array();
    for (const Stat& s : stats)
      j.push_back({{"model", name}, {"size_bytes", info.weight_bytes}, {"params", info.parameters},
                   {"device", device_name}, {"test", s.test}, {"tokens_per_s", s.mean()},
                   {"stddev", s.stddev()}, {"samples", s.tps},
                   {"speedup", s.acceptance_length > 0 ? s.mean() / tg.mean() : 1.0}, {"depth", a.depth},
                   {"mean_acceptance_length", s.acceptance_length}});
    j.push_back({{"model", name}, {"device", device_name}, {"test", "load"},
                 {"file_bytes", loaded->memory.weights}, {"seconds", load_seconds},
                 {"bytes_per_s", loaded->memory.weights / load_seconds}, {"peak_host_bytes", peak_rss}});
    if (nlohmann::json e = expert_traffic_json(*loaded, a.draft.empty() ? 0 : a.spec.k + 1); !e.is_null())
      j.push_back(e);
    for (const ProfiledRun& r : profiled) j.push_back(profile_json(r));
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  fmt::print("| model | size | params | device | test | t/s | speed-up |\n| --- | ---: | ---: | --- | ---: | ---: | ---: |\n");
  for (const Stat& s : stats) {
    std::string speedup = s.acceptance_length > 0
                              ? fmt::format("{:.2f}x (AL {:.2f})", s.mean() / tg.mean(), s.acceptance_length)
                              : "";
    fmt::print("| {} | {} | {} | {} | {} | {:.2f} ± {:.2f} | {} |\n", name, size, params, device_name,
               s.test, s.mean(), s.stddev(), speedup);
  }
  fmt::print("\nload: {} of weights in {:.2f} s ({}/s); peak host memory {}\n", engine::format_bytes(loaded->memory.weights),
             load_seconds, engine::format_bytes(uint64_t(loaded->memory.weights / load_seconds)),
             engine::format_bytes(peak_rss));
  if (std::string e = expert_traffic_line(*loaded, a.draft.empty() ? 0 : a.spec.k + 1); !e.empty())
    fmt::print("{}\n", e);
  for (const ProfiledRun& r : profiled) {
    fmt::print("\n{} ", r.test);
    if (r.rounds)
      fmt::print("({} rounds, host recording {:.3f} ms a round) ", r.rounds, r.summary.record_ms / double(r.rounds));
    fmt::print("{}", api::profile_report(r.summary, r.tokens));
  }
  return 0;
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* sub = app.add_subcommand("bench", "Measure prefill and decode tokens/s, load time and peak host memory");
  sub->footer("Example: eaglevk bench -d assets/tiny-llama3-eagle3 -p 64 -n 64 -r 2");
  sub->add_option("-m,--model", args->model, "model folder or GGUF file (default: the bundled tiny model)");
  sub->add_option("-p,--n-prompt", args->n_prompt, "prompt tokens for the prefill test")
      ->capture_default_str()
      ->check(integer_flag<uint32_t>());
  sub->add_option("-n,--n-gen", args->n_gen, "tokens for the decode test")->capture_default_str()->check(integer_flag<uint32_t>());
  sub->add_option("-r,--repetitions", args->reps, "repetitions")->capture_default_str()->check(integer_flag<uint32_t>());
  sub->add_option("--depth", args->depth, "decode after this many tokens of context (llama-bench's -d)")
      ->check(integer_flag<uint32_t>());
  sub->add_flag("--profile", args->profile,
                "then profile one decode of each kind: GPU time and GB/s per family");
  sub->add_option("-o,--output", args->output, "md or json")->check(CLI::IsMember({"md", "json"}))->capture_default_str();
  sub->add_option("-d,--draft", args->draft, "EAGLE-3 draft (folder or GGUF file): adds speculative decoding");
  add_spec_flags(sub, args->spec);
  add_check_tensors_flags(sub, args->check_tensors);
  add_experts_in_host_flags(sub, args->experts_in_host);
  sub->add_option("--concurrency", args->concurrency,
                  "C clients through the batch decoder, -r requests each (a list: 1,4,8)")
      ->delimiter(',')
      ->check(integer_in(1, 64));
  add_device_flags(sub, args->devices);
  register_runner(sub, [args] { return bench_command(*args); });
}

}  // namespace eaglevk::cli
