#include "runtime/engine/tree_auto.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <eaglevk/error.h>

#include "loader/output_file.h"
#include "loader/sha256.h"
#include "runtime/ops/tree.h"
#include "runtime/vk/switches.h"

namespace eaglevk::engine {
namespace {

constexpr double kUnknown = std::numeric_limits<double>::quiet_NaN();
// Row counts whose pass time is measured; others are interpolated.
const std::vector<uint32_t> kVerifyRows = {1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 40, 48, 64};
const std::vector<uint32_t> kDraftRows = {1, 2, 3, 4, 6, 8, 12, 16};
constexpr uint32_t kTimingRepeats = 5;
// Bumped whenever what the cache file means changes.
constexpr int kCacheVersion = 1;

double interpolate(const std::vector<uint32_t>& at, const std::vector<double>& seconds, uint32_t rows) {
  if (at.empty()) fail("no pass costs measured");
  if (rows <= at.front()) return seconds.front();
  for (size_t i = 1; i < at.size(); ++i)
    if (rows <= at[i]) {
      const double f = double(rows - at[i - 1]) / double(at[i] - at[i - 1]);
      return seconds[i - 1] + f * (seconds[i] - seconds[i - 1]);
    }
  // Past the last measurement: grow in proportion to the rows (a pass never gets cheaper).
  return seconds.back() * double(rows) / double(at.back());
}

uint32_t pool_size(uint32_t k, uint32_t s) { return k + (s - 1) * k * k; }

// A stable file name for a cache key: its digest's first 16 hex digits (the key itself is in
// the file and checked on reading).
std::filesystem::path cache_file(const AutoOptions& o) {
  return o.cache_dir / fmt::format("pass-costs-{}.json", loader::sha256_hex(o.cache_key).substr(0, 16));
}

bool load_costs(const AutoOptions& o, PassCosts& costs) {
  if (o.cache_key.empty() || o.cache_dir.empty()) return false;
  std::ifstream in(cache_file(o));
  if (!in) return false;
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
    if (j.at("version").get<int>() != kCacheVersion || j.at("key").get<std::string>() != o.cache_key) return false;
    costs.verify_rows = j.at("verify_rows").get<std::vector<uint32_t>>();
    costs.verify_seconds = j.at("verify_seconds").get<std::vector<double>>();
    costs.draft_rows = j.at("draft_rows").get<std::vector<uint32_t>>();
    costs.draft_seconds = j.at("draft_seconds").get<std::vector<double>>();
  } catch (const std::exception&) {
    return false;  // a damaged cache is measured again
  }
  return costs.verify_rows.size() == costs.verify_seconds.size() && !costs.verify_rows.empty() &&
         costs.draft_rows.size() == costs.draft_seconds.size() && !costs.draft_rows.empty();
}

void save_costs(const AutoOptions& o, const PassCosts& costs, std::string* report) {
  if (o.cache_key.empty() || o.cache_dir.empty()) return;
  nlohmann::json j = {{"version", kCacheVersion},           {"key", o.cache_key},
                      {"verify_rows", costs.verify_rows},   {"verify_seconds", costs.verify_seconds},
                      {"draft_rows", costs.draft_rows},     {"draft_seconds", costs.draft_seconds}};
  std::error_code ec;
  std::filesystem::create_directories(o.cache_dir, ec);
  // Written atomically (loader/output_file.h): a reader never sees half a file.
  try {
    loader::write_output_file(cache_file(o), [&](std::ostream& out) { out << j.dump(1) << "\n"; });
  } catch (const Error& e) {
    if (report) *report += fmt::format("could not cache the pass costs in {}: {}\n", o.cache_dir.string(), e.what());
  }
}

}  // namespace

double PassCosts::verify(uint32_t rows) const { return interpolate(verify_rows, verify_seconds, rows); }
double PassCosts::draft(uint32_t rows) const { return interpolate(draft_rows, draft_seconds, rows); }

double AcceptanceTable::at(uint32_t s, uint32_t m) const {
  if (s < 1 || s > steps || m < 2 || m > draft_tokens) return kUnknown;
  return accepted[size_t(s - 1) * draft_tokens + (m - 1)];
}

