// The draft head against golden.json's debug record (an independent PyTorch reference): the
// taps at the last prompt position and the draft's first-step top-5, after the catch-up over
// the prompt. The two norm paths give bitwise equal draft logits with tracked or full
// barriers and with or without arena reuse, with the validation layer silent.
#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "models/eagle3.h"
#include "models/target.h"
#include "runtime/engine/sampler.h"
#include "support/gpu_fixture.h"
#include "support/golden.h"

namespace eaglevk::testing {
namespace {

struct DraftRun {
  std::vector<float> taps_last;     // [3 H] at the last prompt position
  std::vector<float> draft_logits;  // [Vd] of the last catch-up row
  int32_t target_next = -1;
  uint32_t barriers = 0, dispatches = 0;
};

struct Eagle3Draft : GpuTest {
  static void SetUpTestSuite() {
    target = new models::TargetModel{models::load_llama3(gpu().ctx, asset("tiny-llama3"))};
    draft = new models::Eagle3Model(models::load_eagle3(gpu().ctx, asset("tiny-llama3-eagle3"), target->config()));
    golden = new Golden(load_golden(asset("tiny-llama3")));
  }
  static void TearDownTestSuite() {
    delete target;
    delete draft;
    delete golden;
  }

  // Prefill of golden prompt 0 with taps at `layers`, then the draft catch-up over every
  // prompt position (tokens x_{t+1}, the last one being the first generated token).
  static DraftRun run(vk::SyncMode sync, bool reuse, std::vector<uint32_t> layers) {
    auto& ctx = gpu().ctx;
    const auto& prompt = golden->prompts[0].prompt_ids;
    const uint32_t n = uint32_t(prompt.size()), H = target->config().hidden_size;
    const int32_t first = golden->raw["debug"]["first_generated_token"].get<int32_t>();
    auto ts = models::make_target_state(ctx, *target, 128, 64, reuse);
    auto ds = models::make_eagle3_state(ctx, *draft, 128, 64, 1, reuse);
    vk::Buffer taps(ctx, 64 * 3 * H * 4, vk::MemoryKind::Device, "taps");
    std::vector<int32_t> positions(n), next(prompt.begin() + 1, prompt.end());
    std::iota(positions.begin(), positions.end(), 0);
    next.push_back(first);
    vk::upload(ctx, ts.ids, prompt.data(), n * 4);
    vk::upload(ctx, ts.positions, positions.data(), n * 4);
    vk::upload(ctx, ds.positions, positions.data(), n * 4);
    vk::Buffer draft_ids = device_buffer(next, "draft ids"), out_token(ctx, 4, vk::MemoryKind::Device, "out");
    models::TapRequest request{layers, ops::Act(taps, 3 * H)};

    vk::Recorder rec(ctx);
    rec.sync = sync;
    ops::OpContext oc{gpu(), rec};
    rec.begin();
    models::record_target_forward(oc, *target, ts, {n, n, n - 1, false, &request});
    models::DraftPass pass;
    pass.rows = n;
    pass.from_taps = true;
    pass.taps = request.out;
    pass.ids = ops::IntVec{draft_ids};
    pass.positions = ops::IntVec{ds.positions};
    pass.kv_len = n;
    pass.out_token = ops::IntVec{out_token};
    models::record_eagle3_forward(oc, *draft, ds, {target->embed(), target->lm_head()}, pass);
    rec.submit_and_wait();

    DraftRun r;
    auto all_taps = read_back<float>(taps, size_t(n) * 3 * H);
    r.taps_last.assign(all_taps.end() - 3 * H, all_taps.end());
    r.draft_logits = read_back<float>(ds.arena[ds.logits], draft->config.draft_vocab_size);
    r.target_next = read_back<int32_t>(ts.out_ids, 1)[0];
    r.barriers = rec.barriers();
    r.dispatches = rec.dispatches();
    return r;
  }

  static models::TargetModel* target;
  static models::Eagle3Model* draft;
  static Golden* golden;
};
models::TargetModel* Eagle3Draft::target = nullptr;
models::Eagle3Model* Eagle3Draft::draft = nullptr;
Golden* Eagle3Draft::golden = nullptr;

std::vector<double> golden_taps(const nlohmann::json& debug) {
  std::vector<double> out;
  for (const auto& row : debug["aux_hidden_states_last_prompt_pos"])
    for (const auto& v : row) out.push_back(v.get<double>());
  return out;
}

TEST_F(Eagle3Draft, TapsAtTheLastPromptPositionMatchGolden) {
  const auto& debug = golden->raw["debug"];
  ASSERT_EQ(debug["aux_layers"].get<std::vector<uint32_t>>(), draft->aux_layers);
  DraftRun r = run(vk::SyncMode::Tracked, true, draft->aux_layers);
  EXPECT_EQ(r.target_next, debug["first_generated_token"].get<int32_t>());
  EXPECT_TRUE(all_close(r.taps_last, golden_taps(debug), 2e-3, 1e-3));
}

// Tapping one layer off (the classic off-by-one) must not pass for the golden taps.
TEST_F(Eagle3Draft, ShiftedTapLayersDoNotMatch) {
  auto want = golden_taps(golden->raw["debug"]);
  for (int shift : {-1, 1}) {
    std::vector<uint32_t> layers;
    for (uint32_t l : draft->aux_layers) layers.push_back(uint32_t(int(l) + shift));
    DraftRun r = run(vk::SyncMode::Tracked, true, layers);
    EXPECT_FALSE(all_close(r.taps_last, want, 2e-3, 1e-3)) << "shift " << shift;
  }
}

TEST_F(Eagle3Draft, FirstDraftStepTop5MatchesGolden) {
  const auto& top = golden->raw["debug"]["draft_step1_top5"];
  DraftRun r = run(vk::SyncMode::Tracked, true, draft->aux_layers);
  auto got = engine::top_logits(r.draft_logits, 5);
  auto want_ids = top["draft_ids"].get<std::vector<int32_t>>();
  auto want_logits = top["logits"].get<std::vector<float>>();
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(got[i].first, want_ids[i]) << "rank " << i;
    EXPECT_NEAR(got[i].second, want_logits[i], 2e-3) << "rank " << i;
  }
  // d2t maps the draft winner to the golden target id.
  auto d2t = read_back<int32_t>(draft->d2t, draft->config.draft_vocab_size);
  EXPECT_EQ(want_ids[0] + d2t[want_ids[0]], top["target_ids"][0].get<int32_t>());
}

TEST_F(Eagle3Draft, NormPathsBitwiseEqualAcrossBarrierAndArenaModes) {
  DraftRun base = run(vk::SyncMode::Tracked, true, draft->aux_layers);
  EXPECT_LT(base.barriers, base.dispatches);  // independent dispatches really share barriers
  for (auto [sync, reuse] : {std::pair{vk::SyncMode::Full, true}, std::pair{vk::SyncMode::Tracked, false},
                             std::pair{vk::SyncMode::Full, false}}) {
    DraftRun other = run(sync, reuse, draft->aux_layers);
    EXPECT_TRUE(bitwise_equal(other.draft_logits, base.draft_logits)) << int(sync) << " reuse " << reuse;
    EXPECT_TRUE(bitwise_equal(other.taps_last, base.taps_last));
  }
}

}  // namespace
}  // namespace eaglevk::testing
