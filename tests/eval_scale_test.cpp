// `eaglevk eval` at scale, end to end through the CLI: shards started as a Slurm array and as a
// Kubernetes Indexed Job would start them, merged, give the report of one run; a run killed
// with SIGKILL and resumed gives the report of an uninterrupted one; multi-turn lines keep
// their KV caches and give the tokens of re-prefilling; categories, stop strings, seeds and
// the sampling defaults; bad shard, resume and merge inputs are refused.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <eaglevk/eaglevk.h>

#include "loader/model_files.h"
#include "loader/text_file.h"
#include "support/golden.h"
#include "support/process.h"

namespace eaglevk::testing {
namespace {

namespace fs = std::filesystem;

using Result = CliResult;

fs::path temp(const std::string& name) { return fs::temp_directory_path() / fmt::format("eaglevk-scale-{}-{}", ::getpid(), name); }

// Eight lines of the eval mix (prompts, one-message chats and two-turn conversations, one of
// them in ShareGPT form) with categories, written once per process.
std::string dataset() {
  static const fs::path path = [] {
    std::ifstream in(std::string(EAGLEVK_SOURCE_DIR) + "/tests/data/eval_mix.jsonl");
    std::vector<nlohmann::json> rows;
    for (std::string line; std::getline(in, line);) rows.push_back(nlohmann::json::parse(line));
    const std::vector<std::pair<size_t, const char*>> pick = {{0, "writing"}, {10, "chat"}, {15, "multi-turn"},
                                                              {1, "writing"}, {11, "chat"}, {16, "multi-turn"},
                                                              {2, "coding"},  {17, ""}};
    fs::path p = temp("data.jsonl");
    std::ofstream out(p);
    for (auto [index, category] : pick) {
      nlohmann::json row = rows[index];
      if (*category) row["category"] = category;
      if (index == 17) {  // the same turns as ShareGPT conversations, answers dropped
        nlohmann::json conv = nlohmann::json::array();
        for (const auto& t : row["turns"]) {
          conv.push_back({{"from", "human"}, {"value", t}});
          conv.push_back({{"from", "gpt"}, {"value", "an answer the model does not see"}});
        }
        row = {{"conversations", conv}};
      }
      out << row.dump() << "\n";
    }
    return p;
  }();
  // Removed when the process ends (the tests write every other file under temp() themselves).
  static const struct RemoveAtExit {
    fs::path p;
    ~RemoveAtExit() {
      std::error_code ignored;
      fs::remove(p, ignored);
    }
  } remove_at_exit{path};
  return path.string();
}

std::string common() {
  return fmt::format("eval -d {} --dataset {} -k 3 -n 8", asset("tiny-llama3-eagle3"), dataset());
}

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

// A report without its timings, which no two runs share.
nlohmann::json untimed(nlohmann::json j) {
  j.erase("timing");
  auto strip = [](nlohmann::json& block) {
    block.erase("seconds");
    block.erase("tokens_per_second");
  };
  strip(j["totals"]);
  for (auto& [name, block] : j["per_category"].items()) strip(block);
  for (auto& r : j["per_prompt"]) r.erase("seconds");
  return j;
}

// The report of one uninterrupted, unsharded run, computed once.
const nlohmann::json& single_run() {
  static const nlohmann::json report = [] {
    const fs::path json = temp("single.json");
    Result r = run_cli_apart(fmt::format("{} --json {}", common(), json.string()));
    EXPECT_EQ(r.code, 0) << r.err;
    nlohmann::json j = read_json(json);
    fs::remove(json);
    return j;
  }();
  return report;
}

TEST(EvalScale, ShardsFromSlurmAndKubernetesMergeIntoTheSingleRun) {
  const nlohmann::json& one = single_run();
  ASSERT_EQ(one["per_prompt"].size(), 8u);
  // A Slurm array --array=1-3: task ids 1..3.
  std::vector<std::string> reports;
  for (int id = 1; id <= 3; ++id) {
    const fs::path json = temp(fmt::format("slurm{}.json", id));
    Result r = run_cli_apart(fmt::format("{} --shard auto --json {}", common(), json.string()),
                       fmt::format("SLURM_ARRAY_TASK_ID={} SLURM_ARRAY_TASK_MIN=1 SLURM_ARRAY_TASK_COUNT=3", id));
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.err.find(fmt::format("shard {}/3", id - 1)), std::string::npos) << r.err;
    const nlohmann::json j = read_json(json);
    for (const auto& p : j["per_prompt"]) EXPECT_EQ(p["index"].get<size_t>() % 3, size_t(id - 1));
    reports.push_back(json.string());
  }
  const fs::path merged = temp("merged.json");
  // In any order.
  Result m = run_cli_apart(fmt::format("eval-merge {} {} {} -o {}", reports[2], reports[0], reports[1], merged.string()));
  ASSERT_EQ(m.code, 0) << m.err;
  EXPECT_NE(m.out.find("merged 3 shards, 8 prompts"), std::string::npos) << m.out;
  nlohmann::json want = untimed(one), got = untimed(read_json(merged));
  EXPECT_EQ(got["shards"].size(), 3u);
  want.erase("shards");
  got.erase("shards");
  EXPECT_EQ(got, want);
  // The printed block is the single run's too.
  Result again = run_cli_apart(common());
  EXPECT_NE(m.out.find(again.out.substr(0, again.out.find("category"))), std::string::npos) << m.out << again.out;

