// Tree drafting (EAGLE-2 dynamic tree) on both pairs against tree_golden.json (an independent
// PyTorch reference of tree-spec.md): for every configuration and prompt, the output equals
// eaglevk's plain greedy output and the golden tokens; rounds, accepted tokens per round and
// the totals equal the golden ones; the first round's tree equals the golden tree node for
// node. Top-k 1 equals chain drafting exactly.
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/engine/speculative.h"
#include "support/gpu_fixture.h"
#include "support/golden.h"
#include "support/pairs.h"

namespace eaglevk::testing {
namespace {

nlohmann::json tree_golden(const std::string& pair_name) {
  std::ifstream f(asset(pair_name == "A" ? "tiny-llama3-eagle3/tree_golden.json" : "tiny-llama4-eagle3/tree_golden.json"));
  return nlohmann::json::parse(f);
}

engine::GenerationOptions greedy64() {
  engine::GenerationOptions o;
  o.n_predict = 64;
  o.ignore_eos = true;
  return o;
}

engine::TreeParams sglang_params(const nlohmann::json& params) {
  const auto& s = params.at("sglang");
  return engine::TreeParams{s.at("speculative_num_steps").get<uint32_t>(), s.at("speculative_eagle_topk").get<uint32_t>(),
                            s.at("speculative_num_draft_tokens").get<uint32_t>()};
}

class TreeGolden : public GpuTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(TreeGolden, EveryConfigurationMatchesTheReference) {
  Pair& p = pair(GetParam());
  const nlohmann::json golden = tree_golden(GetParam());
  ASSERT_FALSE(golden.at("configs").empty());
  for (const auto& config : golden.at("configs")) {
    const auto& params = config.at("params");
    const engine::TreeParams tree = sglang_params(params);
    // The EAGLE form and SGLang's: S = depth + 1 levels, K, M.
    ASSERT_EQ(tree.steps, params.at("depth").get<uint32_t>() + 1);
    ASSERT_EQ(tree.draft_tokens, params.at("total_tokens").get<uint32_t>());
    const std::string name = fmt::format("pair {} S{} K{} M{}", GetParam(), tree.steps, tree.topk, tree.draft_tokens);
    engine::SpeculativeDecoder spec(gpu(), p.target, p.draft, 512, tree, 64);
    std::vector<uint32_t> accepted_per_round;
    std::vector<engine::TreeRound> rounds;
    spec.set_tree_observer([&](const engine::TreeRound& r) {
      accepted_per_round.push_back(uint32_t(r.accepted_path.size()) - 1);
      if (rounds.empty()) rounds.push_back(r);
    });
    engine::SpecStats total;
    const auto& prompts = config.at("prompts");
    ASSERT_EQ(prompts.size(), p.golden.prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
      const auto& g = prompts[i];
      ASSERT_EQ(g.at("id").get<int>(), p.golden.prompts[i].id);
      accepted_per_round.clear();
      engine::SpecStats stats;
      auto r = spec.generate(p.golden.prompts[i].prompt_ids, greedy64(), stats);
      EXPECT_EQ(r.tokens, p.plain_tokens(i)) << name << " prompt " << i << ": not lossless";
      EXPECT_EQ(r.tokens, g.at("generated_ids").get<std::vector<int32_t>>()) << name << " prompt " << i;
      EXPECT_EQ(accepted_per_round, g.at("accepted_per_round").get<std::vector<uint32_t>>()) << name << " prompt " << i;
      EXPECT_EQ(stats.num_drafts, g.at("num_drafts").get<uint64_t>()) << name << " prompt " << i;
      EXPECT_EQ(stats.num_accepted_tokens, g.at("num_accepted_tokens").get<uint64_t>()) << name << " prompt " << i;
      EXPECT_EQ(stats.accepted_at, g.at("accepted_per_depth").get<std::vector<uint64_t>>()) << name << " prompt " << i;
      total.merge(stats);
    }
    const auto& totals = config.at("totals");
    EXPECT_EQ(total.num_drafts, totals.at("num_drafts").get<uint64_t>()) << name;
    EXPECT_EQ(total.num_draft_tokens, totals.at("num_draft_tokens").get<uint64_t>()) << name;
    EXPECT_EQ(total.num_accepted_tokens, totals.at("num_accepted_tokens").get<uint64_t>()) << name;
    EXPECT_DOUBLE_EQ(total.mean_acceptance_length(), totals.at("mean_acceptance_length").get<double>()) << name;
    EXPECT_EQ(total.accepted_at, totals.at("accepted_per_depth").get<std::vector<uint64_t>>()) << name;

    // Round 1 of prompt 0, node for node.
    const auto& t = config.at("round1_tree_prompt0");
    ASSERT_FALSE(rounds.empty());
    const engine::TreeRound& r1 = rounds.front();
    EXPECT_EQ(r1.base, t.at("P").get<uint32_t>()) << name;
    EXPECT_EQ(r1.tokens, t.at("tokens").get<std::vector<int32_t>>()) << name;
    EXPECT_EQ(r1.parents, t.at("parents").get<std::vector<int32_t>>()) << name;
    EXPECT_EQ(r1.depths, t.at("depths").get<std::vector<int32_t>>()) << name;
    EXPECT_EQ(r1.target_argmax, t.at("target_argmax").get<std::vector<int32_t>>()) << name;
    EXPECT_EQ(r1.accepted_path, t.at("accepted_path").get<std::vector<uint32_t>>()) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Pairs, TreeGolden, ::testing::Values("A", "B"));

// --spec-topk 1 --spec-steps k --spec-draft-tokens k+1 is chain drafting of k tokens: the same
// tokens, rounds, accepted counts and per-position acceptance as -k k.
class TreeTopOne : public GpuTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(TreeTopOne, EqualsTheChain) {
  Pair& p = pair(GetParam());
  for (uint32_t k : {1u, 3u, 5u}) {
    engine::SpeculativeDecoder chain(gpu(), p.target, p.draft, 512, k, 64);
    engine::SpeculativeDecoder tree(gpu(), p.target, p.draft, 512, engine::TreeParams{k, 1, k + 1}, 64);
    for (size_t i = 0; i < p.golden.prompts.size(); ++i) {
      engine::SpecStats cs, ts;
      auto c = chain.generate(p.golden.prompts[i].prompt_ids, greedy64(), cs);
      auto t = tree.generate(p.golden.prompts[i].prompt_ids, greedy64(), ts);
      EXPECT_EQ(t.tokens, c.tokens) << "k " << k << " prompt " << i;
      EXPECT_EQ(ts.num_drafts, cs.num_drafts) << "k " << k << " prompt " << i;
      EXPECT_EQ(ts.num_draft_tokens, cs.num_draft_tokens) << "k " << k << " prompt " << i;
      EXPECT_EQ(ts.num_accepted_tokens, cs.num_accepted_tokens) << "k " << k << " prompt " << i;
      EXPECT_EQ(ts.accepted_at, cs.accepted_at) << "k " << k << " prompt " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Pairs, TreeTopOne, ::testing::Values("A", "B"));

}  // namespace
}  // namespace eaglevk::testing
