// The draft head against golden.json's debug record (an independent PyTorch reference): the
// taps at the last prompt position and the draft's first-step top-5, after the catch-up over
// the prompt. The two norm paths give bitwise equal draft logits with tracked or full
// barriers and with or without arena reuse, with the validation layer silent.
#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "loader/model_files.h"
#include "models/eagle3.h"
#include "models/target.h"
#include "runtime/engine/memory_plan.h"
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
    auto ts = models::make_target_state(gpu(), *target, 128, 64, reuse);
    auto ds = models::make_eagle3_state(gpu(), *draft, 128, 64, 1, reuse);
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


// Arena lifetimes are derived from dry recordings of the forwards. Checked here against those
// recordings read independently: every two tensors whose live ranges meet in some recorded pass
// (vk::live_ranges) own disjoint bytes in the arena the decoders allocate, for the target, the
// draft of one sequence and of three, and the draft with norm_before_residual (whose o_proj
// accumulates into attn_in: a different op order).
bool share_bytes(const vk::ArenaPlan& plan, uint32_t i, uint32_t j) {
  const auto &x = plan.tensors[i], &y = plan.tensors[j];
  return x.offset < y.offset + y.bytes && y.offset < x.offset + x.bytes;
}

bool ranges_meet(const std::vector<vk::LiveRange>& a, const std::vector<vk::LiveRange>& b) {
  for (const vk::LiveRange& x : a)
    for (const vk::LiveRange& y : b)
      if (x.first <= y.last && y.first <= x.last) return true;
  return false;
}

// Pairs of tensors live at once in one of `logs` (recorded against `layout`, a plan without reuse)
// that share bytes in `planned`, as "name/name".
std::vector<std::string> live_pairs_sharing_bytes(const vk::ArenaPlan& layout, const vk::Buffer& buffer,
                                                  const std::vector<vk::CommandLog>& logs, const vk::ArenaPlan& planned) {
  std::vector<std::string> out;
  for (const vk::CommandLog& log : logs) {
    const auto ranges = vk::live_ranges(layout, buffer, log);
    for (uint32_t i = 0; i < ranges.size(); ++i)
      for (uint32_t j = i + 1; j < ranges.size(); ++j)
        if (ranges_meet(ranges[i], ranges[j]) && share_bytes(planned, i, j))
          out.push_back(layout.tensors[i].name + "/" + layout.tensors[j].name);
  }
  return out;
}

TEST_F(Eagle3Draft, DerivedArenasKeepEveryLiveTensorApart) {
  {
    auto planned = models::make_target_state(gpu(), *target, 128, 64, true);
    auto probe = models::make_target_state(gpu(), *target, 128, 64, false);
    const auto logs = models::record_target_arena_passes(gpu(), *target, probe);
    EXPECT_GE(logs.size(), 4u);
    EXPECT_TRUE(live_pairs_sharing_bytes(probe.arena.plan, probe.arena.buffer, logs, planned.arena.plan).empty());
    EXPECT_LT(planned.arena.plan.total_bytes, probe.arena.plan.total_bytes);  // reuse saves something
  }
  const bool before = draft->config.norm_before_residual;
  for (bool norm_before_residual : {false, true})
    for (uint32_t sequences : {1u, 3u}) {
      draft->config.norm_before_residual = norm_before_residual;
      auto planned = models::make_eagle3_state(gpu(), *draft, 128, 64, 4, true, sequences);
      auto probe = models::make_eagle3_state(gpu(), *draft, 128, 64, 4, false, sequences);
      const auto logs = models::record_eagle3_arena_passes(gpu(), *draft, probe);
      EXPECT_TRUE(live_pairs_sharing_bytes(probe.arena.plan, probe.arena.buffer, logs, planned.arena.plan).empty())
          << "norm_before_residual " << norm_before_residual << ", " << sequences << " sequences";
    }
  // The negative control: a plan made for one op order does alias under the other. The arena
  // planned with norm_before_residual off (as a fixed, hand-numbered plan is: attn_in dies at the
  // q/k/v product) lets tensors written later share attn_in's bytes, which the forward with it on
  // still reads and accumulates into.
  draft->config.norm_before_residual = false;
  auto stale = models::make_eagle3_state(gpu(), *draft, 128, 64, 4, true);
  draft->config.norm_before_residual = true;
  auto probe = models::make_eagle3_state(gpu(), *draft, 128, 64, 4, false);
  const auto logs = models::record_eagle3_arena_passes(gpu(), *draft, probe);
  draft->config.norm_before_residual = before;
  const auto aliased = live_pairs_sharing_bytes(probe.arena.plan, probe.arena.buffer, logs, stale.arena.plan);
  EXPECT_FALSE(aliased.empty());
  for (const std::string& pair : aliased) EXPECT_NE(pair.find("attn_in"), std::string::npos) << pair;
}

// The memory plan's activations are the arenas the decoders allocate: the same derivation, on
// models loaded dry, for both tiny pairs and several pass sizes.
TEST_F(Eagle3Draft, MemoryPlanCountsTheArenasTheDecodersAllocate) {
  const bool reuse = vk::arena_reuse_from_env();
  const loader::ModelFiles llama4_files = loader::open_model_files(asset("tiny-llama4"));
  const models::TargetModel llama4 = models::load_target(gpu().ctx, llama4_files);
  const models::Eagle3Model llama4_draft = models::load_eagle3(gpu().ctx, asset("tiny-llama4-eagle3"), llama4.config());
  struct Pair {
    const models::TargetModel& target;
    const models::Eagle3Model& draft;
    std::string target_dir, draft_dir;
  };
  for (const Pair& p : {Pair{*target, *draft, "tiny-llama3", "tiny-llama3-eagle3"},
                        Pair{llama4, llama4_draft, "tiny-llama4", "tiny-llama4-eagle3"}})
    for (uint32_t max_rows : {1u, 8u, 64u}) {
      const loader::ModelFiles tf = loader::open_model_files(asset(p.target_dir));
      const loader::ModelFiles df = loader::open_model_files(asset(p.draft_dir));
      const engine::MemoryPlan plan = engine::plan_memory(gpu(), tf, &df, max_rows);
      const auto ts = models::make_target_state(gpu(), p.target, 512, max_rows, reuse);
      const auto ds = models::make_eagle3_state(gpu(), p.draft, 512, max_rows, 4, reuse);
      EXPECT_EQ(plan.activations, ts.arena.plan.total_bytes + ds.arena.plan.total_bytes)
          << p.target_dir << " at " << max_rows << " rows";
      EXPECT_GT(plan.per_pass, plan.activations);
      const engine::MemoryPlan alone = engine::plan_memory(gpu(), tf, nullptr, max_rows);
      EXPECT_EQ(alone.activations, ts.arena.plan.total_bytes) << p.target_dir << " at " << max_rows << " rows";
    }
}

}  // namespace
}  // namespace eaglevk::testing