  // A Kubernetes Indexed Job of 2 completions.
  std::vector<std::string> k8s;
  for (int index = 0; index < 2; ++index) {
    const fs::path json = temp(fmt::format("k8s{}.json", index));
    Result r = run_cli_apart(fmt::format("{} --shard auto --shard-count 2 --json {}", common(), json.string()),
                       fmt::format("JOB_COMPLETION_INDEX={}", index));
    ASSERT_EQ(r.code, 0) << r.err;
    k8s.push_back(json.string());
  }
  Result mk = run_cli_apart(fmt::format("eval-merge {} {} -o {}", k8s[0], k8s[1], merged.string()));
  ASSERT_EQ(mk.code, 0) << mk.err;
  got = untimed(read_json(merged));
  got.erase("shards");
  EXPECT_EQ(got, want);

  // Refusals: a missing shard, a shard twice, shards of different splits, not a report.
  Result missing = run_cli_apart(fmt::format("eval-merge {} {}", reports[0], reports[1]));
  EXPECT_EQ(missing.code, 1);
  EXPECT_NE(missing.err.find("eaglevk: error: shard 2/3 is missing"), std::string::npos) << missing.err;
  Result twice = run_cli_apart(fmt::format("eval-merge {} {} {}", reports[0], reports[0], reports[1]));
  EXPECT_NE(twice.err.find("given twice"), std::string::npos) << twice.err;
  Result mixed = run_cli_apart(fmt::format("eval-merge {} {}", reports[0], k8s[1]));
  EXPECT_NE(mixed.err.find("split into"), std::string::npos) << mixed.err;
  Result notreport = run_cli_apart(fmt::format("eval-merge {}", dataset()));
  EXPECT_EQ(notreport.code, 1);
  EXPECT_NE(notreport.err.find("eaglevk: error:"), std::string::npos) << notreport.err;
  for (const auto& r : reports) fs::remove(r);
  for (const auto& r : k8s) fs::remove(r);
  fs::remove(merged);
}

// deploy/slurm's scripts, run by bash with the environment Slurm gives an array's tasks
// (sbatch reads the #SBATCH lines; bash sees comments), then the merge script.
TEST(EvalScale, SlurmScriptsRunAsAnArrayWould) {
  const std::string deploy = std::string(EAGLEVK_SOURCE_DIR) + "/deploy/slurm";
  const fs::path out = temp("slurm-out");
  fs::remove_all(out);
  const std::string env = fmt::format("EAGLEVK={} MODEL={} DRAFT={} DATASET={} OUT={} EVAL_ARGS='-k 3 -n 8'", EAGLEVK_CLI,
                                      asset("tiny-llama3"), asset("tiny-llama3-eagle3"), dataset(), out.string());
  for (int task = 0; task < 2; ++task) {
    ProcessResult p = run_process(fmt::format(
        "{} SLURM_ARRAY_TASK_ID={} SLURM_ARRAY_TASK_MIN=0 SLURM_ARRAY_TASK_COUNT=2 bash {}/eval.sbatch 2>&1", env, task,
        deploy));
    ASSERT_EQ(p.code, 0) << p.out;
  }
  ProcessResult m = run_process(fmt::format("{} bash {}/merge.sbatch", env, deploy));
  ASSERT_EQ(m.code, 0) << m.out;
  nlohmann::json got = untimed(read_json(out / "merged.json")), want = untimed(single_run());
  got.erase("shards");
  want.erase("shards");
  // The scripts name the model folder; the single run takes the bundled one by default.
  got["config"].erase("model");
  want["config"].erase("model");
  EXPECT_EQ(got, want);
  fs::remove_all(out);
}

size_t count_lines(const fs::path& p) {
  std::ifstream in(p);
  size_t n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

TEST(EvalScale, KilledRunResumesToTheSameReport) {
  const fs::path resume = temp("resume.jsonl"), json = temp("resumed.json");
  fs::remove(resume);
  // Started directly (exec), so that SIGKILL hits eaglevk itself, once two prompts are recorded.
  const std::string command = fmt::format("exec {} {} --resume {} 2>/dev/null >/dev/null", EAGLEVK_CLI, common(),
                                          resume.string());
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(5);
  while (count_lines(resume) < 3 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the run ended before it was killed";
  const size_t recorded = count_lines(resume) - 1;
  ASSERT_GE(recorded, 2u);
  ASSERT_LT(recorded, 8u);

  Result r = run_cli_apart(fmt::format("{} --resume {} --json {}", common(), resume.string(), json.string()));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find(fmt::format("{} of 8 prompts already done", recorded)), std::string::npos) << r.err;
  EXPECT_EQ(untimed(read_json(json)), untimed(single_run()));
  EXPECT_EQ(count_lines(resume), 9u);

  // A last line cut short (a kill during the write) is dropped; nothing is evaluated again.
  std::ofstream(resume, std::ios::app) << "{\"index\": 3, \"line\": ";
  Result cut = run_cli_apart(fmt::format("{} --resume {} --json {}", common(), resume.string(), json.string()));
  ASSERT_EQ(cut.code, 0) << cut.err;
  EXPECT_NE(cut.err.find("dropping the unfinished last line 10"), std::string::npos) << cut.err;
  EXPECT_NE(cut.err.find("8 of 8 prompts already done"), std::string::npos) << cut.err;
  EXPECT_EQ(untimed(read_json(json)), untimed(single_run()));

  // Another configuration, another shard, a file of something else: refused with the reason.
  Result other = run_cli_apart(fmt::format("{} --resume {} --ctx 1024", common(), resume.string()));
  EXPECT_EQ(other.code, 1);
  EXPECT_NE(other.err.find("eaglevk: error: --resume " + resume.string() +
                           " was written by another configuration: 'ctx' is 2048 there and 1024 here"),
            std::string::npos)
      << other.err;
  Result shard = run_cli_apart(fmt::format("{} --resume {} --shard 1/2", common(), resume.string()));
  EXPECT_EQ(shard.code, 1);
  EXPECT_NE(shard.err.find("holds shard"), std::string::npos) << shard.err;
  Result foreign = run_cli_apart(fmt::format("{} --resume {}", common(), dataset()));
  EXPECT_EQ(foreign.code, 1);
  EXPECT_NE(foreign.err.find("not an eval --resume header"), std::string::npos) << foreign.err;
  fs::remove(resume);
  fs::remove(json);
}

// Turns keep their caches: the same tokens as prefilling every turn from its start, with the
// first turn's prompt and answer taken from the cache.
TEST(EvalScale, TurnsKeepTheirCachesAndEqualReprefilling) {
  const fs::path json = temp("noreuse.json");
  Result r = run_cli_apart(fmt::format("{} --no-kv-reuse --json {}", common(), json.string()));
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json fresh = read_json(json);
  const nlohmann::json& reused = single_run();
  for (size_t i = 0; i < 8; ++i) {
    const auto& a = reused["per_prompt"][i];
    const auto& b = fresh["per_prompt"][i];
    EXPECT_EQ(a["tokens"], b["tokens"]) << "prompt " << i;
    EXPECT_EQ(a["num_accepted_tokens"], b["num_accepted_tokens"]) << "prompt " << i;
    EXPECT_EQ(b["reused_tokens"], 0) << "prompt " << i;
    const bool turns = a["tokens"][0].is_array();
    if (turns) {
      // The second turn's prompt starts with the first turn's prompt and answer.
      EXPECT_GT(a["reused_tokens"].get<size_t>(), a["prompt_tokens"].get<size_t>() / 3) << "prompt " << i;
      EXPECT_EQ(a["tokens"].size(), 2u);
      EXPECT_EQ(a["stop_reason"].size(), 2u);
    } else {
      EXPECT_EQ(a["reused_tokens"], 0) << "a line's first generation starts a new sequence";
    }
  }
  EXPECT_EQ(reused["config"]["kv_reuse"], true);
  EXPECT_EQ(fresh["config"]["kv_reuse"], false);
  fs::remove(json);
}

TEST(EvalScale, CategoriesStopStringsAndSamplingDefaults) {
  const nlohmann::json& one = single_run();
  // Categories: each one's counters, and together the totals.
  ASSERT_EQ(one["per_category"].size(), 5u);  // chat, coding, multi-turn, writing, (none)
  uint64_t drafts = 0, tokens = 0;
  for (const auto& [name, block] : one["per_category"].items()) {
    drafts += block["num_drafts"].get<uint64_t>();
    tokens += block["output_tokens"].get<uint64_t>();
  }
  EXPECT_EQ(drafts, one["totals"]["num_drafts"].get<uint64_t>());
  EXPECT_EQ(tokens, one["totals"]["output_tokens"].get<uint64_t>());
  EXPECT_EQ(one["per_category"]["writing"]["prompts"], 2);
  Result printed = run_cli_apart(common());
  EXPECT_NE(printed.out.find("multi-turn"), std::string::npos) << printed.out;
  EXPECT_EQ(one["config"]["seed"], 0) << "greedy decoding draws nothing";
  for (const auto& p : one["per_prompt"])
    for (const auto& reason : p["stop_reason"].is_array() ? p["stop_reason"] : nlohmann::json::array({p["stop_reason"]}))
      EXPECT_TRUE(reason == "length" || reason == "eos") << reason;

  // --stop: a piece of the first prompt's output text ends it there.
  loader::ModelFiles files = loader::open_model_files(asset("tiny-llama3"));
  loader::Tokenizer tok = loader::load_tokenizer(files);
  const std::vector<int32_t> full = one["per_prompt"][0]["tokens"].get<std::vector<int32_t>>();
  const std::string text = tok.decode(full, true);
  ASSERT_GT(text.size(), 12u) << text;
  const std::string stop = text.substr(text.size() / 2, 3);
  const fs::path json = temp("stop.json");
  Result s = run_cli_apart(fmt::format("{} --limit 1 --stop '{}' --stop 'never there' --json {}", common(), stop, json.string()));
  ASSERT_EQ(s.code, 0) << s.err;
  const nlohmann::json j = read_json(json);
  EXPECT_EQ(j["per_prompt"][0]["stop_reason"], "stop");
  const std::vector<int32_t> cut = j["per_prompt"][0]["tokens"].get<std::vector<int32_t>>();
  ASSERT_LE(cut.size(), full.size());
  ASSERT_FALSE(cut.empty());
  EXPECT_TRUE(std::equal(cut.begin(), cut.end(), full.begin()));
  EXPECT_NE(tok.decode(cut, true).find(stop), std::string::npos);
  EXPECT_EQ(tok.decode(std::vector<int32_t>(cut.begin(), cut.end() - 1), true).find(stop), std::string::npos)
      << "the generation went on past its stop string";

  // T > 0: a random seed unless given (printed and recorded), drafts drawn from the draft by
  // default, and a baseline that reports speed without demanding equal samples.
  Result t = run_cli_apart(fmt::format("{} --limit 2 --temp 0.8 --baseline --json {}", common(), json.string()));
  ASSERT_EQ(t.code, 0) << t.err;
  const size_t at = t.err.find("eaglevk: seed ");
  ASSERT_NE(at, std::string::npos) << t.err;
  const uint64_t seed = std::stoull(t.err.substr(at + 14));
  nlohmann::json tj = read_json(json);
  EXPECT_EQ(tj["config"]["seed"].get<uint64_t>(), seed);
  EXPECT_EQ(tj["config"]["draft_sampling"], true);
  EXPECT_NE(t.out.find("speed-up"), std::string::npos) << t.out;
  EXPECT_EQ(t.out.find("outputs match"), std::string::npos) << t.out;
  EXPECT_GT(tj["baseline"]["output_tokens"].get<uint64_t>(), 0u);
  Result g = run_cli_apart(fmt::format("{} --limit 1 --temp 0.8 --seed 3 --greedy-drafts --json {}", common(), json.string()));
  ASSERT_EQ(g.code, 0) << g.err;
  EXPECT_EQ(g.err.find("eaglevk: seed"), std::string::npos) << "a given seed is not announced";
  EXPECT_EQ(read_json(json)["config"]["draft_sampling"], false);
  fs::remove(json);
}

std::vector<nlohmann::json> json_lines(const std::string& out) {
  std::vector<nlohmann::json> rows;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] == '{') rows.push_back(nlohmann::json::parse(line));
  return rows;
}

