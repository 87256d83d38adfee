#pragma once
// What `eaglevk eval` writes and `eaglevk eval-merge` reads: one record per evaluated prompt,
// and the report built from a set of records. Shards, resumed runs and single runs all build
// their totals from the records with the same function, in dataset order, so merging the
// shards of a dataset gives the totals of one run over it.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <eaglevk/eaglevk.hpp>  // engine::SpecStats and engine::TokenLogprobs, as the facade reports them

namespace eaglevk::cli {

// One prompt's results: a generation per turn (one for `prompt` and `messages` lines).
struct EvalRecord {
  size_t index = 0, line = 0;  // in the dataset's prompts (0-based), and in its file (1-based)
  std::string category;        // empty: none
  bool turns = false;          // several generations: tokens and stop reasons are lists
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::string> prompt_texts;  // per generation: what was encoded (the rendered chat or the raw prompt)
  std::vector<std::string> stop_reasons;  // "eos", "length", "stop" or "context", per generation
  engine::SpecStats stats;
  size_t output_tokens = 0, prompt_tokens = 0, reused_tokens = 0;
  double seconds = 0;
  bool has_baseline = false;
  double baseline_seconds = 0;
  size_t baseline_tokens = 0;
  bool matches_baseline = true;
  nlohmann::json logprobs;     // with --logprobs: one list per generation (logprobs_json), else null
};

// Token log-probabilities as run --json and eval --json write them: one object per token,
// {"token", "logprob", "top": [[id, logprob], ...]}.
nlohmann::json logprobs_json(const std::vector<engine::TokenLogprobs>& logprobs);

nlohmann::json record_to_json(const EvalRecord& r);
// Refuses a record that is not one (a resume file or a shard's report from elsewhere).
EvalRecord record_from_json(const nlohmann::json& j);

// The settings that decide a run's outputs; a resume file and the shards of a merge must
// agree on all of them.
struct EvalShard {
  uint32_t index = 0, count = 1;
};

struct EvalReport {
  nlohmann::json config;           // eval's settings (drafting, sampling, seed, ...), inputs and their fingerprints
  std::vector<EvalShard> shards;   // the shards whose records these are
  std::string device;
  size_t dataset_prompts = 0;      // prompts in the dataset (after --limit), every shard together
  size_t skipped_lines = 0;
  std::vector<EvalRecord> records; // sorted by index
  double wall_seconds = 0;
  uint32_t batch = 1;              // sequences decoded together (the largest of merged shards)
};

// Totals of a set of records.
struct EvalTotals {
  engine::SpecStats stats;
  size_t prompts = 0, output_tokens = 0, matched = 0, baseline_tokens = 0;
  double seconds = 0, baseline_seconds = 0;
};
EvalTotals totals_of(const std::vector<EvalRecord>& records);
// Speculative over plain output tokens per second (0 without a baseline).
double baseline_speedup(const EvalTotals& t);
// By category, in name order ("" for records without one).
std::map<std::string, EvalTotals> totals_by_category(const std::vector<EvalRecord>& records);

// The report as eval --json writes it.
nlohmann::json report_to_json(const EvalReport& r, bool baseline);
// What eval prints: the acceptance block, the per-category table when there are categories,
// the baseline line.
std::string report_text(const EvalReport& r, bool baseline, double temperature);

}  // namespace eaglevk::cli
