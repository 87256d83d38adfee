// engine::Decoder without a draft (plain decoding): one sequence's tokens and logits equal those
// of raw passes run by hand (a chunked prefill, then one one-row pass per token: the plain path
// the goldens were checked on), and B sequences decoded together in the decoder's slots
// (continuous batching, a round one row per sequence) each equal that sequence decoded alone,
// to the bit, greedy and sampled.
#include <gtest/gtest.h>

#include <optional>
#include <span>

#include "runtime/engine/decoder.h"
#include "support/decoding.h"
#include "support/gpu_fixture.h"
#include "support/pairs.h"
#include "support/target_runner.h"

namespace eaglevk::testing {
namespace {

constexpr uint32_t kContext = 256;
constexpr uint32_t kRows = 16;  // prefill chunk: the longer prompts take two

engine::GenerationOptions options(uint32_t n, const engine::SamplingParams& sampling) {
  engine::GenerationOptions o;
  o.n_predict = n;
  o.ignore_eos = true;
  o.sampling = sampling;
  o.logprobs = 3;
  return o;
}


class PlainDecoder : public GpuTest, public ::testing::WithParamInterface<const char*> {};

// Greedy: the decoder's tokens and logprobs are those of the logits of raw passes, prefill in
// chunks of kRows rows and one one-row pass per token after it.
TEST_P(PlainDecoder, OneSequenceEqualsRawPasses) {
  Pair& p = pair(GetParam());
  engine::Decoder decoder = plain_decoder(p.target, kContext, kRows);
  TargetRunner runner(gpu(), p.target, kContext, kRows);
  const uint32_t V = p.target.config().vocab_size;
  for (size_t i : {0u, 3u}) {
    const std::vector<int32_t>& prompt = p.golden.prompts[i].prompt_ids;
    const engine::GenerationResult got = generate(decoder, prompt, options(20, {}));
    PassOutput out;
    for (uint32_t begin = 0; begin < prompt.size(); begin += kRows) {
      PassRequest req;
      req.ids = std::span<const int32_t>(prompt).subspan(begin, std::min<size_t>(kRows, prompt.size() - begin));
      req.start = begin;
      req.logits_from = uint32_t(req.ids.size()) - 1;
      req.read_logits = true;
      runner.run(req, out);
    }
    std::vector<int32_t> tokens;
    std::vector<engine::TokenLogprobs> logprobs;
    int32_t next = out.argmax.back();
    for (uint32_t pos = uint32_t(prompt.size());; ++pos) {
      tokens.push_back(next);
      logprobs.push_back(engine::token_logprobs(std::span<const float>(out.logits).subspan(0, V), next, 3));
      if (tokens.size() == 20) break;
      PassRequest step;
      step.ids = std::span<const int32_t>(&tokens.back(), 1);
      step.start = pos;
      step.read_logits = true;
      runner.run(step, out);
      next = out.argmax[0];
    }
    engine::GenerationResult want;
    want.tokens = tokens;
    want.logprobs = logprobs;
    expect_same_generation(got, want, "prompt " + std::to_string(i));
  }
}

// B = 4 slots over 7 prompts of different lengths (a finished slot takes the next prompt, so
// sequences start and end at different rounds) give each prompt's tokens and logprob bits of
// a decoder of one slot, greedy and at T > 0 with one seed (draws are keyed by position).
TEST_P(PlainDecoder, BatchEqualsEachSequenceAlone) {
  Pair& p = pair(GetParam());
  engine::Decoder alone = plain_decoder(p.target, kContext, kRows);
  engine::Decoder batch(gpu(), p.target, nullptr, {.context = kContext, .batch = 4, .max_rows = kRows});
  ASSERT_EQ(batch.batch(), 4u);
  EXPECT_FALSE(batch.speculative());
  const engine::SamplingParams greedy, sampled{0.8f, 20, 0.95f, 7};
  for (const engine::SamplingParams& sampling : {greedy, sampled}) {
    const std::string label = sampling.greedy() ? "greedy" : "T 0.8";
    std::vector<engine::GenerationResult> want;
    const size_t n = std::min<size_t>(7, p.golden.prompts.size());
    // Lengths differ so that slots finish at different rounds.
    auto length = [](size_t i) { return uint32_t(6 + 5 * (i % 3)); };
    for (size_t i = 0; i < n; ++i)
      want.push_back(generate(alone, p.golden.prompts[i].prompt_ids, options(length(i), sampling)));
    std::vector<std::optional<size_t>> in_slot(4);
    std::vector<engine::GenerationResult> got(n);
    size_t next = 0, done = 0;
    while (done < n) {
      for (uint32_t slot = 0; slot < 4; ++slot) {
        if (batch.finished(slot)) {
          engine::SpecStats stats;
          got[*in_slot[slot]] = batch.take(slot, stats);
          EXPECT_EQ(stats.num_drafts, 0u);
          in_slot[slot].reset();
          ++done;
        }
        if (!in_slot[slot] && next < n) {
          batch.start(slot, p.golden.prompts[next].prompt_ids, options(length(next), sampling));
          in_slot[slot] = next++;
        }
      }
      batch.round();
    }
    EXPECT_FALSE(batch.any_running());
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(got[i].tokens.size(), length(i)) << label << ", prompt " << i;
      expect_same_generation(got[i], want[i], label + ", prompt " + std::to_string(i));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Pairs, PlainDecoder, ::testing::Values("A", "B"));

}  // namespace
}  // namespace eaglevk::testing