// `run --chat -i` with two lines piped in: three answers, each turn after the first continuing
// the caches; the last equals running the whole conversation from --messages.
TEST(RunChat, InteractiveTurnsEqualTheWholeConversation) {
  const std::string draft = asset("tiny-llama3-eagle3");
  Result r = run_cli_apart(fmt::format("run --chat -i -p 'Hello' -n 8 -d {} --json", draft),
                     "printf 'Tell me more.\\nAnd then?\\n' |");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::vector<nlohmann::json> turns = json_lines(r.out);
  ASSERT_EQ(turns.size(), 3u) << r.out;
  EXPECT_EQ(turns[0]["reused_tokens"], 0);
  EXPECT_GT(turns[1]["reused_tokens"].get<size_t>(), turns[0]["prompt_tokens"].size() / 2);
  EXPECT_GT(turns[2]["reused_tokens"].get<size_t>(), turns[1]["prompt_tokens"].size() / 2);
  const nlohmann::json messages = nlohmann::json::array({{{"role", "user"}, {"content", "Hello"}},
                                                         {{"role", "assistant"}, {"content", turns[0]["text"]}},
                                                         {{"role", "user"}, {"content", "Tell me more."}},
                                                         {{"role", "assistant"}, {"content", turns[1]["text"]}},
                                                         {{"role", "user"}, {"content", "And then?"}}});
  const fs::path file = temp("chat.json");
  std::ofstream(file) << messages.dump();
  Result whole = run_cli_apart(fmt::format("run --messages {} -n 8 -d {} --json", file.string(), draft));
  ASSERT_EQ(whole.code, 0) << whole.err;
  const std::vector<nlohmann::json> w = json_lines(whole.out);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0]["prompt_tokens"], turns[2]["prompt_tokens"]);
  EXPECT_EQ(w[0]["tokens"], turns[2]["tokens"]);
  EXPECT_EQ(w[0]["reused_tokens"], 0);
  fs::remove(file);
  Result bad = run_cli_apart("run -i -p 'Hello'");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("needs --chat"), std::string::npos) << bad.err;
  Result taps = run_cli_apart(fmt::format("run --chat -i -p 'Hello' -d {} --dump-taps /dev/null", draft));
  EXPECT_EQ(taps.code, 2);
  EXPECT_NE(taps.err.find("not with --interactive"), std::string::npos) << taps.err;
}

