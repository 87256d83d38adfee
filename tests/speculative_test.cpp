// EAGLE-3 on pair A (tiny-llama3 + tiny-llama3-eagle3): lossless to the bit against eaglevk's
// own plain greedy output for k = 1, 3, 5 on the first 3 golden prompts (every one with
// EAGLEVK_GOLDEN_ALL=1) and 2, 8 on one; acceptance within 5% of golden.json's on the same
// prompts; verify logits equal decode logits bitwise; the rollback edge cases.
#include <cmath>

#include <fmt/format.h>

#include "models/eagle3.h"
#include "models/target.h"
#include "runtime/engine/generate.h"
#include "runtime/engine/decoder.h"
#include "support/decoding.h"
#include "support/target_runner.h"
#include "support/gpu_fixture.h"
#include "support/golden.h"
#include "support/pairs.h"

namespace eaglevk::testing {
namespace {

// Pair A by default; the members mirror the pair so the tests read plainly.
struct PairA : GpuTest {
  static void SetUpTestSuite() {
    Pair& p = pair("A");
    target = &p.target;
    draft = &p.draft;
    golden = &p.golden;
  }
  static const std::vector<int32_t>& plain_tokens(size_t i) { return pair("A").plain_tokens(i); }
  static models::TargetModel* target;
  static models::Eagle3Model* draft;
  static Golden* golden;
};
models::TargetModel* PairA::target = nullptr;
models::Eagle3Model* PairA::draft = nullptr;
Golden* PairA::golden = nullptr;

TEST_F(PairA, DraftUsesTheDefaultTapLayers) {
  EXPECT_EQ(draft->aux_layers, (std::vector<uint32_t>{2, 4, 5}));
  EXPECT_TRUE(draft->aux_layers_default);
  EXPECT_EQ(draft->config.format, "eagle3");
  EXPECT_EQ(draft->config.draft_vocab_size, 1024);
}

// k = 1, 3, 5 (golden.json has their acceptance per prompt); k = 2 and 8, which it has not,
// for losslessness. The k = 3 rounds include ones that reject every draft and ones that accept
// every draft, so both rollback paths ran.
TEST_F(PairA, LosslessAndAcceptanceForEveryK) {
  Pair& p = pair("A");
  const size_t prompts = golden_prompts_to_decode(3, p.golden.prompts.size());
  check_lossless_and_acceptance(p, {1, 5}, prompts);
  const engine::SpecStats k3 = check_lossless_and_acceptance(p, {3}, prompts).front();
  ASSERT_EQ(k3.rounds_by_accepted.size(), 4u);
  EXPECT_GT(k3.rounds_by_accepted[0], 0u);
  EXPECT_GT(k3.rounds_by_accepted[3], 0u);
  for (uint32_t k : {2u, 8u}) expect_lossless(p, p.draft, k, golden_prompts_to_decode(1, p.golden.prompts.size()));
}

}  // namespace
}  // namespace eaglevk::testing

namespace eaglevk::testing {
namespace {

engine::GenerationOptions greedy(uint32_t n, std::vector<int32_t> eos = {}) {
  engine::GenerationOptions o;
  o.n_predict = n;
  o.eos_ids = std::move(eos);
  o.ignore_eos = false;
  return o;
}

// An end-of-sequence token inside a run of accepted drafts stops output right after it, as
// plain decoding does.
TEST_F(PairA, EosInsideAcceptedDrafts) {
  engine::Decoder runner = plain_decoder(*target, 512, 64);
  for (size_t i : {0u, 9u}) {
    const auto& full = plain_tokens(i);
    for (size_t stop_at : {5u, 30u}) {
      std::vector<int32_t> eos = {full[stop_at]};
      auto want = testing::generate(runner, golden->prompts[i].prompt_ids, greedy(64, eos)).tokens;
      ASSERT_LE(want.size(), stop_at + 1);
      EXPECT_EQ(want.back(), full[stop_at]);
      for (uint32_t k : {3u, 5u}) {
        engine::Decoder spec = chain_decoder(*target, *draft, 512, k, 64);
        engine::SpecStats stats;
        auto r = spec.generate(golden->prompts[i].prompt_ids, greedy(64, eos), stats);
        EXPECT_EQ(r.tokens, want) << "prompt " << i << " eos at " << stop_at << " k " << k;
        EXPECT_TRUE(r.stopped_at_eos);
      }
    }
  }
}

// -n reached in the middle of a round: exactly n tokens, the plain ones.
TEST_F(PairA, NPredictReachedMidRound) {
  engine::Decoder spec = chain_decoder(*target, *draft, 512, 5, 64);
  for (uint32_t n : {1u, 2u, 4u, 7u, 11u}) {
    engine::SpecStats stats;
    auto r = spec.generate(golden->prompts[1].prompt_ids, greedy(n), stats);
    std::vector<int32_t> want(plain_tokens(1).begin(), plain_tokens(1).begin() + n);
    EXPECT_EQ(r.tokens, want) << "n " << n;
    EXPECT_EQ(stats.total_output_tokens, n);
  }
}

// Near the end of the context the draft length shrinks; output equals plain decoding with
// the same context, which stops there too.
TEST_F(PairA, ContextNearlyFull) {
  const auto& prompt = golden->prompts[4].prompt_ids;
  for (uint32_t room : {1u, 2u, 6u, 9u}) {
    uint32_t context = uint32_t(prompt.size()) + room;
    engine::Decoder runner = plain_decoder(*target, context, 64);
    auto want = testing::generate(runner, prompt, greedy(64));
    engine::Decoder spec = chain_decoder(*target, *draft, context, 5, 64);
    engine::SpecStats stats;
    auto got = spec.generate(prompt, greedy(64), stats);
    EXPECT_EQ(got.tokens, want.tokens) << "room " << room;
    EXPECT_EQ(got.stopped_at_context, want.stopped_at_context) << "room " << room;
    EXPECT_TRUE(got.stopped_at_context);
    EXPECT_EQ(got.tokens.size(), room + 1);  // the last token needs no KV row
  }
}

// The verify pass computes each position's logits bit for bit as a one-token decode step.
TEST_F(PairA, VerifyLogitsEqualDecodeLogitsBitwise) {
  const auto& prompt = golden->prompts[0].prompt_ids;
  const auto& next = plain_tokens(0);
  for (uint32_t k : {1u, 4u, 8u}) {
    TargetRunner runner(gpu(), *target, 256, 64);
    PassOutput out;
    PassRequest pre;
    pre.ids = prompt;
    pre.logits_from = uint32_t(prompt.size());
    runner.run(pre, out);
    std::vector<float> decode;
    for (uint32_t j = 0; j <= k; ++j) {
      PassRequest step;
      step.ids = std::span<const int32_t>(&next[j], 1);
      step.start = uint32_t(prompt.size()) + j;
      step.read_logits = true;
      runner.run(step, out);
      decode.insert(decode.end(), out.logits.begin(), out.logits.end());
    }
    PassRequest verify;
    verify.ids = std::span<const int32_t>(next.data(), k + 1);
    verify.start = uint32_t(prompt.size());
    verify.read_logits = true;
    verify.batch_invariant = true;
    runner.run(verify, out);
    EXPECT_TRUE(bitwise_equal(out.logits, decode)) << "k " << k;
  }
}

}  // namespace
}  // namespace eaglevk::testing
