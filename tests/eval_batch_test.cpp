// `eval --batch B` (continuous batching: B sequences in the slots of one engine::Decoder) against --batch 1 (one
// sequence at a time, one line after another): on both tiny pairs (B = 2 and 8, 3 and 8; 4 in
// the context-end and T > 0 cases), every record's tokens, acceptance counts, stop reasons and
// reused prompt rows are the same, over more lines than slots (single prompts, chats and
// two-turn conversations that continue in their slot), with sequences reaching the end of a
// short context at different rounds, and at T > 0 under both sampling schemes with logprobs
// and stop strings. Bad --batch values are refused.
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "support/golden.h"
#include "support/process.h"

namespace eaglevk::testing {
namespace {

namespace fs = std::filesystem;

fs::path temp(const std::string& name) {
  return fs::temp_directory_path() / fmt::format("eaglevk-batch-{}-{}", ::getpid(), name);
}

// Device memory for pair A's weights and passes (18.6 + 102.9 MiB in the memory plan) and two
// sequences of 2,048 tokens (4,608 bytes of KV a token: 9 MiB each), not three.
constexpr const char* kTwoSequences = "144M";

std::string mix() { return std::string(EAGLEVK_SOURCE_DIR) + "/tests/data/eval_mix.jsonl"; }

// The JSON report of one eval run.
nlohmann::json eval_json(const std::string& args, uint32_t batch) {
  const fs::path json = temp(fmt::format("b{}.json", batch));
  CliResult r = run_cli_apart(fmt::format("eval {} --batch {} --json {}", args, batch, json.string()));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err.find("Validation"), std::string::npos) << r.err;
  std::ifstream in(json);
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  fs::remove(json);
  EXPECT_FALSE(j.is_discarded()) << r.err;
  return j;
}

// What must not depend on the batch: each record less its time, and the totals.
nlohmann::json outcome(const nlohmann::json& report) {
  nlohmann::json records = nlohmann::json::array();
  for (nlohmann::json r : report["per_prompt"]) {
    r.erase("seconds");
    records.push_back(r);
  }
  nlohmann::json totals = report["totals"];
  totals.erase("seconds");
  totals.erase("tokens_per_second");
  return {{"records", records}, {"totals", totals}};
}

// Runs --batch 1 and each of `batches`, and compares.
void expect_batch_invariant(const std::string& args, std::vector<uint32_t> batches, size_t expected_records) {
  const nlohmann::json one = eval_json(args, 1);
  ASSERT_EQ(one["per_prompt"].size(), expected_records);
  EXPECT_EQ(one["timing"]["batch"], 1);
  uint64_t drafted = 0;
  for (const auto& r : one["per_prompt"]) drafted += r["num_draft_tokens"].get<uint64_t>();
  EXPECT_GT(drafted, 0u);  // the drafts really ran
  const nlohmann::json want = outcome(one);
  for (uint32_t b : batches) {
    SCOPED_TRACE(fmt::format("--batch {}", b));
    const nlohmann::json got = eval_json(args, b);
    EXPECT_EQ(got["timing"]["batch"], b);
    EXPECT_EQ(outcome(got), want);
  }
}

TEST(EvalBatch, PairAGreedyEqualsOneAtATime) {
  // Every other line of the mix, 10: prompts, chat messages and two-turn conversations (the
  // second turn continues from the slot's caches), more lines than slots.
  expect_batch_invariant(fmt::format("-m {} -d {} --dataset {} --chat -k 3 -n 16 --shard 0/2", asset("tiny-llama3"),
                                     asset("tiny-llama3-eagle3"), mix()),
                         {2, 8}, 10);
}

TEST(EvalBatch, PairBGreedyEqualsOneAtATime) {
  // Llama-4 MoE target (chunked attention, NoPE temperature tuning) and a head on layers 1, 3, 6.
  expect_batch_invariant(fmt::format("-m {} -d {} --dataset {} --chat -k 4 -n 16 --shard 1/2", asset("tiny-llama4"),
                                     asset("tiny-llama4-eagle3"), mix()),
                         {3, 8}, 10);
}

TEST(EvalBatch, SequencesReachingTheContextEndAtDifferentRounds) {
  // A 96-token context: prompts of different lengths run out of room (stop reason "context")
  // while their neighbours still draft, and the last rounds shorten k per sequence.
  const nlohmann::json one = eval_json(fmt::format("-m {} -d {} --dataset {} --chat -k 5 -n 200 --ctx 96 --limit 8",
                                                   asset("tiny-llama3"), asset("tiny-llama3-eagle3"), mix()),
                                       1);
  size_t at_context = 0;
  for (const auto& r : one["per_prompt"])
    for (const auto& reason :
         r["stop_reason"].is_array() ? r["stop_reason"] : nlohmann::json::array({r["stop_reason"]}))
      at_context += reason == "context";
  EXPECT_GE(at_context, 2u) << one["per_prompt"].dump();
  const nlohmann::json got = eval_json(fmt::format("-m {} -d {} --dataset {} --chat -k 5 -n 200 --ctx 96 --limit 8",
                                                   asset("tiny-llama3"), asset("tiny-llama3-eagle3"), mix()),
                                       4);
  EXPECT_EQ(outcome(got), outcome(one));
}

TEST(EvalBatch, SampledDraftsAndGreedyDraftsAtTemperatureEqualOneAtATime) {
  // Draws are keyed by seed, position and stream, so a batch draws what one sequence draws.
  const std::string common = fmt::format("-m {} -d {} --dataset {} --chat -k 3 -n 16 --shard 1/3 --temp 0.9 --seed 11",
                                         asset("tiny-llama3"), asset("tiny-llama3-eagle3"), mix());
  expect_batch_invariant(common, {3}, 7);
  expect_batch_invariant(common + " --greedy-drafts --logprobs 2 --stop \" the\"", {4}, 7);
}

TEST(EvalBatch, BadBatchValuesAreRefused) {
  const std::string base =
      fmt::format("eval -d {} --dataset {} -n 4 --limit 2", asset("tiny-llama3-eagle3"), mix());
  struct Case {
    std::string args, message;
  } cases[] = {
      {"--batch 65", "--batch is at most 64"},
      {"--batch 2 --spec-steps 3 --spec-topk 2 --spec-draft-tokens 6", "--batch 2 is for chain drafting"},
      {"--batch 4 --baseline", "--baseline compares one prompt at a time"},
      {"--batch -1", "--batch"},
  };
  for (const Case& c : cases) {
    CliResult r = run_cli_apart(fmt::format("{} {}", base, c.args));
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find("eaglevk: error:"), std::string::npos) << r.err;
  }
}

