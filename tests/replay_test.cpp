// Replayed decode steps (TargetRunner::replay): a pass that matches the one last recorded is
// resubmitted as recorded, its token id and position copied from the upload buffer. Checked
// against recording every pass (replay off, the reference): the same tokens, and the same
// logits bits, for greedy and sampled decoding on both tiny targets, across several
// re-recordings (a span of 8 positions per recording instead of 512), and after something
// else was recorded into the runner's recorder in between. Replayed chain and tree rounds
// (Decoder::replay) are checked the same way: tokens, acceptance, logprob bits and
// taps of recording every round, greedy, sampled (chains also with sampled drafts).
#include <fmt/format.h>

#include "runtime/engine/generate.h"
#include "runtime/engine/decoder.h"
#include "support/decoding.h"
#include "support/target_runner.h"
#include "support/gpu_fixture.h"
#include "support/pairs.h"

namespace eaglevk::testing {
namespace {

constexpr uint32_t kContext = 256;
constexpr uint32_t kTokens = 40;

struct Decoded {
  engine::GenerationResult result;
  uint64_t replayed = 0;
};

Decoded decode(const models::TargetModel& target, const std::vector<int32_t>& prompt, bool replay,
               const engine::GenerationOptions& o) {
  engine::Decoder runner = plain_decoder(target, kContext, 16);
  runner.replay = replay;
  runner.replay_span = 8;
  Decoded d;
  d.result = testing::generate(runner, prompt, o);
  d.replayed = runner.replayed_rounds();
  return d;
}

engine::GenerationOptions options(float temperature, uint32_t logprobs) {
  engine::GenerationOptions o;
  o.n_predict = kTokens;
  o.ignore_eos = true;
  o.sampling.temperature = temperature;
  o.sampling.top_k = 40;
  o.sampling.seed = 11;
  o.logprobs = logprobs;
  return o;
}

class Replay : public GpuTest, public ::testing::WithParamInterface<const char*> {};

TEST_P(Replay, GivesTheTokensAndLogitsOfRecordingEveryPass) {
  Pair& p = pair(GetParam());
  const std::vector<int32_t>& prompt = p.golden.prompts[0].prompt_ids;
  struct Case {
    const char* what;
    engine::GenerationOptions o;
  } cases[] = {{"greedy", options(0, 0)}, {"sampled", options(0.9f, 0)}, {"greedy, logprobs", options(0, 3)}};
  for (const Case& c : cases) {
    const Decoded replayed = decode(p.target, prompt, true, c.o);
    const Decoded recorded = decode(p.target, prompt, false, c.o);
    ASSERT_EQ(recorded.result.tokens.size(), kTokens) << c.what;
    EXPECT_EQ(replayed.result.tokens, recorded.result.tokens) << c.what;
    EXPECT_EQ(recorded.replayed, 0u) << c.what;
    // One recording per 8 positions, the rest replayed: the first decode step is recorded
    // (the prefill was another shape), then 7 of every 8.
    EXPECT_GE(replayed.replayed, (kTokens - 1) * 7 / 8 - 1) << c.what;
    ASSERT_EQ(replayed.result.logprobs.size(), recorded.result.logprobs.size()) << c.what;
    for (size_t i = 0; i < recorded.result.logprobs.size(); ++i)
      EXPECT_EQ(replayed.result.logprobs[i].logprob, recorded.result.logprobs[i].logprob) << c.what << ", token " << i;
  }
}

// The runner replays only while its recording is the last thing recorded: a pass recorded in
// between (here a fill of the runner's own recorder) makes the next step record again.
TEST_P(Replay, RecordsAgainAfterAnotherRecording) {
  Pair& p = pair(GetParam());
  const std::vector<int32_t>& prompt = p.golden.prompts[1].prompt_ids;
  engine::GenerationOptions o = options(0, 0);
  o.n_predict = 12;
  const std::vector<int32_t> expected = decode(p.target, prompt, false, o).result.tokens;

  TargetRunner runner(gpu(), p.target, kContext, 128);
  runner.replay_span = 8;
  std::vector<int32_t> tokens(prompt.begin(), prompt.end());
  PassOutput out;
  PassRequest prefill;
  prefill.ids = tokens;
  runner.run(prefill, out);
  vk::Buffer scratch(gpu().ctx, 256, vk::MemoryKind::Device, "scratch");
  for (uint32_t i = 0; i < o.n_predict; ++i) {
    const int32_t next = out.argmax.back();
    ASSERT_EQ(next, expected[i]) << "token " << i;
    tokens.push_back(next);
    if (i == 5) {
      vk::Recorder& rec = runner.recorder();
      rec.begin();
      rec.fill(vk::BufferRange(scratch), 0, "something else");
      rec.submit_and_wait();
    }
    PassRequest step;
    step.ids = std::span<const int32_t>(&tokens.back(), 1);
    step.start = uint32_t(tokens.size()) - 1;
    runner.run(step, out);
  }
  EXPECT_GT(runner.replayed_passes(), 0u);
}

// The token a sampled step emits is the draw for its own position: each step's logits drawn
// again on their own, with the position given as a number (SampleParams::first_position)
// rather than read from the pass's positions, give the same token, on recorded and replayed
// steps alike. A replay that drew at the recorded step's position would fail this.
TEST_P(Replay, SampledStepsDrawAtTheirOwnPosition) {
  Pair& p = pair(GetParam());
  std::vector<int32_t> tokens = p.golden.prompts[2].prompt_ids;
  engine::SamplingParams sp = options(0.9f, 0).sampling;
  TargetRunner runner(gpu(), p.target, kContext, 128);
  runner.replay_span = 8;
  const uint32_t V = uint32_t(p.target.config().vocab_size);
  vk::Buffer logits(gpu().ctx, uint64_t(V) * 4, vk::MemoryKind::Device, "logits");
  vk::Buffer ids(gpu().ctx, 4, vk::MemoryKind::Device, "ids"), accept(gpu().ctx, 4, vk::MemoryKind::Device, "accept");
  PassOutput out;
  for (uint32_t i = 0; i < 20; ++i) {
    PassRequest req;
    req.ids = tokens;
    req.start = 0;
    if (i > 0) {
      req.ids = std::span<const int32_t>(&tokens.back(), 1);
      req.start = uint32_t(tokens.size()) - 1;
    }
    req.logits_from = uint32_t(req.ids.size()) - 1;
    req.read_logits = true;
    req.sampling = &sp;
    runner.run(req, out);
    const uint32_t position = uint32_t(tokens.size());  // of the token this step decides
    vk::upload(gpu().ctx, logits, out.logits.data(), uint64_t(V) * 4);
    vk::Recorder rec(gpu().ctx);
    ops::OpContext oc{gpu(), rec};
    rec.begin();
    ops::sample(oc, ops::Act(logits, V), 1, V, nullptr, ops::IntVec{ids}, ops::IntVec{accept},
                engine::device_params(sp, position));
    rec.submit_and_wait();
    EXPECT_EQ(out.argmax[0], read_back<int32_t>(ids, 1)[0]) << "position " << position;
    tokens.push_back(out.argmax[0]);
  }
  EXPECT_GE(runner.replayed_passes(), 14u);
}

struct Speculated {
  engine::GenerationResult result;
  engine::SpecStats stats;
  std::vector<float> taps;
  uint64_t replayed = 0;
};

// Two generations on one decoder, the second continuing the first's caches (a round's shape
// depends on how many drafts the round before accepted, so this meets every catch-up row count).
Speculated speculate(Pair& p, const std::vector<int32_t>& prompt, bool replay, uint32_t span, bool draft_sampling,
                     bool taps, const engine::GenerationOptions& o, const engine::TreeParams& tree = {}) {
  engine::Decoder decoder = tree.enabled() ? tree_decoder(p.target, p.draft, kContext, tree, 16)
                                           : chain_decoder(p.target, p.draft, kContext, 3, 16);
  decoder.replay = replay;
  decoder.replay_span = span;
  decoder.set_draft_sampling(draft_sampling);
  Speculated s;
  if (taps) decoder.set_tap_sink([&](const engine::TapRows& t) { s.taps.insert(s.taps.end(), t.hidden.begin(), t.hidden.end()); });
  s.result = decoder.generate(prompt, o, s.stats);
  std::vector<int32_t> next = prompt;
  next.insert(next.end(), s.result.tokens.begin(), s.result.tokens.end());
  engine::GenerationOptions more = o;
  more.reuse_prefix = true;
  const engine::GenerationResult second = decoder.generate(next, more, s.stats);
  s.result.tokens.insert(s.result.tokens.end(), second.tokens.begin(), second.tokens.end());
  s.result.logprobs.insert(s.result.logprobs.end(), second.logprobs.begin(), second.logprobs.end());
  s.replayed = decoder.replayed_rounds();
  return s;
}

// Replayed rounds give what recording every round gives: tokens, acceptance, logprob bits and
// taps. Each of the `shapes` catch-up row counts is recorded once per span, and the first round
// of each of the two generations (its taps sit where the prefill left them); the rest replay.
void expect_replayed_like_recorded(const Speculated& replayed, const Speculated& recorded, const char* what,
                                   uint32_t span, uint64_t shapes) {
  ASSERT_EQ(recorded.result.tokens.size(), 2 * kTokens) << what;
  EXPECT_EQ(replayed.result.tokens, recorded.result.tokens) << what;
  EXPECT_EQ(replayed.stats.accepted_at, recorded.stats.accepted_at) << what;
  EXPECT_EQ(replayed.stats.num_drafts, recorded.stats.num_drafts) << what;
  EXPECT_EQ(recorded.replayed, 0u) << what;
  const uint64_t rounds = recorded.stats.num_drafts;
  if (span == 512)
    EXPECT_GE(replayed.replayed, rounds - shapes - 2) << what << ", " << rounds << " rounds";
  else
    EXPECT_GT(replayed.replayed, 0u) << what;
  EXPECT_LT(replayed.replayed, rounds) << what;
  ASSERT_EQ(replayed.result.logprobs.size(), recorded.result.logprobs.size()) << what;
  for (size_t i = 0; i < recorded.result.logprobs.size(); ++i)
    EXPECT_EQ(replayed.result.logprobs[i].logprob, recorded.result.logprobs[i].logprob) << what << ", token " << i;
  ASSERT_EQ(replayed.taps.size(), recorded.taps.size()) << what;
  EXPECT_TRUE(replayed.taps == recorded.taps) << what;
}

TEST_P(Replay, ChainRoundsGiveWhatRecordingEveryRoundGives) {
  Pair& p = pair(GetParam());
  const std::vector<int32_t>& prompt = p.golden.prompts[3].prompt_ids;
  struct Case {
    const char* what;
    engine::GenerationOptions o;
    bool draft_sampling = false, taps = false;
    uint32_t span = 512;
  } cases[] = {{"greedy", options(0, 0)},
               {"greedy, a recording per 8 positions", options(0, 0), false, false, 8},
               {"sampled", options(0.9f, 0)},
               {"sampled drafts", options(0.9f, 0), true},
               {"greedy, logprobs and taps", options(0, 3), false, true}};
  for (const Case& c : cases) {
    const Speculated replayed = speculate(p, prompt, true, c.span, c.draft_sampling, c.taps, c.o);
    const Speculated recorded = speculate(p, prompt, false, c.span, c.draft_sampling, c.taps, c.o);
    expect_replayed_like_recorded(replayed, recorded, c.what, c.span, /*shapes=*/3 + 1);
  }
}

// Tree rounds: the last tree's accepted path is moved on the device and the root's position and
// token are read there, so a recorded round serves later ones; the same checks as for chains.
TEST_P(Replay, TreeRoundsGiveWhatRecordingEveryRoundGives) {
  Pair& p = pair(GetParam());
  const std::vector<int32_t>& prompt = p.golden.prompts[4].prompt_ids;
  engine::TreeParams tree;
  tree.steps = 3;
  tree.topk = 2;
  tree.draft_tokens = 6;
  struct Case {
    const char* what;
    engine::GenerationOptions o;
    bool taps = false;
    uint32_t span = 512;
  } cases[] = {{"greedy", options(0, 0)},
               {"greedy, a recording per 8 positions", options(0, 0), false, 8},
               {"sampled", options(0.9f, 0)},
               {"greedy, logprobs and taps", options(0, 3), true}};
  for (const Case& c : cases) {
    const Speculated replayed = speculate(p, prompt, true, c.span, false, c.taps, c.o, tree);
    const Speculated recorded = speculate(p, prompt, false, c.span, false, c.taps, c.o, tree);
    expect_replayed_like_recorded(replayed, recorded, c.what, c.span, /*shapes=*/tree.steps + 1);
  }
}

INSTANTIATE_TEST_SUITE_P(Pairs, Replay, ::testing::Values("A", "B"));

}  // namespace
}  // namespace eaglevk::testing