// --logprobs in run and eval: one entry per generated token, the token's own; eval's records
// carry them through a resume file.
TEST(RunChat, LogprobsInRunAndEval) {
  Result r = run_cli_apart(fmt::format("run -p 'The modules' -n 8 -d {} --logprobs 3 --json", asset("tiny-llama3-eagle3")));
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = json_lines(r.out).at(0);
  ASSERT_EQ(j["logprobs"].size(), j["tokens"].size());
  for (size_t i = 0; i < j["tokens"].size(); ++i) {
    EXPECT_EQ(j["logprobs"][i]["token"], j["tokens"][i]);
    EXPECT_EQ(j["logprobs"][i]["top"].size(), 3u);
    EXPECT_EQ(j["logprobs"][i]["top"][0][0], j["tokens"][i]);
  }
  EXPECT_EQ(run_cli_apart("run -p 'x' --logprobs 3").code, 2) << "--logprobs needs --json";
  const fs::path resume = temp("lp.jsonl"), json = temp("lp.json");
  fs::remove(resume);
  Result e = run_cli_apart(fmt::format("{} --limit 3 --logprobs 2 --resume {} --json {}", common(), resume.string(), json.string()));
  ASSERT_EQ(e.code, 0) << e.err;
  const nlohmann::json first = read_json(json);
  for (const auto& rec : first["per_prompt"]) {
    ASSERT_TRUE(rec.contains("logprobs"));
    EXPECT_EQ(rec["logprobs"].size(), rec["tokens"].size());
  }
  Result again = run_cli_apart(fmt::format("{} --limit 3 --logprobs 2 --resume {} --json {}", common(), resume.string(), json.string()));
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_EQ(untimed(read_json(json)), untimed(first)) << "the records round-trip through the resume file";
  fs::remove(resume);
  fs::remove(json);
}

