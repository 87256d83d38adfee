// --spec-draft-tokens auto (runtime/engine/tree_auto.h): the acceptance table read off a
// calibration tree, the choice between shapes given pass costs, and the table checked against
// the device: the first round of a real smaller tree accepts exactly what the calibration
// tree's table says it would.
#include <cmath>

#include <fmt/format.h>

#include "runtime/engine/tree_auto.h"
#include "support/decoding.h"
#include "support/gpu_fixture.h"
#include "support/pairs.h"

namespace eaglevk::testing {
namespace {

// A calibration round of shape S2 K2 M5 (pool 2 + 4 = 6, so the two worst candidates are not
// verified). Node: token, parent, depth, score. The target's argmax follows 0 -> 2 -> 4.
//   0 root (argmax 20)
//   1 token 10, parent 0, depth 1, score -0.5   (argmax 99)
//   2 token 20, parent 0, depth 1, score -1.0   (argmax 41)
//   3 token 30, parent 1, depth 2, score -1.2
//   4 token 41, parent 2, depth 2, score -1.6   (argmax 7: the bonus)
engine::TreeRound verified_tree(std::vector<int32_t> tokens, std::vector<int32_t> parents, std::vector<int32_t> depths,
                                std::vector<float> scores, std::vector<int32_t> target_argmax) {
  engine::TreeRound r;
  r.tokens = std::move(tokens);
  r.parents = std::move(parents);
  r.depths = std::move(depths);
  r.scores = std::move(scores);
  r.target_argmax = std::move(target_argmax);
  return r;
}

engine::TreeRound calibration_round() {
  return verified_tree({5, 10, 20, 30, 41}, {-1, 0, 0, 1, 2}, {0, 1, 1, 2, 2}, {0.0f, -0.5f, -1.0f, -1.2f, -1.6f},
                       {20, 99, 41, 1, 7});
}

TEST(TreeAuto, AcceptanceOfEverySmallerTree) {
  const engine::TreeParams shape{2, 2, 5};
  engine::AcceptanceTable t = engine::acceptance_by_shape({calibration_round(), calibration_round()}, shape);
  EXPECT_EQ(t.rounds, 2u);
  // Depth 1 only: both level-1 candidates were verified (pool 2), so every M is known.
  EXPECT_EQ(t.at(1, 2), 0.0);  // the best node (10) is not the argmax
  EXPECT_EQ(t.at(1, 3), 1.0);  // with 20 the walk takes one step
  EXPECT_EQ(t.at(1, 5), 1.0);
  // Depth 2: the best nodes by score are 1, 2, 3, 4.
  EXPECT_EQ(t.at(2, 3), 1.0);  // {1, 2}
  EXPECT_EQ(t.at(2, 4), 1.0);  // {1, 2, 3}: 30 hangs under 10
  EXPECT_EQ(t.at(2, 5), 2.0);  // {1, 2, 3, 4}: 20 then 41
  // Outside the calibrated shape: unknown.
  EXPECT_TRUE(std::isnan(t.at(3, 4)));
  EXPECT_TRUE(std::isnan(t.at(2, 6)));
  // A tree shrunk at the end of the context is not counted.
  engine::TreeRound shrunk = calibration_round();
  shrunk.tokens.pop_back();
  EXPECT_EQ(engine::acceptance_by_shape({shrunk}, shape).rounds, 0u);
}

TEST(TreeAuto, UnverifiedCandidatesMakeBiggerTreesUnknown) {
  // S3 K2 M5: verified are both depth-1 candidates, one of depth 2 (of its 4) and one of
  // depth 3. A depth-2 tree of 4 nodes would need a second depth-2 candidate the calibration
  // never verified: unknown. Depth 1 (pool 2, all verified) is known for every M.
  const engine::TreeRound r = verified_tree({5, 10, 20, 30, 40}, {-1, 0, 0, 1, 3}, {0, 1, 1, 2, 3},
                                            {0.0f, -0.2f, -1.0f, -0.4f, -0.6f}, {10, 30, 4, 40, 8});
  engine::AcceptanceTable t = engine::acceptance_by_shape({r}, {3, 2, 5});
  EXPECT_EQ(t.at(1, 5), 1.0);
  EXPECT_EQ(t.at(2, 4), 2.0);  // {1, 3, 2}: 10 then 30
  EXPECT_TRUE(std::isnan(t.at(2, 5)));
  EXPECT_EQ(t.at(3, 5), 3.0);
}

engine::PassCosts costs(double verify_base, double verify_per_row, double draft_seconds) {
  engine::PassCosts c;
  for (uint32_t rows : {1u, 2u, 4u, 8u, 16u, 32u, 64u}) {
    c.verify_rows.push_back(rows);
    c.verify_seconds.push_back(verify_base + verify_per_row * rows);
    c.draft_rows.push_back(rows);
    c.draft_seconds.push_back(draft_seconds);
  }
  return c;
}

TEST(TreeAuto, ChoosesByAcceptedTokensPerSecond) {
  const engine::AcceptanceTable t = engine::acceptance_by_shape({calibration_round()}, {2, 2, 5});
  // Verifying more rows costs nothing (a GPU far from its limits), drafts are free: the
  // largest acceptance wins, and of equal ones the smaller tree: S2 M5 accepts 2.
  engine::AutoChoice gpu = engine::choose_tree_shape({t}, costs(1.0, 0.0, 0.0));
  EXPECT_EQ(gpu.shape.steps, 2u);
  EXPECT_EQ(gpu.shape.topk, 2u);
  EXPECT_EQ(gpu.shape.draft_tokens, 5u);
  EXPECT_DOUBLE_EQ(gpu.accepted, 2.0);
  EXPECT_DOUBLE_EQ(gpu.tokens_per_second(), 3.0);
  // Every row costs as much as the pass itself (a CPU device): (1 + a) / (1 + m): S1 M3 gives
  // 2 / 4, S2 M5 gives 3 / 6, equal; S1 M2 gives 1 / 3. The smaller tree of the tie wins.
  engine::AutoChoice cpu = engine::choose_tree_shape({t}, costs(0.0, 1.0, 0.0));
  EXPECT_EQ(cpu.shape.steps, 1u);
  EXPECT_EQ(cpu.shape.draft_tokens, 3u);
  // Expensive draft passes penalise depth: with draft passes of 10 s, S1 M3 (2 / (10 + 1))
  // beats S2 M5 (3 / (10 + 10 + 1)).
  engine::AutoChoice slow_draft = engine::choose_tree_shape({t}, costs(1.0, 0.0, 10.0));
  EXPECT_EQ(slow_draft.shape.steps, 1u);
  EXPECT_EQ(slow_draft.shape.draft_tokens, 3u);
  EXPECT_THROW(engine::choose_tree_shape({}, costs(1.0, 0.0, 0.0)), std::exception);
}

// The premise of the table on the device: a smaller tree's nodes are the calibration tree's
// best by score within its depth, so the first round of a real (S', K, M') tree accepts what
// the calibration's first round says.
TEST_F(GpuTest, TheTablePredictsTheFirstRoundOfEverySmallerTree) {
  for (const char* name : {"A", "B"}) {
    Pair& p = pair(name);
    const engine::TreeParams wide{6, 4, 40};
    engine::GenerationOptions o;
    o.n_predict = 4;
    o.ignore_eos = true;
    uint64_t checked = 0, accepted_somewhere = 0;
    for (size_t i : {0u, 9u}) {
      const auto& prompt = p.golden.prompts[i].prompt_ids;
      auto first_round = [&](const engine::TreeParams& shape) {
        engine::Decoder spec = tree_decoder(p.target, p.draft, 256, shape, 64);
        std::vector<engine::TreeRound> rounds;
        spec.set_tree_observer([&](const engine::TreeRound& r) { rounds.push_back(r); });
        engine::SpecStats stats;
        spec.generate(prompt, o, stats);
        return rounds.at(0);
      };
      const engine::AcceptanceTable t = engine::acceptance_by_shape({first_round(wide)}, wide);
      for (const engine::TreeParams& small : std::vector<engine::TreeParams>{{1, 4, 4}, {2, 4, 6}, {3, 4, 10}, {6, 4, 20},
                                                                             {6, 4, 33}}) {
        const engine::TreeRound r = first_round(small);
        const double predicted = t.at(small.steps, small.draft_tokens);
        ASSERT_FALSE(std::isnan(predicted)) << name << " S" << small.steps << " M" << small.draft_tokens;
        EXPECT_EQ(double(r.accepted_path.size() - 1), predicted)
            << name << " prompt " << i << " S" << small.steps << " M" << small.draft_tokens;
        ++checked;
        if (r.accepted_path.size() > 2) ++accepted_somewhere;
      }
    }
    EXPECT_EQ(checked, 10u);
    EXPECT_GT(accepted_somewhere, 2u) << "the comparison must include trees that accept more than one token";
  }
}

}  // namespace
}  // namespace eaglevk::testing
