// One batch for every request: sequences decoding together in one decoder may each have their
// own sampling settings (greedy beside T > 0, each its own top-k, top-p and seed) and, with chain
// drafting, their own draft tokens a round; each sequence's tokens, logprob bits and acceptance
// equal those of the same request decoded alone by a decoder of one slot built for it (k its
// own), whichever neighbours it has and whenever it joins. Rounds are resubmitted from the
// round cache (replay on), so a recording made for one mix of settings serves another: the
// settings are data the kernels read, not part of what was recorded.
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>

#include <eaglevk/error.h>

#include "runtime/engine/decoder.h"
#include "support/decoding.h"
#include "support/gpu_fixture.h"
#include "support/pairs.h"

namespace eaglevk::testing {
namespace {

constexpr uint32_t kContext = 256;
constexpr uint32_t kSlots = 4;
constexpr uint32_t kMaxK = 4;

// A request: its settings, its draft tokens a round (chains) and its length.
struct Request {
  engine::SamplingParams sampling;
  uint32_t k = kMaxK;
  uint32_t n = 10;
  std::string label() const {
    return "T " + std::to_string(sampling.temperature) + " top-k " + std::to_string(sampling.top_k) + " top-p " +
           std::to_string(sampling.top_p) + " seed " + std::to_string(sampling.seed) + " k " + std::to_string(k);
  }
};

// Greedy beside three temperatures, top-k and top-p on and off, four seeds, k from 1 to 4; two
// requests share settings but not k, two share all but the seed.
std::vector<Request> requests() {
  return {
      {{}, 4, 12},
      {{0.8f, 20, 1.0f, 7}, 2, 10},
      {{0.7f, 0, 0.9f, 3}, 4, 14},
      {{1.1f, 0, 1.0f, 42}, 1, 9},
      {{}, 3, 11},
      {{0.8f, 20, 1.0f, 8}, 3, 12},
      {{0.9f, 5, 0.8f, 7}, 4, 8},
  };
}

engine::GenerationOptions options(const Request& r, bool chain) {
  engine::GenerationOptions o;
  o.n_predict = r.n;
  o.ignore_eos = true;
  o.sampling = r.sampling;
  o.logprobs = 2;
  if (chain) o.draft_tokens = r.k;
  return o;
}


// Runs every request through `batch`'s slots (a finished slot takes the next request, so
// sequences join and leave at different rounds); returns each result and its statistics.
void run_batch(engine::Decoder& batch, const Pair& p, const std::vector<Request>& reqs, bool chain,
               std::vector<engine::GenerationResult>& got, std::vector<engine::SpecStats>& stats) {
  const size_t n = reqs.size();
  got.assign(n, {});
  stats.assign(n, {});
  std::vector<std::optional<size_t>> in_slot(batch.batch());
  size_t next = 0, done = 0;
  while (done < n) {
    for (uint32_t slot = 0; slot < batch.batch(); ++slot) {
      if (batch.finished(slot)) {
        got[*in_slot[slot]] = batch.take(slot, stats[*in_slot[slot]]);
        in_slot[slot].reset();
        ++done;
      }
      if (!in_slot[slot] && next < n) {
        const auto& prompt = p.golden.prompts[next % p.golden.prompts.size()].prompt_ids;
        batch.start(slot, prompt, options(reqs[next], chain));
        in_slot[slot] = next++;
      }
    }
    batch.round();
  }
  EXPECT_FALSE(batch.any_running());
}

class MixedBatch : public GpuTest, public ::testing::WithParamInterface<const char*> {};

// Plain decoding: B = 4 slots over seven requests of different settings.
TEST_P(MixedBatch, PlainRowsEqualEachRequestAlone) {
  Pair& p = pair(GetParam());
  engine::Decoder batch(gpu(), p.target, nullptr, {.context = kContext, .batch = kSlots});
  batch.replay = true;
  batch.replay_span = 8;
  const std::vector<Request> reqs = requests();
  std::vector<engine::GenerationResult> got;
  std::vector<engine::SpecStats> stats;
  run_batch(batch, p, reqs, /*chain=*/false, got, stats);
  EXPECT_GT(batch.replayed_rounds(), 0u) << "no round was resubmitted: the replay path went untested";
  engine::Decoder alone = plain_decoder(p.target, kContext, engine::kPrefillRows);
  for (size_t i = 0; i < reqs.size(); ++i) {
    const auto& prompt = p.golden.prompts[i % p.golden.prompts.size()].prompt_ids;
    const engine::GenerationResult want = generate(alone, prompt, options(reqs[i], false));
    ASSERT_EQ(got[i].tokens.size(), reqs[i].n) << reqs[i].label();
    expect_same_generation(got[i], want, reqs[i].label());
  }
}

// Chain drafting with drafts drawn from the draft's distribution at T > 0 (the default scheme):
// the batch's greedy rows then take the drawing kernels at temperature 0, which must give the
// argmax path's bits. Each request alone runs in a decoder of its own k.
void expect_chain_rows_alone(Pair& p, bool greedy_drafts) {
  std::unique_ptr<engine::Decoder> batch =
      engine::make_decoder(gpu(), p.target, &p.draft, {.context = kContext, .batch = kSlots, .k = kMaxK}, greedy_drafts);
  batch->replay = true;
  batch->replay_span = 8;
  const std::vector<Request> reqs = requests();
  std::vector<engine::GenerationResult> got;
  std::vector<engine::SpecStats> stats;
  run_batch(*batch, p, reqs, /*chain=*/true, got, stats);
  // Chain rounds rarely repeat a shape (each sequence's catch-up rows follow its acceptance):
  // the same requests again repeat the first run's shapes, so its rounds are resubmitted, and
  // must give the same bits.
  const uint64_t replayed_before = batch->replayed_rounds();
  std::vector<engine::GenerationResult> again;
  std::vector<engine::SpecStats> again_stats;
  run_batch(*batch, p, reqs, /*chain=*/true, again, again_stats);
  EXPECT_GT(batch->replayed_rounds(), replayed_before) << "no round was resubmitted: the replay path went untested";
  for (size_t i = 0; i < reqs.size(); ++i) expect_same_generation(again[i], got[i], reqs[i].label() + ", replayed");
  for (size_t i = 0; i < reqs.size(); ++i) {
    std::unique_ptr<engine::Decoder> alone = engine::make_decoder(
        gpu(), p.target, &p.draft, {.context = kContext, .batch = 1, .k = reqs[i].k}, greedy_drafts);
    engine::GenerationOptions o = options(reqs[i], true);
    o.draft_tokens = 0;  // the decoder's own k
    engine::SpecStats want_stats;
    const auto& prompt = p.golden.prompts[i % p.golden.prompts.size()].prompt_ids;
    const engine::GenerationResult want = alone->generate(prompt, o, want_stats);
    const std::string what = reqs[i].label() + (greedy_drafts ? ", greedy drafts" : ", drawn drafts");
    ASSERT_EQ(got[i].tokens.size(), reqs[i].n) << what;
    expect_same_generation(got[i], want, what);
    EXPECT_EQ(stats[i].num_drafts, want_stats.num_drafts) << what;
    EXPECT_EQ(stats[i].num_draft_tokens, want_stats.num_draft_tokens) << what;
    EXPECT_EQ(stats[i].num_accepted_tokens, want_stats.num_accepted_tokens) << what;
    EXPECT_EQ(stats[i].accepted_at, want_stats.accepted_at) << what;
  }
}

TEST_P(MixedBatch, ChainRowsWithDrawnDraftsEqualEachRequestAlone) { expect_chain_rows_alone(pair(GetParam()), false); }

TEST_P(MixedBatch, ChainRowsWithGreedyDraftsEqualEachRequestAlone) {
  expect_chain_rows_alone(pair(GetParam()), true);
}

INSTANTIATE_TEST_SUITE_P(Pairs, MixedBatch, ::testing::Values("A", "B"));

// A sequence's own draft tokens are 1 up to the decoder's k, and only for chain drafting.
TEST_F(GpuTest, SequenceDraftTokensAreChecked) {
  Pair& p = pair("A");
  engine::Decoder chain = chain_decoder(p.target, p.draft, kContext, 2);
  engine::GenerationOptions o = options({{}, 3, 4}, true);
  const auto& prompt = p.golden.prompts[0].prompt_ids;
  try {
    chain.start(0, prompt, o);
    FAIL() << "3 draft tokens in a decoder of k 2 were taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("at most the decoder's 2 tokens a round, got 3"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(chain.running(0));
  engine::Decoder plain = plain_decoder(p.target, kContext, engine::kPrefillRows);
  o.draft_tokens = 1;
  try {
    plain.start(0, prompt, o);
    FAIL() << "draft tokens for plain decoding were taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("for chain drafting"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace eaglevk::testing
