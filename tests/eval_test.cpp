// `eaglevk eval` end to end on a 20-line JSONL mixing prompt, messages and MT-bench style
// turns lines (from the tiny pairs' golden prompts): totals equal the sum of per-prompt
// figures, plain decoding matches at temperature 0, acceptance equals `run` for the same
// prompt; malformed datasets are reported by line; --aux-shift-sweep ranks the tap shifts.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <eaglevk/error.h>

#include "support/golden.h"
#include "support/process.h"

namespace eaglevk::testing {
namespace {

namespace fs = std::filesystem;

using Result = CliResult;  // stdout and stderr apart: the acceptance block goes to one, progress to the other

std::string dataset() { return std::string(EAGLEVK_SOURCE_DIR) + "/tests/data/eval_mix.jsonl"; }

TEST(Eval, TotalsBaselineAndAcceptanceAgreeWithRun) {
  fs::path json = fs::temp_directory_path() / fmt::format("eaglevk-eval-{}.json", ::getpid());
  Result r = run_cli_apart(fmt::format("eval -d {} --dataset {} -k 3 -n 16 --baseline --json {}", asset("tiny-llama3-eagle3"),
                                 dataset(), json.string()));
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("mean acceptance length:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("outputs match: 20/20"), std::string::npos) << r.out;
  EXPECT_EQ(r.err.find("validation error"), std::string::npos) << r.err;
  // stderr is not a terminal here: plain progress lines.
  EXPECT_NE(r.err.find("eval: 20/20 prompts"), std::string::npos) << r.err;

  std::ifstream in(json);
  nlohmann::json j = nlohmann::json::parse(in);
  ASSERT_EQ(j["per_prompt"].size(), 20u);
  uint64_t drafts = 0, accepted = 0, proposed = 0, tokens = 0;
  for (const auto& p : j["per_prompt"]) {
    drafts += p["num_drafts"].get<uint64_t>();
    accepted += p["num_accepted_tokens"].get<uint64_t>();
    proposed += p["num_draft_tokens"].get<uint64_t>();
    tokens += p["output_tokens"].get<uint64_t>();
    EXPECT_TRUE(p["matches_baseline"].get<bool>());
    EXPECT_NEAR(p["acceptance_length"].get<double>(),
                1.0 + p["num_accepted_tokens"].get<double>() / std::max(1.0, p["num_drafts"].get<double>()), 1e-9);
  }
  EXPECT_EQ(j["totals"]["num_drafts"].get<uint64_t>(), drafts);
  EXPECT_EQ(j["totals"]["num_accepted_tokens"].get<uint64_t>(), accepted);
  EXPECT_EQ(j["totals"]["num_draft_tokens"].get<uint64_t>(), proposed);
  EXPECT_EQ(j["totals"]["output_tokens"].get<uint64_t>(), tokens);
  EXPECT_TRUE(j["baseline"]["all_outputs_match"].get<bool>());
  // Turns lines generate once per turn, each from its own prompt text.
  EXPECT_GT(j["per_prompt"][15]["output_tokens"].get<uint64_t>(), 16u);
  ASSERT_TRUE(j["per_prompt"][15]["prompt_text"].is_array());
  EXPECT_EQ(j["per_prompt"][15]["prompt_text"].size(), j["per_prompt"][15]["tokens"].size());

  // The same prompt through `run` gives the same acceptance: line 1 (a prompt) and line 11
  // (one user message, which --chat renders the same way).
  std::ifstream lines(dataset());
  std::vector<nlohmann::json> rows;
  for (std::string line; std::getline(lines, line);) rows.push_back(nlohmann::json::parse(line));
  for (size_t index : {0u, 10u}) {
    fs::path prompt = fs::temp_directory_path() / fmt::format("eaglevk-eval-prompt-{}.txt", ::getpid());
    bool chat = rows[index].contains("messages");
    std::ofstream(prompt) << (chat ? rows[index]["messages"][0]["content"].get<std::string>()
                                   : rows[index]["prompt"].get<std::string>());
    Result run = run_cli_apart(fmt::format("run -d {} -k 3 -n 16 -f {} {} --json", asset("tiny-llama3-eagle3"),
                                     prompt.string(), chat ? "--chat" : ""));
    fs::remove(prompt);
    ASSERT_EQ(run.code, 0) << run.err;
    const nlohmann::json run_json = nlohmann::json::parse(run.out.substr(0, run.out.find('\n')));
    const nlohmann::json& stats = run_json["stats"];
    const auto& per = j["per_prompt"][index];
    // Both front doors encode the same text (a raw prompt, or the template's rendering).
    EXPECT_EQ(run_json["prompt_text"], per["prompt_text"]) << "line " << index + 1;
    EXPECT_EQ(stats["num_drafts"], per["num_drafts"]) << "line " << index + 1;
    EXPECT_EQ(stats["num_accepted_tokens"], per["num_accepted_tokens"]) << "line " << index + 1;
  }
  fs::remove(json);
}

TEST(Eval, MalformedDatasets) {
  fs::path bad = fs::temp_directory_path() / fmt::format("eaglevk-eval-bad-{}.jsonl", ::getpid());
  std::ofstream(bad) << "{\"prompt\": \"The modules\"}\n"
                        "{\"turns\": [\"What is os?\"]}\n"
                        "{\"prompt\": \"broken\n"
                        "{\"text\": \"no known field\"}\n"
                        "{\"turns\": []}\n";
  // Skipped with their line numbers by default...
  Result r = run_cli_apart(fmt::format("eval -d {} --dataset {} -n 4", asset("tiny-llama3-eagle3"), bad.string()));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find(":3: skipped: invalid JSON"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(":4: skipped: no 'prompt', 'turns', 'messages' or 'conversations' field"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(":5: skipped: 'turns' is empty"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("eval: 2/2 prompts"), std::string::npos) << r.err;
  // ...fatal with --strict.
  Result s = run_cli_apart(fmt::format("eval -d {} --dataset {} -n 4 --strict", asset("tiny-llama3-eagle3"), bad.string()));
  EXPECT_EQ(s.code, 1);
  EXPECT_NE(s.err.find(":3: invalid JSON"), std::string::npos) << s.err;
  // An empty file yields no prompt: an error.
  std::ofstream(bad, std::ios::trunc) << "\n";
  Result e = run_cli_apart(fmt::format("eval -d {} --dataset {}", asset("tiny-llama3-eagle3"), bad.string()));
  EXPECT_EQ(e.code, 1);
  EXPECT_NE(e.err.find("yields no prompt"), std::string::npos) << e.err;
  fs::remove(bad);
}

// --aux-shift-sweep on pair A with the head configured one layer too shallow (--aux-layers
// 1,3,4; it was trained on the residual streams entering layers 2, 4, 5): the +1 row finds the
// trained taps, the shift-0 row is a plain eval's numbers with the same ids, the rows tap one
// layer shallower and one deeper, and greedy output is the same in every row. (With the
// trained ids configured, +1 is within 0.5% of them over the 20-line mix: adjacent layers'
// streams are alike, which is why the sweep has a noise margin.)
TEST(Eval, AuxShiftSweepFindsTheTrainedTaps) {
  const std::string pid = std::to_string(::getpid());
  fs::path subset = fs::temp_directory_path() / ("eaglevk-eval-sweep-" + pid + ".jsonl");
  fs::path sweep_json = fs::temp_directory_path() / ("eaglevk-eval-sweep-" + pid + ".json");
  fs::path plain_json = fs::temp_directory_path() / ("eaglevk-eval-plain-" + pid + ".json");
  {
    // Two prompt lines and one chat line of the mix: enough rounds to rank the shifts.
    std::ifstream lines(dataset());
    std::ofstream out(subset);
    size_t n = 0;
    for (std::string line; std::getline(lines, line); ++n)
      if (n == 0 || n == 5 || n == 10) out << line << "\n";
  }
  const std::string common =
      fmt::format("eval -d {} --dataset {} -k 3 -n 16 --aux-layers 1,3,4", asset("tiny-llama3-eagle3"), subset.string());
  Result s = run_cli_apart(fmt::format("{} --aux-shift-sweep --json {}", common, sweep_json.string()));
  ASSERT_EQ(s.code, 0) << s.out << s.err;
  EXPECT_NE(s.out.find("configured ids 1,3,4 of 8 layers"), std::string::npos) << s.out;
  EXPECT_NE(s.out.find("best: shift +1"), std::string::npos) << s.out;
  EXPECT_NE(s.out.find("pass --aux-layers 2,4,5"), std::string::npos) << s.out;
  EXPECT_NE(s.out.find("the ranking is noisy"), std::string::npos) << s.out;  // tens of drafts per row
  EXPECT_NE(s.out.find("greedy outputs identical in every row: yes"), std::string::npos) << s.out;
  EXPECT_NE(s.out.find("mean acceptance length:"), std::string::npos) << s.out;
  EXPECT_NE(s.err.find("aux shift -1: draft taps layers 0,2,3"), std::string::npos) << s.err;
  EXPECT_EQ(s.err.find("validation error"), std::string::npos) << s.err;

  Result p = run_cli_apart(fmt::format("{} --json {}", common, plain_json.string()));
  ASSERT_EQ(p.code, 0) << p.err;
  std::ifstream sin(sweep_json), pin(plain_json);
  const nlohmann::json sj = nlohmann::json::parse(sin), pj = nlohmann::json::parse(pin);
  const nlohmann::json& rows = sj["aux_shift_sweep"];
  ASSERT_EQ(rows.size(), 3u) << sj.dump(2);
  const std::vector<std::vector<uint32_t>> ids = {{0, 2, 3}, {1, 3, 4}, {2, 4, 5}};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(rows[i]["shift"].get<int>(), int(i) - 1);
    EXPECT_FALSE(rows[i]["skipped"].get<bool>());
    EXPECT_EQ(rows[i]["aux_layers"].get<std::vector<uint32_t>>(), ids[i]);
    EXPECT_EQ(rows[i]["best"].get<bool>(), i == 2);
    // Same outputs, so the same number of generated tokens in every row.
    EXPECT_EQ(rows[i]["output_tokens"], pj["totals"]["output_tokens"]);
  }
  const nlohmann::json& zero = rows[1];
  for (const char* key : {"num_drafts", "num_draft_tokens", "num_accepted_tokens", "mean_acceptance_length",
                          "acceptance_per_position"}) {
    EXPECT_EQ(zero[key], pj["totals"][key]) << key;
    EXPECT_EQ(sj["totals"][key], pj["totals"][key]) << key;
  }
  for (size_t i : {0u, 1u})
    EXPECT_LT(rows[i]["mean_acceptance_length"].get<double>(), rows[2]["mean_acceptance_length"].get<double>()) << i;

  // Ids at the edges of 0..L: both shifted rows are skipped, saying why.
  Result edge = run_cli_apart(fmt::format("eval -d {} --dataset {} -n 4 --limit 1 --aux-layers 0,4,8 --aux-shift-sweep --json {}",
                                    asset("tiny-llama3-eagle3"), subset.string(), sweep_json.string()));
  ASSERT_EQ(edge.code, 0) << edge.err;
  EXPECT_NE(edge.out.find("skipped: layer 0-1 leaves the range 0..8"), std::string::npos) << edge.out;
  EXPECT_NE(edge.out.find("skipped: layer 8+1 leaves the range 0..8"), std::string::npos) << edge.out;
  EXPECT_NE(edge.out.find("pass --aux-layers 0,4,8"), std::string::npos) << edge.out;
  std::ifstream ein(sweep_json);
  const nlohmann::json ej = nlohmann::json::parse(ein);
  EXPECT_TRUE(ej["aux_shift_sweep"][0]["skipped"].get<bool>());
  EXPECT_FALSE(ej["aux_shift_sweep"][1]["skipped"].get<bool>());
  EXPECT_TRUE(ej["aux_shift_sweep"][2]["skipped"].get<bool>());
  for (const fs::path& f : {subset, sweep_json, plain_json}) fs::remove(f);
}

TEST(Eval, AuxShiftSweepNeedsADraft) {
  Result r = run_cli_apart(fmt::format("eval --dataset {} --aux-shift-sweep", dataset()));
  EXPECT_EQ(r.code, 2);  // a usage error
  EXPECT_NE(r.err.find("--aux-shift-sweep needs a draft (-d)"), std::string::npos) << r.err;
  // Without the sweep the message is the general one.
  Result plain = run_cli_apart(fmt::format("eval --dataset {}", dataset()));
  EXPECT_EQ(plain.code, 2);
  EXPECT_NE(plain.err.find("eval needs a draft (-d)"), std::string::npos) << plain.err;
  Result help = run_cli_apart("eval --help");
  EXPECT_NE(help.out.find("--aux-shift-sweep"), std::string::npos) << help.out;
}

}  // namespace
}  // namespace eaglevk::testing