// Each sequence holds a context of KV cache: with device memory for about two, the default batch
// (8) shrinks to what fits (same outputs) and an explicit --batch that does not fit is refused with
// what it needs.
TEST(EvalBatch, MemoryDecidesTheBatch) {
  const std::string args = fmt::format("-m {} -d {} --dataset {} -k 3 -n 8 --limit 3 --ctx 2048", asset("tiny-llama3"),
                                       asset("tiny-llama3-eagle3"), mix());
  const fs::path json = temp("memory.json");
  CliResult r = run_cli_apart(fmt::format("eval {} --json {}", args, json.string()),
                              fmt::format("EAGLEVK_DEVICE_MEMORY={}", kTwoSequences));
  ASSERT_EQ(r.code, 0) << r.err;
  std::ifstream in(json);
  const nlohmann::json j = nlohmann::json::parse(in);
  fs::remove(json);
  EXPECT_EQ(j["timing"]["batch"], 2) << r.err;
  EXPECT_EQ(outcome(j), outcome(eval_json(args, 1)));
  // With the host's memory the default is 8.
  CliResult plenty = run_cli_apart(fmt::format("eval {} --json {}", args, json.string()));
  ASSERT_EQ(plenty.code, 0) << plenty.err;
  std::ifstream again(json);
  EXPECT_EQ(nlohmann::json::parse(again)["timing"]["batch"], 8);
  fs::remove(json);
  CliResult refused = run_cli_apart(fmt::format("eval {} --batch 4", args),
                                    fmt::format("EAGLEVK_DEVICE_MEMORY={}", kTwoSequences));
  EXPECT_EQ(refused.code, 1) << refused.err;
  EXPECT_NE(refused.err.find("--batch 4: 4 sequences of 2048 tokens need"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("EAGLEVK_DEVICE_MEMORY"), std::string::npos) << refused.err;
}

}  // namespace
}  // namespace eaglevk::testing
