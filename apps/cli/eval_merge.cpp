// `eaglevk eval-merge`: combines the --json reports of the shards of one evaluation (eval
// --shard i/N, e.g. a Slurm array or a Kubernetes Indexed Job) into the report one process
// would have written: the same configuration, the records of every prompt in dataset order,
// and totals and categories computed from them as eval computes its own. Reports agree when
// their settings and their inputs' fingerprints do (eval_fingerprints.h), whatever paths named
// the inputs: the merged report records the first report's paths.
#include <set>
#include <sstream>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <eaglevk/error.h>

#include "apps/cli/commands.h"
#include "apps/cli/eval_fingerprints.h"
#include "apps/cli/eval_report.h"
#include "apps/cli/usage.h"
#include "loader/json_excerpt.h"
#include "loader/output_file.h"
#include "loader/text_file.h"

namespace eaglevk::cli {
namespace {

struct MergeArgs {
  std::vector<std::string> inputs;
  std::string out;
};

nlohmann::json read_report(const std::string& path) {
  nlohmann::json j = nlohmann::json::parse(loader::read_text_file(path), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) fail("{}: not JSON (eval --json writes the reports to merge)", path);
  if (loader::json_nested_deeper_than(j, 64) || !j.is_object() || !j.contains("config") || !j["config"].is_object() ||
      !j.contains("shards") || !j["shards"].is_array() || !j.contains("per_prompt") || !j["per_prompt"].is_array())
    fail("{}: not a report of eval --json (no config, shards and per_prompt)", path);
  return j;
}

int merge_command(const MergeArgs& a) {
  if (a.inputs.empty()) usage_fail("eval-merge needs the shards' reports (eval --json files)");
  if (!a.out.empty())
    if (std::string p = loader::output_problem(a.out, "--json"); !p.empty()) fail("{}", p);
  EvalReport merged;
  std::set<uint32_t> shard_indices;
  std::set<size_t> indices;
  std::set<std::string> devices;
  uint32_t shard_count = 0;
  for (const std::string& path : a.inputs) {
    const nlohmann::json j = read_report(path);
    // Every report, the first too: one without fingerprints cannot show which models it ran.
    const std::string why = config_difference(j["config"], merged.config.is_null() ? j["config"] : merged.config);
    if (!why.empty()) {
      if (merged.config.is_null()) fail("{}: {}", path, why);
      fail("{} (there) and {} (here) come from different configurations: {}", path, a.inputs[0], why);
    }
    if (!merged.config.is_null())
      for (const std::string& note : moved_inputs(j["config"], merged.config))
        fmt::print(stderr, "eaglevk: {} (there) and {} (here): {}\n", path, a.inputs[0], note);
    if (merged.config.is_null()) {
      merged.config = j["config"];
      merged.dataset_prompts = j.value("dataset_prompts", size_t(0));
      merged.skipped_lines = j.value("skipped_lines", size_t(0));
    }
    for (const nlohmann::json& s : j["shards"]) {
      EvalShard shard{s.value("index", 0u), s.value("count", 0u)};
      if (shard_count && shard.count != shard_count)
        fail("{}: shard {}/{} is from a split into {} and the others into {}", path, shard.index, shard.count,
             shard.count, shard_count);
      shard_count = shard.count;
      if (!shard_indices.insert(shard.index).second) fail("{}: shard {}/{} is given twice", path, shard.index, shard.count);
      merged.shards.push_back(shard);
    }
    for (const nlohmann::json& r : j["per_prompt"]) {
      EvalRecord record;
      try {
        record = record_from_json(r);
      } catch (const Error& e) {
        fail("{}: {}", path, e.what());
      }
      if (!indices.insert(record.index).second) fail("{}: prompt {} is in two reports", path, record.index);
      merged.records.push_back(std::move(record));
    }
    if (j.contains("device") && j["device"].is_string()) devices.insert(j["device"].get<std::string>());
    if (j.contains("timing") && j["timing"].is_object()) {
      merged.wall_seconds = std::max(merged.wall_seconds, j["timing"].value("wall_seconds", 0.0));
      merged.batch = std::max(merged.batch, j["timing"].value("batch", 1u));
    }
  }
  for (uint32_t i = 0; i < shard_count; ++i)
    if (!shard_indices.count(i)) fail("shard {}/{} is missing: merge every shard's report", i, shard_count);
  if (indices.size() != merged.dataset_prompts)
    fail("the reports hold {} prompts but the dataset has {}", indices.size(), merged.dataset_prompts);
  std::sort(merged.records.begin(), merged.records.end(),
            [](const EvalRecord& x, const EvalRecord& y) { return x.index < y.index; });
  std::sort(merged.shards.begin(), merged.shards.end(), [](const EvalShard& x, const EvalShard& y) { return x.index < y.index; });
  for (const std::string& d : devices) merged.device += (merged.device.empty() ? "" : "; ") + d;
  const bool baseline = merged.config.value("baseline", false);
  fmt::print("merged {} shards, {} prompts\n{}", shard_count, merged.records.size(),
             report_text(merged, baseline, merged.config.value("temperature", 0.0)));
  if (!a.out.empty()) {
    const nlohmann::json report = report_to_json(merged, baseline);
    loader::write_output_file(a.out, [&](std::ostream& out) { out << report.dump(2) << "\n"; });
  }
  return 0;
}

}  // namespace

void add_eval_merge_command(CLI::App& app) {
  auto args = std::make_shared<MergeArgs>();
  CLI::App* sub = app.add_subcommand("eval-merge", "Combine the --json reports of eval's shards into one report");
  sub->footer("Example: eaglevk eval-merge shard-0.json shard-1.json -o merged.json");
  sub->add_option("reports", args->inputs, "the shards' eval --json files")->required();
  sub->add_option("-o,--json", args->out, "write the merged report here");
  register_runner(sub, [args] { return merge_command(*args); });
}

}  // namespace eaglevk::cli
