// The device sampler and speculative acceptance at temperature > 0. The random numbers are
// counter-based, so every test here is deterministic for its seeds. Distribution tests
// compare empirical frequencies with the host's filtered distribution by total variation;
// the two wrong rules (greedy acceptance at T > 0, resampling without removing the draft) are
// negative controls that must fail the same bound.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include <fmt/format.h>

#include "runtime/engine/sampler.h"
#include "runtime/ops/ops.h"
#include "shaders/shared_constants.h"
#include "support/gpu_fixture.h"
#include "support/reference.h"

namespace eaglevk::testing {
namespace {

constexpr double kTvBound = 0.05;

struct SamplingTest : GpuTest {
  // Draws `rows` tokens from copies of one logits row (row r decides position r, so every
  // row has its own random numbers). With a draft, returns what the speculative rule emits.
  std::vector<int32_t> draw(const std::vector<float>& logits, uint32_t rows, const ops::SampleParams& params,
                            int32_t draft = -1, ops::AcceptRule rule = ops::AcceptRule::Correct) {
    const uint32_t n = uint32_t(logits.size());
    std::vector<float> many;
    for (uint32_t r = 0; r < rows; ++r) many.insert(many.end(), logits.begin(), logits.end());
    vk::Buffer lb = device_buffer(many, "logits"), drafts = device_buffer(std::vector<int32_t>(rows, draft), "drafts"),
               ids(gpu().ctx, rows * 4, vk::MemoryKind::Device, "ids"), acc(gpu().ctx, rows * 4, vk::MemoryKind::Device, "accept");
    vk::Recorder rec(gpu().ctx);
    ops::OpContext oc{gpu(), rec};
    ops::IntVec d{drafts};
    rec.begin();
    ops::sample(oc, ops::Act(lb, n), rows, n, draft >= 0 ? &d : nullptr, ops::IntVec{ids}, ops::IntVec{acc}, params, rule);
    rec.submit_and_wait();
    auto out = read_back<int32_t>(ids, rows);
    if (draft >= 0) {
      auto accepted = read_back<int32_t>(acc, rows);
      for (uint32_t r = 0; r < rows; ++r)
        if (accepted[r]) out[r] = draft;
    }
    return out;
  }
};

double total_variation(const std::vector<int32_t>& samples, const std::vector<std::pair<int32_t, double>>& dist) {
  std::map<int32_t, double> freq, want;
  for (int32_t s : samples) freq[s] += 1.0 / samples.size();
  for (auto& [id, p] : dist) want[id] = p;
  double tv = 0;
  for (auto& [id, f] : freq) tv += std::fabs(f - (want.count(id) ? want[id] : 0.0));
  for (auto& [id, p] : want)
    if (!freq.count(id)) tv += p;
  return tv / 2;
}

std::vector<float> test_logits() {
  auto l = random_floats(60, 7, -2, 2);
  l[11] = 5.0f;  // a clear favourite (p about 0.5 at T = 1)
  l[40] = 3.0f;
  return l;
}

TEST_F(SamplingTest, PlainDrawsFollowTheFilteredDistribution) {
  auto logits = test_logits();
  for (auto [t, k, p] : {std::tuple{1.0f, 0u, 1.0f}, std::tuple{0.7f, 10u, 1.0f}, std::tuple{1.3f, 0u, 0.8f},
                         std::tuple{0.9f, 12u, 0.9f}}) {
    engine::SamplingParams sp{t, int32_t(k), p, 1234};
    auto samples = draw(logits, 6000, engine::device_params(sp, 0));
    double tv = total_variation(samples, engine::filtered_distribution(logits, sp));
    EXPECT_LT(tv, kTvBound) << "T " << t << " top-k " << k << " top-p " << p;
  }
}

// Ties at the top-k and top-p boundaries: the device keeps all tied tokens, and so must the
// reference it is compared with (a reference keeping k exactly would fail the bound here).
TEST_F(SamplingTest, TiesAtTheFilterBoundariesFollowTheReference) {
  for (auto [k, p] : {std::pair{2, 1.0f}, std::pair{0, 0.2f}}) {
    auto logits = test_logits();
    if (k == 2) logits[7] = logits[40];  // tied with the second favourite: top-k 2 keeps three tokens
    else logits[23] = logits[11];        // tied with the favourite: top-p 0.2 keeps both
    engine::SamplingParams sp{1.0f, k, p, 77};
    const auto dist = engine::filtered_distribution(logits, sp);
    EXPECT_EQ(dist.size(), k == 2 ? 3u : 2u);
    auto samples = draw(logits, 4000, engine::device_params(sp, 0));
    EXPECT_LT(total_variation(samples, dist), kTvBound) << "top-k " << k << " top-p " << p;
  }
}

// A row wider than any supported vocabulary (Llama-4: 202,048): five favourites at +12 hold
// three quarters of the mass against 262,139 tokens at 0, so a draw outside the five means
// the top-k or top-p threshold was wrong (as when lavapipe cut the search loops short).
TEST_F(SamplingTest, TopKAndTopPHoldOnA262144TokenRow) {
  std::vector<float> logits(262144, 0.0f);
  const std::vector<int32_t> favourites = {3, 70000, 131071, 200000, 262143};
  for (size_t i = 0; i < favourites.size(); ++i) logits[favourites[i]] = 12.0f + 0.1f * float(i);
  for (auto [k, p] : {std::pair{5, 1.0f}, std::pair{0, 0.5f}, std::pair{200, 0.5f}}) {
    engine::SamplingParams sp{1.0f, k, p, 321};
    auto samples = draw(logits, 64, engine::device_params(sp, 0));
    for (int32_t id : samples)
      EXPECT_NE(std::find(favourites.begin(), favourites.end(), id), favourites.end())
          << "drew " << id << " with top-k " << k << " top-p " << p;
    // Without filtering most draws land outside the five: the check can fail.
    if (k == 5) {
      auto unfiltered = draw(logits, 64, engine::device_params({1.0f, 0, 1.0f, 321}, 0));
      EXPECT_GT(std::count_if(unfiltered.begin(), unfiltered.end(),
                              [&](int32_t id) { return std::find(favourites.begin(), favourites.end(), id) == favourites.end(); }),
                4);
    }
  }
}

TEST_F(SamplingTest, SpeculativeAcceptanceKeepsTheTargetDistribution) {
  auto logits = test_logits();
  engine::SamplingParams sp{1.0f, 0, 1.0f, 99};
  auto dist = engine::filtered_distribution(logits, sp);
  // Drafts: the favourite, a likely token, and an unlikely one.
  for (int32_t draft : {11, 40, 3}) {
    auto samples = draw(logits, 6000, engine::device_params(sp, 0), draft);
    EXPECT_LT(total_variation(samples, dist), kTvBound) << "draft " << draft;
  }
  // Negative controls: each wrong rule must fail the same bound.
  auto greedy_accept = draw(logits, 6000, engine::device_params(sp, 0), 11, ops::AcceptRule::AcceptIfArgmax);
  EXPECT_GT(total_variation(greedy_accept, dist), 3 * kTvBound);
  auto no_removal = draw(logits, 6000, engine::device_params(sp, 0), 11, ops::AcceptRule::ResampleWithoutRemoval);
  EXPECT_GT(total_variation(no_removal, dist), 2 * kTvBound);
}

TEST_F(SamplingTest, TemperatureZeroIsGreedyAndSeedsReproduce) {
  auto logits = test_logits();
  logits[50] = logits[11];  // a tie: the lowest id wins
  auto greedy = draw(logits, 16, engine::device_params({0.0f, 0, 1.0f, 5}, 0));
  for (int32_t id : greedy) EXPECT_EQ(id, 11);
  // Greedy acceptance: accept exactly when the draft is the argmax; the replacement is it.
  auto accepted = draw(logits, 4, engine::device_params({0.0f, 0, 1.0f, 5}, 0), 11);
  for (int32_t id : accepted) EXPECT_EQ(id, 11);
  auto rejected = draw(logits, 4, engine::device_params({0.0f, 0, 1.0f, 5}, 0), 50);
  for (int32_t id : rejected) EXPECT_EQ(id, 11);
  auto a = draw(logits, 64, engine::device_params({1.0f, 0, 1.0f, 42}, 7));
  auto b = draw(logits, 64, engine::device_params({1.0f, 0, 1.0f, 42}, 7));
  auto c = draw(logits, 64, engine::device_params({1.0f, 0, 1.0f, 43}, 7));
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

// A logits row holding a NaN or an infinity decides nothing, greedy or sampled, with or without
// a draft to accept, with top-k and top-p, and drawing a draft (unmapped by d2t): the kernel
// writes NON_FINITE_ROW_ID and accepts nothing. Finite rows around them are unaffected.
TEST_F(SamplingTest, NonFiniteRowsDecideNothing) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (float bad : {nan, inf, -inf}) {
    for (uint32_t at : {0u, 23u, 59u}) {
      auto logits = test_logits();
      logits[at] = bad;
      for (const engine::SamplingParams& sp : {engine::SamplingParams{0.0f, 0, 1.0f, 5},
                                              engine::SamplingParams{1.0f, 0, 1.0f, 5},
                                              engine::SamplingParams{0.7f, 5, 0.9f, 5}}) {
        SCOPED_TRACE(fmt::format("bad {} at {}, T {}", bad, at, sp.temperature));
        for (int32_t id : draw(logits, 8, engine::device_params(sp, 0))) EXPECT_EQ(id, NON_FINITE_ROW_ID);
        // With a draft (the favourite, 11): never accepted, no replacement.
        for (int32_t id : draw(logits, 8, engine::device_params(sp, 0), 11)) EXPECT_EQ(id, NON_FINITE_ROW_ID);
      }
    }
  }
  // Drawing drafts (the second scheme): rows 1 and 3 of four hold a NaN.
  const uint32_t Vd = 30, rows = 4;
  std::vector<float> many;
  for (uint32_t r = 0; r < rows; ++r) {
    auto row = random_floats(Vd, 17 + r, -1, 3);
    if (r % 2) row[r * 5] = nan;
    many.insert(many.end(), row.begin(), row.end());
  }
  std::vector<int32_t> d2t(Vd, 7);
  vk::Buffer db = device_buffer(many, "draft logits"), d2tb = device_buffer(d2t, "d2t"),
             q(gpu().ctx, uint64_t(rows) * Vd * 4, vk::MemoryKind::Device, "q"),
             drafts(gpu().ctx, rows * 4, vk::MemoryKind::Device, "drafts"),
             scratch(gpu().ctx, rows * 4, vk::MemoryKind::Device, "scratch");
  vk::Recorder rec(gpu().ctx);
  ops::OpContext oc{gpu(), rec};
  vk::BufferRange d2r(d2tb);
  ops::DraftDistribution dist{ops::DraftDistribution::Mode::Draw, q, Vd, &d2r, {}, 0};
  rec.begin();
  ops::sample(oc, ops::Act(db, Vd), rows, Vd, nullptr, ops::IntVec{drafts}, ops::IntVec{scratch},
              engine::device_params({1.0f, 0, 1.0f, 9}, 0), ops::AcceptRule::Correct, &dist, 8);
  rec.submit_and_wait();
  const auto d = read_back<int32_t>(drafts, rows);
  for (uint32_t r = 0; r < rows; ++r) {
    if (r % 2)
      EXPECT_EQ(d[r], NON_FINITE_ROW_ID) << r;
    else
      EXPECT_TRUE(d[r] >= 7 && d[r] < int32_t(Vd) + 7) << r << ": " << d[r];
  }
}

// The second scheme: drafts drawn from the draft's distribution q (over a draft vocabulary
// that is a subset of the target's, mapped by d2t), accepted with min(1, p/q), replaced from
// max(0, p - q). The emitted tokens follow p; accepting with p(d) alone (ignoring q) does not.
TEST_F(SamplingTest, SampledDraftsKeepTheTargetDistribution) {
  const uint32_t V = 60, Vd = 30, rows = 6000;
  auto target = test_logits();
  auto draft_logits = random_floats(Vd, 17, -1, 3);  // draft id j is target id 2j
  std::vector<int32_t> d2t(Vd), t2d(V, -1);
  for (uint32_t j = 0; j < Vd; ++j) d2t[j] = int32_t(j), t2d[2 * j] = int32_t(j);
  std::vector<float> many_t, many_d;
  for (uint32_t r = 0; r < rows; ++r) {
    many_t.insert(many_t.end(), target.begin(), target.end());
    many_d.insert(many_d.end(), draft_logits.begin(), draft_logits.end());
  }
  engine::SamplingParams sp{1.0f, 0, 1.0f, 31};
  vk::Buffer tb = device_buffer(many_t, "target logits"), db = device_buffer(many_d, "draft logits"),
             d2tb = device_buffer(d2t, "d2t"), t2db = device_buffer(t2d, "t2d"),
             q(gpu().ctx, uint64_t(rows) * Vd * 4, vk::MemoryKind::Device, "q"),
             drafts(gpu().ctx, rows * 4, vk::MemoryKind::Device, "drafts"),
             scratch(gpu().ctx, rows * 4, vk::MemoryKind::Device, "scratch"),
             ids(gpu().ctx, rows * 4, vk::MemoryKind::Device, "ids"), acc(gpu().ctx, rows * 4, vk::MemoryKind::Device, "acc");
  auto run = [&](ops::AcceptRule rule) {
    vk::Recorder rec(gpu().ctx);
    ops::OpContext oc{gpu(), rec};
    vk::BufferRange d2r(d2tb);
    ops::DraftDistribution draw{ops::DraftDistribution::Mode::Draw, q, Vd, &d2r, {}, 0};
    ops::DraftDistribution verify{ops::DraftDistribution::Mode::Verify, q, Vd, nullptr, t2db, 0};
    ops::IntVec dv{drafts};
    rec.begin();
    ops::sample(oc, ops::Act(db, Vd), rows, Vd, nullptr, dv, ops::IntVec{scratch}, engine::device_params(sp, 0),
                ops::AcceptRule::Correct, &draw, 8);
    ops::sample(oc, ops::Act(tb, V), rows, V, &dv, ops::IntVec{ids}, ops::IntVec{acc}, engine::device_params(sp, 0),
                rule, &verify);
    rec.submit_and_wait();
    auto d = read_back<int32_t>(drafts, rows), out = read_back<int32_t>(ids, rows), a = read_back<int32_t>(acc, rows);
    size_t accepted = 0;
    for (uint32_t r = 0; r < rows; ++r) {
      EXPECT_EQ(d[r] % 2, 0) << "a draft outside the draft vocabulary";
      if (a[r]) out[r] = d[r], ++accepted;
    }
    return std::pair{out, accepted};
  };
  auto dist = engine::filtered_distribution(target, sp);
  auto [good, accepted] = run(ops::AcceptRule::Correct);
  EXPECT_LT(total_variation(good, dist), kTvBound);
  EXPECT_GT(accepted, 0u);
  auto [bad, unused] = run(ops::AcceptRule::AcceptIfArgmax);
  EXPECT_GT(total_variation(bad, dist), 2 * kTvBound);
}

// Per-row settings: one dispatch over rows that each read their own record (greedy beside
// several temperatures, top-k, top-p and seeds, through a row index that repeats and permutes
// records) gives every row the id and acceptance flag of that row sampled alone with the same
// settings as push constants: plain draws, and acceptance of a draft.
TEST_F(SamplingTest, EachRowSamplesWithItsOwnRecord) {
  const uint32_t n = 60, rows = 7;
  const std::vector<engine::SamplingParams> records = {
      {}, {0.7f, 10, 1.0f, 3}, {1.3f, 0, 0.8f, 99}, {0.9f, 12, 0.9f, 3}, {1.0f, 0, 1.0f, 1ull << 40}};
  const std::vector<int32_t> index = {3, 0, 1, 4, 2, 1, 0};  // row r reads record index[r]
  std::vector<float> logits;
  for (uint32_t r = 0; r < rows; ++r) {
    std::vector<float> row = random_floats(n, 50 + r, -2, 2);
    row[5 + r] = 2.5f;  // a favourite of its own, so that drafts are sometimes accepted
    logits.insert(logits.end(), row.begin(), row.end());
  }
  std::vector<int32_t> words(records.size() * SAMPLE_ROW_WORDS);
  for (size_t i = 0; i < records.size(); ++i) engine::write_row_settings(records[i], words.data() + i * SAMPLE_ROW_WORDS);
  // Records from word 3 and the index from word 2 of their buffers: the offsets are honoured.
  words.insert(words.begin(), 3, -7);
  std::vector<int32_t> index_words = index;
  index_words.insert(index_words.begin(), 2, 4);
  const std::vector<int32_t> draft_ids = {5, 6, 9, 8, 13, 10, 11};
  vk::Buffer lb = device_buffer(logits, "logits"), rb = device_buffer(words, "records"),
             ib = device_buffer(index_words, "index"), db = device_buffer(draft_ids, "drafts"),
             ids(gpu().ctx, rows * 4, vk::MemoryKind::Device, "ids"), acc(gpu().ctx, rows * 4, vk::MemoryKind::Device, "accept");
  const ops::IntVec record_words{rb, 3}, row_index{ib, 2}, drafts{db};
  for (const bool with_drafts : {false, true}) {
    const std::string what = with_drafts ? "acceptance" : "plain draws";
    vk::Recorder rec(gpu().ctx);
    ops::OpContext oc{gpu(), rec};
    rec.begin();
    ops::SampleParams per_row{.first_position = 20, .row_params = &record_words, .row_index = &row_index};
    ops::sample(oc, ops::Act(lb, n), rows, n, with_drafts ? &drafts : nullptr, ops::IntVec{ids}, ops::IntVec{acc},
                per_row);
    rec.submit_and_wait();
    const auto got_ids = read_back<int32_t>(ids, rows), got_acc = read_back<int32_t>(acc, rows);
    for (uint32_t r = 0; r < rows; ++r) {
      // Row r alone: its logits at offset r, its position 20 + r, its record's settings as push constants.
      vk::Recorder one(gpu().ctx);
      ops::OpContext oc1{gpu(), one};
      one.begin();
      const ops::IntVec draft_r{db, r};
      ops::sample(oc1, ops::Act(lb, n).row(r), 1, n, with_drafts ? &draft_r : nullptr, ops::IntVec{ids},
                  ops::IntVec{acc}, engine::device_params(records[index[r]], 20 + r));
      one.submit_and_wait();
      EXPECT_EQ(got_ids[r], read_back<int32_t>(ids, 1)[0]) << what << ", row " << r << " (record " << index[r] << ")";
      EXPECT_EQ(got_acc[r], read_back<int32_t>(acc, 1)[0]) << what << ", row " << r << " (record " << index[r] << ")";
    }
  }
}

}  // namespace
}  // namespace eaglevk::testing