// `run --stop`: the text ends before the stop string, which is not printed; the reason is
// in the JSON.
TEST(RunChat, StopStringEndsTheTextBeforeIt) {
  Result full = run_cli_apart("run -p 'The modules' -n 16 --json");
  ASSERT_EQ(full.code, 0) << full.err;
  const std::string text = json_lines(full.out).at(0)["text"];
  ASSERT_GT(text.size(), 10u);
  const std::string stop = text.substr(text.size() / 2, 3);
  ASSERT_EQ(stop.find('\''), std::string::npos);
  const std::string before = text.substr(0, text.find(stop));
  Result cut = run_cli_apart(fmt::format("run -p 'The modules' -n 16 --stop '{}' --json", stop));
  const nlohmann::json j = json_lines(cut.out).at(0);
  EXPECT_EQ(j["text"], before);
  EXPECT_EQ(j["stop_reason"], "stop");
  Result streamed = run_cli_apart(fmt::format("run -p 'The modules' -n 16 --stop '{}'", stop));
  EXPECT_EQ(streamed.out, before + "\n");
}

// `bench` reports each measurement on stderr as it finishes, and its results on stdout.
TEST(Bench, ShowsProgressAndReportsEveryTest) {
  Result r = run_cli_apart(fmt::format("bench -p 16 -n 8 -r 2 -d {} -o json", asset("tiny-llama3-eagle3")));
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* line : {"bench: warm-up pp16 done", "bench: pp16 1/2: ", "bench: tg8 2/2: ", "bench: spec-tg8 k=3 2/2: "})
    EXPECT_NE(r.err.find(line), std::string::npos) << line << "\n" << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 4u) << r.out;  // pp, tg, spec-tg, then the load
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(j[i]["samples"].size(), 2u);
    EXPECT_GT(j[i]["tokens_per_s"].get<double>(), 0);
  }
  EXPECT_EQ(j[2]["test"], "spec-tg8 k=3");
  EXPECT_EQ(j[3]["test"], "load");
  // --depth: the decode tests start after that much context, and say so.
  Result d = run_cli_apart(fmt::format("bench -p 0 -n 8 -r 1 --depth 40 -d {} -o json", asset("tiny-llama3-eagle3")));
  ASSERT_EQ(d.code, 0) << d.err;
  const nlohmann::json dj = nlohmann::json::parse(d.out);
  EXPECT_EQ(dj[0]["test"], "tg8 @ d40");
  EXPECT_EQ(dj[0]["depth"], 40);
  EXPECT_EQ(dj[1]["test"], "spec-tg8 @ d40 k=3");
}