AcceptanceTable acceptance_by_shape(const std::vector<TreeRound>& rounds, const TreeParams& calibrated) {
  AcceptanceTable t;
  t.topk = calibrated.topk;
  t.steps = calibrated.steps;
  t.draft_tokens = calibrated.draft_tokens;
  std::vector<double> sum(size_t(t.steps) * t.draft_tokens, 0.0);
  std::vector<bool> unknown(sum.size(), false);
  for (const TreeRound& r : rounds) {
    const uint32_t M = uint32_t(r.tokens.size());
    if (M != calibrated.draft_tokens || r.scores.size() != M) continue;  // a tree shrunk at the context's end
    ++t.rounds;
    // Non-root nodes by score, best first, ties to the lower index (the device's order).
    std::vector<uint32_t> order;
    for (uint32_t j = 1; j < M; ++j) order.push_back(j);
    std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return r.scores[a] > r.scores[b]; });
    for (uint32_t s = 1; s <= t.steps; ++s) {
      std::vector<uint32_t> eligible;  // verified nodes of depth <= s, best first
      for (uint32_t j : order)
        if (uint32_t(r.depths[j]) <= s) eligible.push_back(j);
      // Were all candidates of depth <= s verified? Then any smaller tree is known.
      const bool whole = pool_size(t.topk, s) <= eligible.size();
      for (uint32_t m = 2; m <= t.draft_tokens; ++m) {
        const size_t cell = size_t(s - 1) * t.draft_tokens + (m - 1);
        if (!whole && m - 1 > eligible.size()) {
          unknown[cell] = true;
          continue;
        }
        std::vector<bool> in(M, false);
        in[0] = true;
        for (size_t i = 0; i < std::min<size_t>(m - 1, eligible.size()); ++i) in[eligible[i]] = true;
        const auto argmax = [&](uint32_t node) { return r.target_argmax[node]; };
        sum[cell] += double(walk_tree(r.tokens, r.parents, argmax, &in).size() - 1);
      }
    }
  }
  t.accepted.assign(sum.size(), kUnknown);
  if (t.rounds)
    for (size_t i = 0; i < sum.size(); ++i)
      if (!unknown[i]) t.accepted[i] = sum[i] / double(t.rounds);
  return t;
}

AutoChoice choose_tree_shape(const std::vector<AcceptanceTable>& tables, const PassCosts& costs) {
  AutoChoice best;
  double best_rate = -1;
  for (const AcceptanceTable& t : tables)
    for (uint32_t s = 1; s <= t.steps; ++s)
      for (uint32_t m = std::max(s + 1, t.topk); m <= std::min(t.draft_tokens, 1 + pool_size(t.topk, s)); ++m) {
        const double a = t.at(s, m);
        if (std::isnan(a)) continue;
        AutoChoice c;
        c.shape = TreeParams{s, t.topk, m};
        c.accepted = a;
        const uint32_t catch_up = std::max(1u, uint32_t(std::lround(1 + a)));
        c.round_seconds = costs.draft(catch_up) + (s - 1) * costs.draft(t.topk) + costs.verify(m);
        const double rate = c.tokens_per_second();
        // Strictly better by a hair: equal rates keep the earlier, smaller tree.
        if (rate > best_rate * (1 + 1e-9)) {
          best = c;
          best_rate = rate;
        }
      }
  if (best_rate < 0) fail_setting(Setting::TreeDraftTokens, "the automatic tree: the calibration produced no usable tree");
  return best;
}

std::filesystem::path default_cache_dir() {
  if (const std::optional<std::string> d = vk::switch_value("EAGLEVK_CACHE_DIR")) return *d;
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d) return std::filesystem::path(d) / "eaglevk";
  if (const char* d = std::getenv("HOME"); d && *d) return std::filesystem::path(d) / ".cache" / "eaglevk";
  return {};
}

