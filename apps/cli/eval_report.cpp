#include "apps/cli/eval_report.h"

#include <algorithm>

#include <fmt/core.h>

#include <eaglevk/error.h>

namespace eaglevk::cli {
namespace {

nlohmann::json stats_json(const engine::SpecStats& s) {
  return {{"num_drafts", s.num_drafts},
          {"num_draft_tokens", s.num_draft_tokens},
          {"num_accepted_tokens", s.num_accepted_tokens},
          {"accepted_at", s.accepted_at},
          {"rounds_by_accepted", s.rounds_by_accepted}};
}

// The block of counters and rates that the totals and every category have.
nlohmann::json totals_json(const EvalTotals& t) {
  nlohmann::json j = stats_json(t.stats);
  j["prompts"] = t.prompts;
  j["output_tokens"] = t.output_tokens;
  j["mean_acceptance_length"] = t.stats.mean_acceptance_length();
  j["acceptance_per_position"] = t.stats.acceptance_per_position();
  j["seconds"] = t.seconds;
  j["tokens_per_second"] = t.seconds > 0 ? t.output_tokens / t.seconds : 0.0;
  return j;
}

template <typename T>
T field(const nlohmann::json& j, const char* name) {
  if (!j.contains(name)) fail("a record without '{}'", name);
  try {
    return j.at(name).get<T>();
  } catch (const nlohmann::json::exception&) {
    fail("a record whose '{}' is not what eval writes", name);
  }
}

}  // namespace

nlohmann::json logprobs_json(const std::vector<engine::TokenLogprobs>& logprobs) {
  nlohmann::json out = nlohmann::json::array();
  for (const engine::TokenLogprobs& t : logprobs) {
    nlohmann::json top = nlohmann::json::array();
    for (auto [id, lp] : t.top) top.push_back({id, lp});
    out.push_back({{"token", t.token}, {"logprob", t.logprob}, {"top", top}});
  }
  return out;
}

nlohmann::json record_to_json(const EvalRecord& r) {
  nlohmann::json j = {{"index", r.index},
                      {"line", r.line},
                      {"output_tokens", r.output_tokens},
                      {"prompt_tokens", r.prompt_tokens},
                      {"reused_tokens", r.reused_tokens},
                      {"acceptance_length", r.stats.mean_acceptance_length()},
                      {"seconds", r.seconds}};
  j.update(stats_json(r.stats));
  if (!r.category.empty()) j["category"] = r.category;
  // One generation: a list of ids and one reason; a `turns` line: one of each per turn.
  if (r.turns) {
    j["tokens"] = r.tokens;
    j["stop_reason"] = r.stop_reasons;
    if (!r.prompt_texts.empty()) j["prompt_text"] = r.prompt_texts;
  } else {
    j["tokens"] = r.tokens.empty() ? std::vector<int32_t>{} : r.tokens[0];
    j["stop_reason"] = r.stop_reasons.empty() ? std::string() : r.stop_reasons[0];
    if (!r.prompt_texts.empty()) j["prompt_text"] = r.prompt_texts[0];
  }
  if (!r.logprobs.is_null()) j["logprobs"] = r.turns ? r.logprobs : r.logprobs.at(0);
  if (r.has_baseline) {
    j["baseline_seconds"] = r.baseline_seconds;
    j["baseline_tokens"] = r.baseline_tokens;
    j["matches_baseline"] = r.matches_baseline;
  }
  return j;
}

EvalRecord record_from_json(const nlohmann::json& j) {
  if (!j.is_object()) fail("a record that is not a JSON object");
  EvalRecord r;
  r.index = field<size_t>(j, "index");
  r.line = field<size_t>(j, "line");
  r.output_tokens = field<size_t>(j, "output_tokens");
  r.prompt_tokens = field<size_t>(j, "prompt_tokens");
  r.reused_tokens = field<size_t>(j, "reused_tokens");
  r.seconds = field<double>(j, "seconds");
  r.stats.num_drafts = field<uint64_t>(j, "num_drafts");
  r.stats.num_draft_tokens = field<uint64_t>(j, "num_draft_tokens");
  r.stats.num_accepted_tokens = field<uint64_t>(j, "num_accepted_tokens");
  r.stats.accepted_at = field<std::vector<uint64_t>>(j, "accepted_at");
  r.stats.rounds_by_accepted = field<std::vector<uint64_t>>(j, "rounds_by_accepted");
  r.stats.total_output_tokens = r.output_tokens;
  if (j.contains("category")) r.category = field<std::string>(j, "category");
  r.turns = j.contains("tokens") && j["tokens"].is_array() && !j["tokens"].empty() && j["tokens"][0].is_array();
  if (r.turns) {
    r.tokens = field<std::vector<std::vector<int32_t>>>(j, "tokens");
    r.stop_reasons = field<std::vector<std::string>>(j, "stop_reason");
  } else {
    r.tokens = {field<std::vector<int32_t>>(j, "tokens")};
    r.stop_reasons = {field<std::string>(j, "stop_reason")};
  }
  // Records written before eval reported the prompt text have none.
  if (j.contains("prompt_text"))
    r.prompt_texts = r.turns ? field<std::vector<std::string>>(j, "prompt_text")
                             : std::vector<std::string>{field<std::string>(j, "prompt_text")};
  if (j.contains("logprobs")) {
    if (!j["logprobs"].is_array()) fail("a record whose 'logprobs' is not what eval writes");
    r.logprobs = r.turns ? j["logprobs"] : nlohmann::json::array({j["logprobs"]});
  }
  if (j.contains("baseline_seconds")) {
    r.has_baseline = true;
    r.baseline_seconds = field<double>(j, "baseline_seconds");
    r.baseline_tokens = field<size_t>(j, "baseline_tokens");
    r.matches_baseline = field<bool>(j, "matches_baseline");
  }
  return r;
}

EvalTotals totals_of(const std::vector<EvalRecord>& records) {
  EvalTotals t;
  for (const EvalRecord& r : records) {
    t.stats.merge(r.stats);
    ++t.prompts;
    t.output_tokens += r.output_tokens;
    t.seconds += r.seconds;
    t.matched += r.matches_baseline;
    t.baseline_tokens += r.baseline_tokens;
    t.baseline_seconds += r.baseline_seconds;
  }
  return t;
}

std::map<std::string, EvalTotals> totals_by_category(const std::vector<EvalRecord>& records) {
  std::map<std::string, std::vector<EvalRecord>> groups;
  for (const EvalRecord& r : records) groups[r.category].push_back(r);
  std::map<std::string, EvalTotals> out;
  for (const auto& [name, group] : groups) out[name] = totals_of(group);
  return out;
}

nlohmann::json report_to_json(const EvalReport& r, bool baseline) {
  const EvalTotals t = totals_of(r.records);
  nlohmann::json j;
  j["config"] = r.config;
  // The fields earlier versions wrote at the top, kept where scripts read them.
  for (const char* key : {"dataset", "model", "draft", "k", "tree", "temperature", "seed"})
    if (r.config.contains(key)) j[key] = r.config[key];
  nlohmann::json shards = nlohmann::json::array();
  for (const EvalShard& s : r.shards) shards.push_back({{"index", s.index}, {"count", s.count}});
  j["shards"] = shards;
  j["device"] = r.device;
  j["prompts"] = r.records.size();
  j["dataset_prompts"] = r.dataset_prompts;
  j["skipped_lines"] = r.skipped_lines;
  j["totals"] = totals_json(t);
  j["timing"] = {{"wall_seconds", r.wall_seconds},
                 {"batch", r.batch},
                 {"generation_seconds", t.seconds},
                 {"output_tokens_per_second", t.seconds > 0 ? t.output_tokens / t.seconds : 0.0}};
  nlohmann::json categories = nlohmann::json::object();
  for (const auto& [name, ct] : totals_by_category(r.records)) categories[name.empty() ? "(none)" : name] = totals_json(ct);
  j["per_category"] = categories;
  if (baseline) {
    j["baseline"] = {{"seconds", t.baseline_seconds},
                     {"output_tokens", t.baseline_tokens},
                     {"tokens_per_second", t.baseline_seconds > 0 ? t.baseline_tokens / t.baseline_seconds : 0.0},
                     {"speedup", baseline_speedup(t)},
                     {"all_outputs_match", t.matched == t.prompts},
                     {"matching_prompts", t.matched}};
  }
  nlohmann::json per = nlohmann::json::array();
  for (const EvalRecord& rec : r.records) per.push_back(record_to_json(rec));
  j["per_prompt"] = per;
  return j;
}

double baseline_speedup(const EvalTotals& t) {
  // Rates, not times: at T > 0 the two decoders may stop after different numbers of tokens.
  const double spec = t.seconds > 0 ? t.output_tokens / t.seconds : 0;
  const double plain = t.baseline_seconds > 0 ? t.baseline_tokens / t.baseline_seconds : 0;
  return plain > 0 ? spec / plain : 0;
}

std::string report_text(const EvalReport& r, bool baseline, double temperature) {
  const EvalTotals t = totals_of(r.records);
  engine::SpecStats block = t.stats;
  block.total_output_tokens = t.output_tokens;
  std::string s = block.block();
  const auto categories = totals_by_category(r.records);
  if (categories.size() > 1 || (categories.size() == 1 && !categories.begin()->first.empty())) {
    s += fmt::format("\n{:<24} {:>7} {:>9} {:>7} {:>8}  acceptance per position\n", "category", "prompts", "tokens",
                     "AL", "tok/s");
    for (const auto& [name, ct] : categories) {
      std::string rates;
      for (double v : ct.stats.acceptance_per_position()) rates += fmt::format(" {:.2f}", v);
      s += fmt::format("{:<24} {:>7} {:>9} {:>7.2f} {:>8.1f} {}\n", name.empty() ? "(none)" : name.substr(0, 24),
                       ct.prompts, ct.output_tokens, ct.stats.mean_acceptance_length(),
                       ct.seconds > 0 ? ct.output_tokens / ct.seconds : 0.0, rates);
    }
    s += fmt::format("{:<24} {:>7} {:>9} {:>7.2f} {:>8.1f}\n", "all", t.prompts, t.output_tokens,
                     t.stats.mean_acceptance_length(), t.seconds > 0 ? t.output_tokens / t.seconds : 0.0);
  }
  if (baseline) {
    s += fmt::format("baseline: {:.1f} tokens/s plain ({} tokens), {:.1f} tokens/s speculative, speed-up {:.2f}x", 
                     t.baseline_seconds > 0 ? t.baseline_tokens / t.baseline_seconds : 0.0, t.baseline_tokens,
                     t.seconds > 0 ? t.output_tokens / t.seconds : 0.0, baseline_speedup(t));
    // Equal outputs are the promise at temperature 0 only; at T > 0 both are samples.
    if (temperature == 0)
      s += fmt::format("; outputs match: {}/{}\n", t.matched, t.prompts);
    else
      s += "\n";
  }
  return s;
}

}  // namespace eaglevk::cli