// bench --profile: per-token command counts against the model's own layer count (config.json,
// read here), GPU time per family adding up to the total, host time per speculative round, replayed
// decode steps.
TEST(Bench, ProfileCountsEachCommandPerToken) {
  Result r = run_cli_apart(
      fmt::format("bench -p 0 -n 8 -r 1 --depth 20 --profile -d {} -o json", asset("tiny-llama3-eagle3")));
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  const nlohmann::json config = nlohmann::json::parse(loader::read_text_file(asset("tiny-llama3") + "/config.json", 1 << 20, "config"));
  const double layers = config["num_hidden_layers"].get<double>();
  ASSERT_EQ(j.size(), 5u) << r.out;  // tg, spec-tg, load, then the two profiles
  const nlohmann::json& plain = j[3];
  const nlohmann::json& spec = j[4];
  EXPECT_EQ(plain["test"], "profile tg8 @ d20");
  EXPECT_EQ(spec["test"], "profile spec-tg8 @ d20 k=3");
  EXPECT_EQ(plain["tokens"], 9);  // the last context token's step, then 8 decode steps
  auto per_token = [&](const nlohmann::json& p, const std::string& suffix) {
    double n = 0;
    for (const auto& c : p["commands"])
      if (c["command"].get<std::string>().ends_with(suffix)) n += c["count_per_token"].get<double>();
    return n;
  };
  // One step of plain decoding: each layer's qkv (with rope and the KV write folded in: the
  // matvec_rope kernels) and gate/up products, one lm_head; the norms before them are dispatches
  // of their own, or folded into the products (the profile's fold.norms), never anything between.
  EXPECT_DOUBLE_EQ(per_token(plain, " qkv"), layers);
  double folded_qkv = 0;
  for (const auto& c : plain["commands"])
    if (c["command"].get<std::string>().starts_with("matvec_rope_")) folded_qkv += c["count_per_token"].get<double>();
  EXPECT_DOUBLE_EQ(folded_qkv, layers);
  EXPECT_DOUBLE_EQ(per_token(plain, " rope_kv_write"), 0.0);
  EXPECT_DOUBLE_EQ(per_token(plain, " gate_up"), layers);
  EXPECT_DOUBLE_EQ(per_token(plain, " lm_head"), 1.0);
  const double norms = per_token(plain, " attn_norm");
  EXPECT_TRUE(norms == 0 || norms == layers) << norms;
  EXPECT_DOUBLE_EQ(per_token(plain, " ffn_norm"), norms);
  double sum = 0, count = 0;
  for (const auto& c : plain["commands"]) {
    sum += c["gpu_ms_per_token"].get<double>();
    count += c["count_per_token"].get<double>();
  }
  EXPECT_NEAR(sum, plain["gpu_ms_per_token"].get<double>(), 1e-6 * std::max(1.0, sum));
  EXPECT_NEAR(count, plain["commands_per_token"].get<double>(), 1e-9);
  // Every step replays the commands recorded for the context's last token (a one-row pass like
  // them): no host recording per token. Speculative rounds are still recorded each time.
  EXPECT_EQ(plain["replayed_submissions"], plain["submissions"]);
  EXPECT_EQ(plain["host_record_ms_per_token"].get<double>(), 0.0);
  EXPECT_EQ(spec["replayed_submissions"], 0);
  // Speculative rounds verify several tokens a pass: fewer target norms per token than layers.
  EXPECT_GT(spec["rounds"].get<double>(), 0);
  EXPECT_GT(spec["host_record_ms_per_round"].get<double>(), 0);
  EXPECT_LT(per_token(spec, " qkv"), layers);
  // The table prints each run's own totals (it once printed the last run's under both).
  Result md = run_cli_apart(fmt::format("bench -p 0 -n 4 -r 1 --profile -d {}", asset("tiny-llama3-eagle3")));
  ASSERT_EQ(md.code, 0) << md.err;
  const size_t plain_at = md.out.find("tg4 profile ("), spec_at = md.out.find("spec-tg4 k=3 (");
  ASSERT_NE(plain_at, std::string::npos) << md.out;
  ASSERT_NE(spec_at, std::string::npos) << md.out;
  const std::string plain_table = md.out.substr(plain_at, spec_at - plain_at);
  const size_t qkv_end = plain_table.find(" qkv\n");
  ASSERT_NE(qkv_end, std::string::npos) << plain_table;
  const size_t qkv_line = plain_table.rfind('\n', qkv_end) + 1;
  const std::string qkv = plain_table.substr(qkv_line, qkv_end - qkv_line);
  EXPECT_NE(qkv.find(fmt::format(" {:.1f} ", layers)), std::string::npos) << plain_table;
  EXPECT_NE(qkv.find(" matvec_rope_"), std::string::npos) << plain_table;
  EXPECT_EQ(plain_table.find("draft_"), std::string::npos) << plain_table;
}