AutoChoice auto_tree_shape(ops::Gpu& gpu, const models::TargetModel& target, const models::Eagle3Model& draft,
                           const AutoOptions& o, std::string* report) {
  if (o.prompts.empty()) fail_setting(Setting::TreeDraftTokens, "the automatic tree needs a prompt to calibrate on");
  const uint32_t max_steps = std::clamp(o.max_steps, 1u, ops::kTreeMaxLevels);
  const uint32_t max_tokens = std::clamp(o.max_tokens, 2u, ops::kTreeMaxNodes);
  size_t longest = 0;
  for (const auto& p : o.prompts) longest = std::max(longest, p.size());
  const uint32_t context = uint32_t(longest) + o.tokens_per_prompt + max_tokens + 8;
  std::string lines;

  std::vector<uint32_t> topks;
  for (uint32_t k : {1u, 2u, 4u, 8u, 16u})
    if (k <= std::min(o.max_topk, ops::kTreeMaxTopK) && int64_t(k) <= int64_t(draft.config.draft_vocab_size))
      topks.push_back(k);
  auto calibration_shape = [&](uint32_t k) {
    const uint32_t m = std::min(max_tokens, 1 + pool_size(k, max_steps));
    return TreeParams{std::min(max_steps, m - 1), k, m};
  };

  PassCosts costs;
  const bool cached = load_costs(o, costs);
  std::vector<AcceptanceTable> tables;
  for (uint32_t k : topks) {
    const TreeParams shape = calibration_shape(k);
    const std::unique_ptr<Decoder> decoder =
        make_decoder(gpu, target, &draft, {.context = context, .tree = shape, .max_rows = ops::kTreeMaxNodes});
    Decoder& spec = *decoder;
    if (!cached && k == topks.back()) {
      // A fresh decoder: its caches are scratch until the first generation.
      for (uint32_t rows : kVerifyRows)
        if (rows < context) {
          costs.verify_rows.push_back(rows);
          costs.verify_seconds.push_back(spec.time_pass(false, rows, kTimingRepeats));
        }
      for (uint32_t rows : kDraftRows)
        if (rows < context) {
          costs.draft_rows.push_back(rows);
          costs.draft_seconds.push_back(spec.time_pass(true, rows, kTimingRepeats));
        }
    }
    std::vector<TreeRound> rounds;
    spec.set_tree_observer([&](const TreeRound& r) { rounds.push_back(r); });
    GenerationOptions g;
    g.n_predict = o.tokens_per_prompt;
    g.ignore_eos = true;
    for (const auto& prompt : o.prompts) {
      SpecStats stats;
      spec.generate(prompt, g, stats);
    }
    tables.push_back(acceptance_by_shape(rounds, shape));
    lines += fmt::format("  calibrated top-k {:2} with S{} M{}: {} rounds, {:.2f} accepted per round\n", k, shape.steps,
                         shape.draft_tokens, tables.back().rounds, tables.back().at(shape.steps, shape.draft_tokens));
  }
  if (!cached) save_costs(o, costs, &lines);
  const AutoChoice c = choose_tree_shape(tables, costs);
  if (report) {
    *report += fmt::format("automatic tree: pass costs {} ({}): verify 1 / 8 / 32 / 64 rows {:.2f} / {:.2f} / "
                           "{:.2f} / {:.2f} ms, draft 1 / 8 rows {:.2f} / {:.2f} ms\n",
                           cached ? "from the cache" : "measured", o.cache_dir.empty() ? "not cached" : cache_file(o).string(),
                           1e3 * costs.verify(1), 1e3 * costs.verify(8), 1e3 * costs.verify(32), 1e3 * costs.verify(64),
                           1e3 * costs.draft(1), 1e3 * costs.draft(8));
    *report += lines;
    *report += fmt::format("  chose steps {}, top-k {}, draft tokens {}: {:.2f} accepted per round, "
                           "{:.2f} ms a round, {:.1f} tokens/s expected\n",
                           c.shape.steps, c.shape.topk, c.shape.draft_tokens, c.accepted, 1e3 * c.round_seconds,
                           c.tokens_per_second());
  }
  return c;
}

}  // namespace eaglevk::engine