TEST(Cli, VersionIsTheLibrarys) {
  Result r = run_cli_apart("--version");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, fmt::format("eaglevk {}\n", eaglevk_version()));
}

TEST(EvalScale, BadShardAndFlagValues) {
  const std::vector<std::pair<std::string, std::string>> usage = {
      {"--shard 3/2", "shard 3 does not exist among 2"},
      {"--shard 0/0", "the shard count must be at least 1"},
      {"--shard 1", "--shard must be i/N"},
      {"--shard -1/2", "--shard must be i/N"},
      {"--shard auto", "found neither a Slurm array"},
      {"--shard 0/2 --shard-count 2", "--shard-count is for --shard auto"},
      {"--shard 0/2 --temp 0.5", "needs --seed"},
      {"--draft-sampling --greedy-drafts", "opposite schemes"},
      {"--stop ''", "a stop string is empty"},
  };
  for (const auto& [flags, words] : usage) {
    Result r = run_cli_apart(fmt::format("{} {}", common(), flags));
    EXPECT_EQ(r.code, 2) << flags << ": " << r.err;
    EXPECT_NE(r.err.find("eaglevk: error: "), std::string::npos) << flags << ": " << r.err;
    EXPECT_NE(r.err.find(words), std::string::npos) << flags << ": " << r.err;
  }
  Result k8s = run_cli_apart(fmt::format("{} --shard auto", common()), "JOB_COMPLETION_INDEX=0");
  EXPECT_EQ(k8s.code, 2);
  EXPECT_NE(k8s.err.find("needs --shard-count"), std::string::npos) << k8s.err;
  Result slurm = run_cli_apart(fmt::format("{} --shard auto", common()), "SLURM_ARRAY_TASK_ID=x SLURM_ARRAY_TASK_COUNT=2");
  EXPECT_EQ(slurm.code, 2);
  EXPECT_NE(slurm.err.find("SLURM_ARRAY_TASK_ID='x' is not a whole number"), std::string::npos) << slurm.err;
  // A category that is not a name: skipped with the reason, or with --strict an error.
  const fs::path bad = temp("badcat.jsonl");
  std::ofstream(bad) << "{\"prompt\": \"hello\", \"category\": 7}\n{\"prompt\": \"hello there\"}\n";
  Result skipped = run_cli_apart(fmt::format("eval -d {} --dataset {} -n 2", asset("tiny-llama3-eagle3"), bad.string()));
  EXPECT_EQ(skipped.code, 0) << skipped.err;
  EXPECT_NE(skipped.err.find(":1: skipped: 'category' must be a string"), std::string::npos) << skipped.err;
  Result strict = run_cli_apart(fmt::format("eval -d {} --dataset {} -n 2 --strict", asset("tiny-llama3-eagle3"), bad.string()));
  EXPECT_EQ(strict.code, 1);
  EXPECT_NE(strict.err.find("eaglevk: error: " + bad.string() + ":1: 'category' must be a string"), std::string::npos)
      << strict.err;
  fs::remove(bad);
}

}  // namespace
}  // namespace eaglevk::testing
