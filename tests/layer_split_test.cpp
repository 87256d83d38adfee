// A target's layers split across Vulkan devices (issue 47): the same lavapipe device opened
// more than once, each a logical device of its own, holds contiguous layer ranges; the hidden
// state crosses each boundary through host-visible staging once per pass. The kernels and
// their order are those of one device, so tiny pairs A and B give the single-device run's
// tokens, logits, log-probabilities and EAGLE-3 acceptance to the bit, split at every layer
// boundary, plainly, batched, by chains and by trees (the draft on the last device, the tap rows
// hopped);
// the memory plan is per device and refuses by device.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <string>

#include <gtest/gtest.h>

#include <eaglevk/eaglevk.hpp>

#include "models/target.h"
#include "runtime/engine/decoder.h"
#include "runtime/engine/layer_split.h"
#include "runtime/ops/gpu.h"
#include "support/real_dims.h"
#include "support/synthetic.h"

namespace eaglevk::testing {
namespace {

const std::string kAssets = EAGLEVK_ASSETS;
const std::string kTarget = kAssets + "/tiny-llama3";
constexpr uint32_t kContext = 256;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

// The placement's definition, written out: device d ends at the layer nearest to L times the
// running share, at least one layer after the previous device and leaving one for each later.
std::vector<models::LayerRange> reference_placement(uint32_t layers, const std::vector<double>& shares) {
  const double total = std::accumulate(shares.begin(), shares.end(), 0.0);
  std::vector<models::LayerRange> out;
  double sum = 0;
  uint32_t first = 0;
  for (size_t d = 0; d < shares.size(); ++d) {
    sum += shares[d];
    int64_t end = d + 1 == shares.size() ? layers : int64_t(layers * sum / total + 0.5);
    end = std::max<int64_t>(end, first + 1);
    end = std::min<int64_t>(end, layers - int64_t(shares.size() - 1 - d));
    out.push_back({first, uint32_t(end)});
    first = uint32_t(end);
  }
  return out;
}

TEST(LayerSplit, PlacementIsContiguousProportionalAndGivesEveryDeviceALayer) {
  const std::vector<std::pair<uint32_t, std::vector<double>>> cases = {
      {8, {3, 1}}, {8, {1, 1}}, {8, {1, 1, 1}}, {48, {24e9, 8e9}}, {7, {1, 100}}, {5, {100, 1, 1}}, {3, {1, 1, 1}}};
  for (const auto& [layers, shares] : cases) {
    const std::vector<models::LayerRange> got = engine::place_layers(layers, shares);
    const std::vector<models::LayerRange> want = reference_placement(layers, shares);
    ASSERT_EQ(got.size(), shares.size());
    uint32_t next = 0;
    for (size_t d = 0; d < got.size(); ++d) {
      EXPECT_EQ(got[d].first, want[d].first) << layers << " layers, device " << d;
      EXPECT_EQ(got[d].end, want[d].end) << layers << " layers, device " << d;
      EXPECT_EQ(got[d].first, next);
      EXPECT_GT(got[d].end, got[d].first);
      next = got[d].end;
    }
    EXPECT_EQ(next, layers);
  }
  // --split 3,1 on pair A's 8 layers: three quarters on the first device.
  const auto three_one = engine::place_layers(8, std::vector<double>{3, 1});
  EXPECT_EQ(three_one[0].end, 6u);
  EXPECT_NE(error_of([] { engine::place_layers(2, std::vector<double>{1, 1, 1}); })
                .find("3 devices for a model of 2 layers"),
            std::string::npos);
  EXPECT_NE(error_of([] { engine::place_layers(8, std::vector<double>{1, 0}); }).find("device 1's share"),
            std::string::npos);
}

api::Runtime open_devices(size_t n) { return api::open_runtime(std::vector<std::string>(n, "0")); }

std::shared_ptr<const api::Model> load(const api::Runtime& rt, std::vector<double> split = {}) {
  api::LoadOptions o;
  o.context = kContext;
  o.split = std::move(split);
  return api::load_model(rt, api::plan_load(rt, kTarget, o));
}

struct SplitRun {
  std::vector<int32_t> tokens;
  std::vector<std::pair<int32_t, float>> top_logits;  // the whole last prompt row
  std::vector<engine::TokenLogprobs> logprobs;
  engine::HopStats hops;
};

SplitRun generate(const api::Model& m, const std::vector<int32_t>& prompt, bool replay = vk::replay_from_env(),
                  uint32_t n_predict = 12, uint32_t context = kContext) {
  engine::DecoderConfig c;
  c.context = context;
  engine::Decoder dec(*m.device->gpu, *m.target, nullptr, c);
  dec.replay = replay;
  engine::GenerationOptions o;
  o.n_predict = n_predict;
  o.ignore_eos = true;
  o.top_logits = uint32_t(m.vocab_size());
  o.logprobs = 4;
  engine::SpecStats stats;
  engine::GenerationResult r = dec.generate(prompt, o, stats);
  return {r.tokens, r.prompt_top_logits, r.logprobs, dec.split_hops()};
}

void expect_same_bits(const SplitRun& a, const SplitRun& b, const std::string& what) {
  EXPECT_EQ(a.tokens, b.tokens) << what;
  ASSERT_EQ(a.top_logits.size(), b.top_logits.size()) << what;
  for (size_t i = 0; i < a.top_logits.size(); ++i) {
    EXPECT_EQ(a.top_logits[i].first, b.top_logits[i].first) << what << " logit " << i;
    EXPECT_EQ(std::memcmp(&a.top_logits[i].second, &b.top_logits[i].second, 4), 0) << what << " logit " << i;
  }
  ASSERT_EQ(a.logprobs.size(), b.logprobs.size()) << what;
  for (size_t i = 0; i < a.logprobs.size(); ++i) {
    EXPECT_EQ(std::memcmp(&a.logprobs[i].logprob, &b.logprobs[i].logprob, 4), 0) << what << " token " << i;
    ASSERT_EQ(a.logprobs[i].top.size(), b.logprobs[i].top.size());
    for (size_t j = 0; j < a.logprobs[i].top.size(); ++j) {
      EXPECT_EQ(a.logprobs[i].top[j].first, b.logprobs[i].top[j].first) << what;
      EXPECT_EQ(std::memcmp(&a.logprobs[i].top[j].second, &b.logprobs[i].top[j].second, 4), 0) << what;
    }
  }
}

TEST(LayerSplit, TwoDevicesGiveTheSingleDeviceBitsAtEveryLayerBoundary) {
  const api::Runtime one = api::open_runtime("0");
  const auto whole = load(one);
  const uint32_t L = uint32_t(whole->target->config().num_hidden_layers), H = whole->target->config().hidden_size;
  const std::vector<int32_t> prompt = random_prompt(40, 11, whole->tokenizer.bos_id(), 4000);
  const SplitRun ref = generate(*whole, prompt);
  ASSERT_EQ(ref.tokens.size(), 12u);
  EXPECT_EQ(ref.hops.hops, 0u);

  const api::Runtime two = open_devices(2);
  ASSERT_EQ(two.devices.size(), 2u);
  ASSERT_NE(&two.devices[0]->gpu->ctx, &two.devices[1]->gpu->ctx);
  for (uint32_t b = 1; b < L; ++b) {
    const auto split = load(two, {double(b), double(L - b)});
    ASSERT_TRUE(split->split);
    ASSERT_EQ(split->target->earlier.size(), 1u);
    EXPECT_EQ(split->target->earlier[0].model->range().end, b);
    EXPECT_EQ(split->target->range().first, b);
    EXPECT_EQ(split->device, two.devices[1]);
    // Each part's weights are the plan's figure for its device (the loader's used tensors
    // against the plan's reading of the tensor names).
    EXPECT_EQ(split->target->earlier[0].model->weight_bytes(), split->split->devices[0].weights);
    EXPECT_EQ(split->target->weight_bytes(), split->split->devices[1].weights);
    const SplitRun got = generate(*split, prompt);
    expect_same_bits(ref, got, "split at layer " + std::to_string(b));
    // One hop per pass: the prompt's one prefill pass, then one a generated token but the first.
    const uint64_t passes = 1 + (got.tokens.size() - 1);
    EXPECT_EQ(got.hops.passes, passes);
    // Decode steps after the first resubmit the earlier part's recording, as the decoder's own;
    // recorded every time, the bits are the same.
    EXPECT_EQ(got.hops.resubmitted, vk::replay_from_env() ? passes - 2 : 0u);
    if (b == L / 2) {
      const SplitRun recorded = generate(*split, prompt, /*replay=*/false);
      expect_same_bits(ref, recorded, "recorded every pass");
      EXPECT_EQ(recorded.hops.resubmitted, 0u);
    }
    EXPECT_EQ(got.hops.hops, passes);
    EXPECT_EQ(got.hops.bytes, (prompt.size() + got.tokens.size() - 1) * H * 4ull);
  }
}

TEST(LayerSplit, ThreeDevicesAndTheSessionGiveTheSingleDeviceTokens) {
  const api::Runtime one = api::open_runtime("0");
  const auto whole = load(one);
  const uint32_t H = whole->target->config().hidden_size;
  const std::vector<int32_t> prompt = random_prompt(30, 5, whole->tokenizer.bos_id(), 4000);
  const api::Runtime three = open_devices(3);
  const auto split = load(three, {3, 3, 2});
  ASSERT_EQ(split->target->earlier.size(), 2u);
  const SplitRun ref = generate(*whole, prompt), got = generate(*split, prompt);
  expect_same_bits(ref, got, "three devices");
  EXPECT_EQ(got.hops.hops, 2 * got.hops.passes);  // two boundaries a pass
  EXPECT_EQ(got.hops.bytes, 2 * (prompt.size() + got.tokens.size() - 1) * H * 4ull);

  api::SessionParams p;
  p.max_new_tokens = 16;
  p.ignore_eos = true;
  p.context = kContext;
  EXPECT_EQ(api::Session(split, p).generate(prompt).tokens, api::Session(whole, p).generate(prompt).tokens);
}

TEST(LayerSplit, BatchedDecodingGivesEachSequenceTheSingleDeviceTokens) {
  const api::Runtime one = api::open_runtime("0"), two = open_devices(2);
  const auto whole = load(one), split = load(two, {5, 3});
  auto batch = [](const api::Model& m) {
    engine::DecoderConfig c;
    c.context = 128;
    c.batch = 3;
    engine::Decoder dec(*m.device->gpu, *m.target, nullptr, c);
    engine::GenerationOptions o;
    o.ignore_eos = true;
    std::vector<std::vector<int32_t>> out;
    for (uint32_t s = 0; s < 3; ++s) {
      o.n_predict = 6 + 3 * s;  // sequences leave at different rounds
      dec.start(s, random_prompt(9 + 7 * s, 20 + s, m.tokenizer.bos_id(), 4000), o);
    }
    while (dec.any_running()) dec.round();
    engine::SpecStats stats;
    for (uint32_t s = 0; s < 3; ++s) out.push_back(dec.take(s, stats).tokens);
    return out;
  };
  const auto a = batch(*whole), b = batch(*split);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a[2].size(), 12u);
}

TEST(LayerSplit, MemoryPlanIsPerDeviceAndRefusesByDevice) {
  const api::Runtime two = open_devices(2);
  api::LoadOptions o;
  o.context = kContext;
  const api::LoadPlan plan = api::plan_load(two, kTarget, o);
  ASSERT_TRUE(plan.split);
  const auto& d = plan.split->devices;
  ASSERT_EQ(d.size(), 2u);
  // Equal budgets: half the layers each, the KV cache of its own layers.
  EXPECT_EQ(d[0].layers.end, 4u);
  EXPECT_EQ(d[1].layers.first, 4u);
  EXPECT_EQ(d[0].kv_per_token, d[1].kv_per_token);
  EXPECT_EQ(d[0].kv_per_token + d[1].kv_per_token,
            api::plan_load(api::open_runtime("0"), kTarget, o).memory.kv_per_token);
  bool said = false;
  for (const std::string& note : plan.notes) said |= note.find("device 1 (") != std::string::npos;
  EXPECT_TRUE(said);

  // A device that cannot hold one layer is refused by name.
  const uint64_t saved0 = two.devices[0]->gpu->ctx.memory_budget, saved1 = two.devices[1]->gpu->ctx.memory_budget;
  two.devices[1]->gpu->ctx.memory_budget = 1 << 20;
  const std::string tiny = error_of([&] { api::plan_load(two, kTarget, o); });
  EXPECT_NE(tiny.find("device 1 ("), std::string::npos) << tiny;
  EXPECT_NE(tiny.find("less than one layer"), std::string::npos) << tiny;

  // Each device a byte short of its share at this context: the refusal gives every device's numbers.
  two.devices[0]->gpu->ctx.memory_budget = d[0].total(kContext) - 1;
  two.devices[1]->gpu->ctx.memory_budget = d[1].total(kContext) - 1;
  o.split = {1, 1};
  const std::string short_of = error_of([&] { api::plan_load(two, kTarget, o); });
  EXPECT_NE(short_of.find("device 0 ("), std::string::npos) << short_of;
  EXPECT_NE(short_of.find("device 1 ("), std::string::npos) << short_of;
  EXPECT_NE(short_of.find(engine::format_bytes(d[1].total(kContext))), std::string::npos) << short_of;
  // A shorter context fits each device: the refusal says how long.
  engine::DeviceShare s0 = d[0], s1 = d[1];
  s0.budget = d[0].total(kContext) - 1;
  s1.budget = d[1].total(kContext) - 1;
  const uint32_t fits = std::min(s0.max_context(), s1.max_context());
  ASSERT_GE(fits, 64u);
  ASSERT_LT(fits, kContext);
  EXPECT_NE(short_of.find("a context of at most " + std::to_string(fits) + " tokens"), std::string::npos) << short_of;
  two.devices[0]->gpu->ctx.memory_budget = saved0;
  two.devices[1]->gpu->ctx.memory_budget = saved1;
  // One share per device.
  api::LoadOptions three_shares = o;
  three_shares.split = {1, 1, 1};
  const std::string shares = error_of([&] { api::plan_load(two, kTarget, three_shares); });
  EXPECT_NE(shares.find("3 shares of the layers for 2 devices"), std::string::npos) << shares;
  // Shares on a runtime of one device: a warning, every layer on it.
  const api::LoadPlan single = api::plan_load(api::open_runtime("0"), kTarget, three_shares);
  EXPECT_FALSE(single.split);
  bool warned = false;
  for (const std::string& note : single.notes) warned |= note.find("runtime of one device") != std::string::npos;
  EXPECT_TRUE(warned);

  // With a draft: its weights and KV cache go with the last device.
  api::LoadOptions with_draft = o;
  with_draft.split = {};
  with_draft.draft = kAssets + "/tiny-llama3-eagle3";
  const api::LoadPlan drafted = api::plan_load(two, kTarget, with_draft);
  ASSERT_TRUE(drafted.split);
  EXPECT_EQ(drafted.split->devices[0].weights, d[0].weights);
  EXPECT_EQ(drafted.split->devices[0].kv_per_token, d[0].kv_per_token);
  EXPECT_GT(drafted.split->devices[1].kv_per_token, d[1].kv_per_token);
  EXPECT_EQ(drafted.split->devices[0].kv_per_token + drafted.split->devices[1].kv_per_token,
            api::plan_load(api::open_runtime("0"), kTarget, with_draft).memory.kv_per_token);
}

// An earlier device is charged what its part allocates (its layers' state without logits, its
// hop staging, the split front's inputs and tap rows) and the fixed part, not the logits, the
// draft and its taps the last device holds.
TEST(LayerSplit, AnEarlierDeviceIsChargedWhatItsPartAllocates) {
  const api::Runtime two = open_devices(2);
  api::LoadOptions o;
  o.context = kContext;
  o.draft = kAssets + "/tiny-llama3-eagle3";
  const api::LoadPlan plan = api::plan_load(two, kTarget, o);
  ASSERT_TRUE(plan.split);
  const engine::DeviceShare d0 = plan.split->devices[0], d1 = plan.split->devices[1];
  const auto split = api::load_model(two, plan);
  const models::TargetPart& part = split->target->earlier.at(0);
  {
    const models::TargetState s0 = models::make_target_state(*part.gpu, *part.model, kContext, o.max_rows, true);
    EXPECT_EQ(s0.logits_rows, 0u);  // the last part computes the logits
  }
  const uint64_t before = vk::memory_in_use();
  engine::SplitFront front(*split->target, kContext, kContext, o.max_rows, vk::arena_reuse_from_env());
  const uint64_t held = vk::memory_in_use() - before;  // all of it on device 0
  const uint64_t planned = d0.per_pass + d0.kv_per_token * kContext;
  std::printf("device 0: planned %llu bytes, its part holds %llu, fixed part %llu\n", (unsigned long long)planned,
              (unsigned long long)held, (unsigned long long)engine::kFixedPlanBytes);
  EXPECT_GE(planned, held);
  // Beyond the buffers, only the fixed part (and buffers' alignment).
  EXPECT_LE(planned, held + engine::kFixedPlanBytes + (64 << 10));
  // The last device: the whole pass's logits, the draft and the staging its input arrives in.
  const uint64_t staging = uint64_t(o.max_rows) * uint64_t(split->target->config().hidden_size) * 4 * (1 + models::kMaxHopTaps);
  EXPECT_EQ(d1.per_pass, api::plan_load(api::open_runtime("0"), kTarget, o).memory.per_pass + staging);
}

// EAGLE-3 chains with the draft on the last device and the tap rows of earlier devices' layers
// hopped beside the hidden state: the tokens, log-probabilities and acceptance of one device.
struct ChainRun {
  std::vector<int32_t> tokens;
  std::vector<engine::TokenLogprobs> logprobs;
  engine::SpecStats stats;
  engine::HopStats hops;
};

ChainRun chain(const api::Model& m, const std::vector<std::vector<int32_t>>& prompts, uint32_t k,
               engine::TreeParams tree = {}, uint32_t n_predict = 16, uint32_t context = kContext) {
  engine::DecoderConfig c;
  c.context = context;
  c.k = k;
  c.tree = tree;
  c.batch = uint32_t(prompts.size());
  engine::Decoder dec(*m.device->gpu, *m.target, m.draft.get(), c);
  engine::GenerationOptions o;
  o.n_predict = n_predict;
  o.ignore_eos = true;
  o.logprobs = 3;
  for (uint32_t s = 0; s < prompts.size(); ++s) dec.start(s, prompts[s], o);
  while (dec.any_running()) dec.round();
  ChainRun r;
  for (uint32_t s = 0; s < prompts.size(); ++s) {
    engine::GenerationResult g = dec.take(s, r.stats);
    r.tokens.insert(r.tokens.end(), g.tokens.begin(), g.tokens.end());
    r.logprobs.insert(r.logprobs.end(), g.logprobs.begin(), g.logprobs.end());
  }
  r.hops = dec.split_hops();
  return r;
}

void expect_same_chain(const ChainRun& a, const ChainRun& b, const std::string& what) {
  EXPECT_EQ(a.tokens, b.tokens) << what;
  ASSERT_EQ(a.logprobs.size(), b.logprobs.size()) << what;
  for (size_t i = 0; i < a.logprobs.size(); ++i)
    EXPECT_EQ(std::memcmp(&a.logprobs[i].logprob, &b.logprobs[i].logprob, 4), 0) << what << " token " << i;
  EXPECT_EQ(a.stats.num_drafts, b.stats.num_drafts) << what;
  EXPECT_EQ(a.stats.num_accepted_tokens, b.stats.num_accepted_tokens) << what;
  EXPECT_EQ(a.stats.accepted_at, b.stats.accepted_at) << what;
}

struct Pair {
  std::string target, draft;
};

class LayerSplitChain : public ::testing::TestWithParam<Pair> {};

TEST_P(LayerSplitChain, ChainsGiveTheSingleDeviceTokensAndAcceptanceAtEveryLayerBoundary) {
  api::LoadOptions o;
  o.context = kContext;
  o.draft = GetParam().draft;
  const api::Runtime one = api::open_runtime("0"), two = open_devices(2);
  const auto whole = api::load_model(one, api::plan_load(one, GetParam().target, o));
  const uint32_t L = uint32_t(whole->target->config().num_hidden_layers), H = whole->target->config().hidden_size;
  const std::vector<int32_t> prompt = random_prompt(24, 3, whole->tokenizer.bos_id(), 4000);
  const ChainRun ref = chain(*whole, {prompt}, 3);
  ASSERT_GT(ref.stats.num_drafts, 0u);
  EXPECT_EQ(ref.hops.hops, 0u);
  for (uint32_t b = 1; b < L; ++b) {
    o.split = {double(b), double(L - b)};
    const auto split = api::load_model(two, api::plan_load(two, GetParam().target, o));
    ASSERT_EQ(split->target->range().first, b);
    const ChainRun got = chain(*split, {prompt}, 3);
    expect_same_chain(ref, got, "split at layer " + std::to_string(b));
    // One hop a pass, each with the rows' hidden state and their three tap columns: the
    // prompt's prefill, then one verify pass of k + 1 rows a round.
    EXPECT_EQ(got.hops.hops, got.hops.passes);
    EXPECT_EQ(got.hops.passes, 1 + got.stats.num_drafts);
    EXPECT_EQ(got.hops.bytes, (prompt.size() + got.stats.num_drafts * 4ull) * 4 * H * 4);
  }
  // Batched chains over three devices.
  const std::vector<std::vector<int32_t>> prompts = {prompt, random_prompt(13, 4, whole->tokenizer.bos_id(), 4000)};
  const api::Runtime three = open_devices(3);
  o.split = {};
  const auto split3 = api::load_model(three, api::plan_load(three, GetParam().target, o));
  ASSERT_EQ(split3->target->earlier.size(), 2u);
  expect_same_chain(chain(*whole, prompts, 2), chain(*split3, prompts, 2), "three devices, batch of 2");
}

INSTANTIATE_TEST_SUITE_P(Pairs, LayerSplitChain,
                         ::testing::Values(Pair{kAssets + "/tiny-llama3", kAssets + "/tiny-llama3-eagle3"},
                                           Pair{kAssets + "/tiny-llama4", kAssets + "/tiny-llama4-eagle3"}),
                         [](const ::testing::TestParamInfo<Pair>& info) { return info.index == 0 ? "A" : "B"; });

// Trees: each earlier device gets the verified nodes' tokens, positions and ancestor table from
// the host and moves the last tree's accepted path to consecutive rows of its own KV cache.
TEST_P(LayerSplitChain, TreesGiveTheSingleDeviceTokensAndAcceptanceAtEveryLayerBoundary) {
  api::LoadOptions o;
  o.context = kContext;
  o.draft = GetParam().draft;
  const api::Runtime one = api::open_runtime("0"), two = open_devices(2);
  const auto whole = api::load_model(one, api::plan_load(one, GetParam().target, o));
  const uint32_t L = uint32_t(whole->target->config().num_hidden_layers), H = whole->target->config().hidden_size;
  const std::vector<int32_t> prompt = random_prompt(21, 8, whole->tokenizer.bos_id(), 4000);
  engine::TreeParams tree;
  tree.steps = 3;
  tree.topk = 2;
  tree.draft_tokens = 6;
  const ChainRun ref = chain(*whole, {prompt}, 0, tree);
  ASSERT_GT(ref.stats.num_drafts, 0u);
  ASSERT_GT(ref.stats.num_accepted_tokens, 0u);
  for (uint32_t b = 1; b < L; ++b) {
    o.split = {double(b), double(L - b)};
    const auto split = api::load_model(two, api::plan_load(two, GetParam().target, o));
    const ChainRun got = chain(*split, {prompt}, 0, tree);
    expect_same_chain(ref, got, "tree, split at layer " + std::to_string(b));
    // The prefill, then one verify pass of the tree's 6 nodes a round.
    EXPECT_EQ(got.hops.hops, got.hops.passes);
    EXPECT_EQ(got.hops.passes, 1 + got.stats.num_drafts);
    EXPECT_EQ(got.hops.bytes, (prompt.size() + got.stats.num_drafts * 6ull) * 4 * H * 4);
  }
  // The automatic tree's timing passes (engine::auto_tree_shape) run split too, hops included.
  engine::DecoderConfig c;
  c.context = kContext;
  c.tree = tree;
  const auto split = api::load_model(two, api::plan_load(two, GetParam().target, o));
  engine::Decoder dec(*split->device->gpu, *split->target, split->draft.get(), c);
  EXPECT_GT(dec.time_pass(false, 5, 2), 0.0);
  EXPECT_EQ(dec.split_hops().passes, 3u);  // a warm-up and two timed
  EXPECT_EQ(dec.split_hops().bytes, 3 * 5ull * 4 * H * 4);
  EXPECT_GT(dec.time_pass(true, 5, 1), 0.0);
  EXPECT_EQ(dec.split_hops().passes, 3u);  // the draft's passes stay on the last device
}

// Plain decoding of pair B's Llama-4 target (mixture-of-experts layers, NoPE layers, chunked
// attention) split at every layer boundary.
TEST(LayerSplit, PairBPlainDecodingGivesTheSingleDeviceBitsAtEveryLayerBoundary) {
  const std::string target = kAssets + "/tiny-llama4";
  api::LoadOptions o;
  o.context = kContext;
  const api::Runtime one = api::open_runtime("0"), two = open_devices(2);
  const auto whole = api::load_model(one, api::plan_load(one, target, o));
  const uint32_t L = uint32_t(whole->target->config().num_hidden_layers);
  const std::vector<int32_t> prompt = random_prompt(33, 9, whole->tokenizer.bos_id(), 4000);
  const SplitRun ref = generate(*whole, prompt);
  for (uint32_t b = 1; b < L; ++b) {
    o.split = {double(b), double(L - b)};
    const auto split = api::load_model(two, api::plan_load(two, target, o));
    expect_same_bits(ref, generate(*split, prompt), "pair B split at layer " + std::to_string(b));
  }
}

}  // namespace
}  // namespace eaglevk::testing

namespace eaglevk::testing {
namespace {

// A Qwen3 target with lm_head tied to the embeddings (a synthetic checkpoint): the last device
// loads the embedding table too, as its head, and the bits stay the single device's.
TEST(LayerSplit, TiedQwen3GivesTheSingleDeviceBitsAtEveryLayerBoundary) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("eaglevk-split-qwen3-" + std::to_string(::getpid()));
  SynthOptions so;
  so.layers = 4;
  so.tie_embeddings = true;
  so.tokenizer_dir = kAssets + "/tiny-llama3";
  write_synthetic_checkpoint(SynthKind::Qwen3_Tiny, dir, so);
  struct Cleanup {
    fs::path dir;
    ~Cleanup() { fs::remove_all(dir); }
  } cleanup{dir};
  api::LoadOptions o;
  o.context = kContext;
  const api::Runtime one = api::open_runtime("0"), two = open_devices(2);
  const auto whole = api::load_model(one, api::plan_load(one, dir, o));
  ASSERT_EQ(whole->target->architecture(), "Qwen3ForCausalLM");
  const std::vector<int32_t> prompt = random_prompt(26, 2, whole->tokenizer.bos_id(), 4000);
  const SplitRun ref = generate(*whole, prompt);
  for (uint32_t b = 1; b < so.layers; ++b) {
    o.split = {double(b), double(so.layers - b)};
    const auto split = api::load_model(two, api::plan_load(two, dir, o));
    // Tied: both parts hold the embedding table, and each part's weights are the plan's figure.
    EXPECT_EQ(split->target->earlier[0].model->weight_bytes(), split->split->devices[0].weights);
    EXPECT_EQ(split->target->weight_bytes(), split->split->devices[1].weights);
    EXPECT_GT(split->target->weight_bytes() + split->target->earlier[0].model->weight_bytes(),
              whole->target->weight_bytes());
    expect_same_bits(ref, generate(*split, prompt), "qwen3 split at layer " + std::to_string(b));
  }
}

}  // namespace
}  // namespace eaglevk::testing

namespace eaglevk::testing {
namespace {

// Routed experts in host memory with a split (api::LoadOptions::experts_in_host): each part keeps
// its own layers' experts in host-visible memory, read in place by the same kernels, so pair B's
// tokens, logits and acceptance are the single device's (experts on it) at every boundary.
const std::string kPairBTarget = kAssets + "/tiny-llama4", kPairBDraft = kAssets + "/tiny-llama4-eagle3";

api::LoadOptions pair_b_options(std::optional<bool> in_host, std::vector<double> split = {}) {
  api::LoadOptions o;
  o.context = kContext;
  o.draft = kPairBDraft;
  o.experts_in_host = in_host;
  o.split = std::move(split);
  return o;
}

// Every part's routed experts are in host memory (`host`) or on its device, as its share says.
void expect_parts_experts(const api::Model& m, const std::vector<bool>& host) {
  std::vector<const models::TargetModel*> parts;
  for (const auto& e : m.target->earlier) parts.push_back(e.model.get());
  parts.push_back(m.target.get());
  ASSERT_EQ(parts.size(), host.size());
  for (size_t d = 0; d < parts.size(); ++d) {
    const models::ExpertTraffic t = models::expert_traffic(*parts[d]);
    EXPECT_EQ(t.bytes, m.split->devices[d].routed_experts) << "device " << d;
    EXPECT_EQ(t.host_bytes, host[d] ? t.bytes : 0u) << "device " << d;
    EXPECT_EQ(m.split->devices[d].host_weights, host[d] ? t.bytes : 0u) << "device " << d;
    // The last device's figure holds the draft's weights too.
    if (d + 1 < parts.size()) {
      EXPECT_EQ(parts[d]->weight_bytes(), m.split->devices[d].weights) << "device " << d;
    }
  }
}

TEST(LayerSplit, ExpertsInHostGiveTheSingleDeviceBitsAndAcceptanceAtEveryLayerBoundary) {
  const api::Runtime one = api::open_runtime("0"), two = open_devices(2);
  const auto whole = api::load_model(one, api::plan_load(one, kPairBTarget, pair_b_options(false)));
  const uint32_t L = uint32_t(whole->target->config().num_hidden_layers);
  const std::vector<int32_t> prompt = random_prompt(24, 3, whole->tokenizer.bos_id(), 4000);
  const SplitRun plain_ref = generate(*whole, prompt);
  const ChainRun chain_ref = chain(*whole, {prompt}, 3);
  ASSERT_GT(chain_ref.stats.num_drafts, 0u);
  uint64_t routed = 0;
  for (uint32_t b = 1; b < L; ++b) {
    api::LoadPlan plan = api::plan_load(two, kPairBTarget, pair_b_options(true, {double(b), double(L - b)}));
    ASSERT_TRUE(plan.split);
    // The host holds every device's experts, and the one-device plan's experts are all of them.
    EXPECT_EQ(plan.split->host_weights(), plan.split->devices[0].routed_experts + plan.split->devices[1].routed_experts);
    routed = plan.split->host_weights();
    for (const engine::DeviceShare& s : plan.split->devices)
      EXPECT_EQ(s.total(kContext), s.weights - s.routed_experts + s.kv_per_token * kContext + s.per_pass);
    const auto split = api::load_model(two, std::move(plan));
    // Pair B's MoE layers are the odd ones: a part of layer 0 alone has no experts to move.
    expect_parts_experts(*split, {true, true});
    // The model's traffic (bench's bus bytes per token) adds up every part's experts.
    const api::ExpertTraffic t = api::expert_traffic(*split, 4), w = api::expert_traffic(*whole, 4);
    EXPECT_EQ(t.moe_layers, w.moe_layers);
    EXPECT_EQ(t.bytes, w.bytes);
    EXPECT_EQ(t.host_bytes, t.bytes);
    EXPECT_EQ(t.bytes_per_token, w.bytes_per_token);
    EXPECT_EQ(t.bytes_per_verify_pass_at_most, w.bytes_per_verify_pass_at_most);
    const std::string at = " with experts in host memory, split at layer " + std::to_string(b);
    expect_same_bits(plain_ref, generate(*split, prompt), "plain" + at);
    expect_same_chain(chain_ref, chain(*split, {prompt}, 3), "chain" + at);
  }
  EXPECT_EQ(routed, api::plan_load(one, kPairBTarget, pair_b_options(true)).memory.routed_experts);
}

TEST(LayerSplit, ExpertsMoveToHostOnlyOnTheDeviceWhoseShareDoesNotFit) {
  const api::Runtime one = api::open_runtime("0"), two = open_devices(2);
  const api::LoadPlan on_devices = api::plan_load(two, kPairBTarget, pair_b_options(false, {1, 1}));
  const engine::DeviceShare d0 = on_devices.split->devices[0], d1 = on_devices.split->devices[1];
  ASSERT_GT(d0.routed_experts, 0u);
  ASSERT_GT(d1.routed_experts, 0u);
  EXPECT_EQ(d0.host_weights + d1.host_weights, 0u);
  vk::Context &c0 = two.devices[0]->gpu->ctx, &c1 = two.devices[1]->gpu->ctx;
  const uint64_t saved0 = c0.memory_budget, saved1 = c1.memory_budget;
  // Device 0 between its share without and with its experts; device 1 holds its whole share.
  c0.memory_budget = d0.total(kContext) - d0.routed_experts / 2;
  c1.memory_budget = d1.total(kContext) + (1 << 20);
  api::LoadPlan chosen = api::plan_load(two, kPairBTarget, pair_b_options(std::nullopt, {1, 1}));
  EXPECT_EQ(chosen.split->devices[0].host_weights, d0.routed_experts);
  EXPECT_TRUE(chosen.split->devices[0].experts_in_host_automatic);
  EXPECT_EQ(chosen.split->devices[1].host_weights, 0u);
  EXPECT_EQ(chosen.context, kContext);
  bool noted = false, lined = false;
  for (const std::string& note : chosen.notes) {
    noted |= note.find("routed experts of their layers live in host memory") != std::string::npos &&
             note.find("device 0 (") != std::string::npos && note.find("device 1 (") == std::string::npos;
    lined |= note.find("(its routed experts, " + engine::format_bytes(d0.routed_experts) + ", in host memory)") !=
             std::string::npos;
  }
  EXPECT_TRUE(noted);
  EXPECT_TRUE(lined);
  // Forbidden, device 0's share does not fit: refused with every device's numbers.
  const std::string refused = error_of([&] { api::plan_load(two, kPairBTarget, pair_b_options(false, {1, 1})); });
  EXPECT_NE(refused.find("does not fit its devices"), std::string::npos) << refused;
  EXPECT_NE(refused.find("device 1 ("), std::string::npos) << refused;
  // A byte below device 0's share without its experts: moving them does not help, refused.
  c0.memory_budget = d0.total(kContext) - d0.routed_experts - 1;
  const std::string below = error_of([&] { api::plan_load(two, kPairBTarget, pair_b_options(std::nullopt, {1, 1})); });
  EXPECT_NE(below.find("does not fit its devices"), std::string::npos) << below;
  c0.memory_budget = d0.total(kContext) - d0.routed_experts / 2;
  const auto split = api::load_model(two, std::move(chosen));
  expect_parts_experts(*split, {true, false});
  const auto whole = api::load_model(one, api::plan_load(one, kPairBTarget, pair_b_options(false)));
  const std::vector<int32_t> prompt = random_prompt(20, 6, whole->tokenizer.bos_id(), 4000);
  expect_same_chain(chain(*whole, {prompt}, 3), chain(*split, {prompt}, 3), "experts of device 0 in host memory");
  c0.memory_budget = saved0;
  c1.memory_budget = saved1;
}

TEST(LayerSplit, ExpertsInHostRefuseADenseTargetAndAHostTooSmallForEveryDevicesExperts) {
  const api::Runtime two = open_devices(2);
  api::LoadOptions dense;
  dense.context = kContext;
  dense.experts_in_host = true;
  const std::string e = error_of([&] { api::plan_load(two, kTarget, dense); });
  EXPECT_NE(e.find("has no routed experts"), std::string::npos) << e;
  // The host's budget against both devices' experts together, each share fitting on its own.
  const api::LoadPlan plan = api::plan_load(two, kPairBTarget, pair_b_options(true, {1, 1}));
  const uint64_t total = plan.split->host_weights();
  ASSERT_GT(plan.split->devices[0].host_weights, 0u);
  ASSERT_GT(plan.split->devices[1].host_weights, 0u);
  vk::Context& c0 = two.devices[0]->gpu->ctx;
  const uint64_t saved = c0.host_memory_budget;
  c0.host_memory_budget = total - 1;
  ASSERT_GT(c0.host_memory_budget, plan.split->devices[0].host_weights);
  const std::string host = error_of([&] { api::plan_load(two, kPairBTarget, pair_b_options(true, {1, 1})); });
  EXPECT_NE(host.find("take " + engine::format_bytes(total) + " over the devices"), std::string::npos) << host;
  EXPECT_NE(host.find("but the host has"), std::string::npos) << host;
  // Kept on the devices, the host's budget does not matter.
  EXPECT_EQ(api::plan_load(two, kPairBTarget, pair_b_options(false, {1, 1})).split->host_weights(), 0u);
  c0.host_memory_budget = saved;
}

}  // namespace
}  // namespace eaglevk::testing

namespace eaglevk::testing {
namespace {

// Replayed split rounds: the last device resubmits each part of a chain or tree round (the draft
// steps up to the read-back, the verify pass after the earlier parts') from the round cache,
// keyed by the round's shape and the part. A resubmitted part reads the round's tokens,
// positions, tree and hopped rows from buffers its commands copy in, so it gives the tokens,
// acceptance, log-probabilities and tap rows of one device recording every round; the split
// decoder resubmits exactly twice as often as the one-device decoder (two parts for each of its
// whole rounds, recorded at the same shapes and bounds). The earlier device resubmits its part of
// a verify pass, tree or chain, where the last pass had its shape and the recording's attention
// bound reaches; a tree pass's words (compact path, ancestor table, root position) reach it
// through staging written before every submission.
struct ReplayedRun {
  ChainRun run;
  std::vector<float> taps;  // the tap sink's rows, every verified position
  uint64_t replayed = 0;
  std::vector<std::pair<uint32_t, uint32_t>> tree_rounds;  // each tree round's root position and nodes
};

// The earlier part's resubmissions over tree rounds of one shape, by their definition: the first
// tree pass is recorded (the prompt's pass before it has another shape), each later one
// resubmits while its attention bound (root position + nodes) is within the last recording's,
// which reaches `span` positions past its own pass, within the context.
uint64_t expected_tree_resubmissions(const std::vector<std::pair<uint32_t, uint32_t>>& rounds, uint32_t span) {
  uint64_t resubmitted = 0;
  uint32_t bound = 0;
  for (const auto& [base, nodes] : rounds) {
    const uint32_t kv = base + nodes;
    if (bound > 0 && kv <= bound)
      ++resubmitted;
    else
      bound = std::min(kContext, kv + span);
  }
  return resubmitted;
}

ReplayedRun replayed_run(const api::Model& m, const std::vector<int32_t>& prompt, uint32_t k,
                         const engine::TreeParams& tree, const engine::GenerationOptions& o, bool replay,
                         uint32_t span) {
  engine::DecoderConfig c;
  c.context = kContext;
  c.k = k;
  c.tree = tree;
  engine::Decoder dec(*m.device->gpu, *m.target, m.draft.get(), c);
  dec.replay = replay;
  dec.replay_span = span;
  dec.set_draft_sampling(!tree.enabled() && !o.sampling.greedy());
  ReplayedRun r;
  dec.set_tap_sink([&](const engine::TapRows& t) { r.taps.insert(r.taps.end(), t.hidden.begin(), t.hidden.end()); });
  dec.set_tree_observer(
      [&](const engine::TreeRound& t) { r.tree_rounds.emplace_back(t.base, uint32_t(t.tokens.size())); });
  const engine::GenerationResult g = dec.generate(prompt, o, r.run.stats);
  r.run.tokens = g.tokens;
  r.run.logprobs = g.logprobs;
  r.run.hops = dec.split_hops();
  r.replayed = dec.replayed_rounds();
  return r;
}

TEST_P(LayerSplitChain, ReplayedChainAndTreeRoundsGiveTheSingleDeviceRecordedBits) {
  api::LoadOptions lo;
  lo.context = kContext;
  lo.draft = GetParam().draft;
  const api::Runtime one = api::open_runtime("0"), two = open_devices(2);
  const auto whole = api::load_model(one, api::plan_load(one, GetParam().target, lo));
  const uint32_t L = uint32_t(whole->target->config().num_hidden_layers);
  lo.split = {double(L / 2), double(L - L / 2)};
  const auto split = api::load_model(two, api::plan_load(two, GetParam().target, lo));
  ASSERT_EQ(split->target->earlier.size(), 1u);
  const std::vector<int32_t> prompt = random_prompt(19, 12, whole->tokenizer.bos_id(), 4000);
  engine::TreeParams tree;
  tree.steps = 3;
  tree.topk = 2;
  tree.draft_tokens = 6;
  struct Case {
    const char* what;
    bool tree;
    float temperature;
    uint32_t span;  // 8: recordings serve a few positions, so parts are recorded again as the context grows
  } cases[] = {{"greedy chain", false, 0, 512},
               {"sampled chain, drafts drawn", false, 0.9f, 8},
               {"greedy tree", true, 0, 512},
               {"sampled tree", true, 0.9f, 8}};
  for (const Case& c : cases) {
    engine::GenerationOptions o;
    o.n_predict = 40;
    o.ignore_eos = true;
    o.logprobs = 3;
    o.sampling.temperature = c.temperature;
    o.sampling.top_k = 40;
    o.sampling.seed = 5;
    const uint32_t k = c.tree ? 0 : 3;
    const engine::TreeParams t = c.tree ? tree : engine::TreeParams{};
    const std::string what = std::string(c.what) + ", split at layer " + std::to_string(L / 2);
    const ReplayedRun ref = replayed_run(*whole, prompt, k, t, o, /*replay=*/false, c.span);
    const ReplayedRun whole_replayed = replayed_run(*whole, prompt, k, t, o, /*replay=*/true, c.span);
    const ReplayedRun got = replayed_run(*split, prompt, k, t, o, /*replay=*/true, c.span);
    const ReplayedRun recorded = replayed_run(*split, prompt, k, t, o, /*replay=*/false, c.span);
    ASSERT_EQ(ref.run.tokens.size(), o.n_predict) << what;
    ASSERT_GT(ref.run.stats.num_drafts, 4u) << what;
    EXPECT_EQ(ref.replayed, 0u) << what;
    EXPECT_EQ(recorded.replayed, 0u) << what;
    // The replayed split run and the recorded one against one device recording every round.
    for (const ReplayedRun* r : {&got, &recorded, &whole_replayed}) {
      const std::string run = what + (r == &got ? ", replayed" : r == &recorded ? ", recorded" : ", one device replayed");
      expect_same_chain(ref.run, r->run, run);
      ASSERT_EQ(r->taps.size(), ref.taps.size()) << run;
      EXPECT_EQ(std::memcmp(r->taps.data(), ref.taps.data(), ref.taps.size() * 4), 0) << run;
    }
    // Both parts of a round resubmit where the one-device round does.
    EXPECT_GT(whole_replayed.replayed, 0u) << what;
    EXPECT_EQ(got.replayed, 2 * whole_replayed.replayed) << what;
    EXPECT_EQ(got.run.hops.passes, 1 + got.run.stats.num_drafts) << what;
    // The earlier device resubmits its part of the verify passes, never when not replaying.
    EXPECT_EQ(recorded.run.hops.resubmitted, 0u) << what;
    EXPECT_GT(got.run.hops.resubmitted, 0u) << what;
    if (c.tree) {
      ASSERT_EQ(got.tree_rounds.size(), got.run.stats.num_drafts) << what;
      for (const auto& round : got.tree_rounds) ASSERT_EQ(round.second, tree.draft_tokens) << what;
      const uint64_t want = expected_tree_resubmissions(got.tree_rounds, c.span);
      EXPECT_EQ(got.run.hops.resubmitted, want) << what;
      // A short span records the part again as the context grows; a long one serves every round.
      if (c.span == 8)
        EXPECT_LT(want, got.tree_rounds.size() - 1) << what;
      else
        EXPECT_EQ(want, got.tree_rounds.size() - 1) << what;
    }
  }
}

// Llama-4 Scout's per-tensor shapes split across two devices: hidden 5120, 16 experts whose
// [16, 5120, 16384] gate_up tensor (2.7 GB) is more than one allocation, a 202,048-token
// vocabulary and an EAGLE-3 head with all of it, three layers (dense, experts, dense, as Maverick
// alternates), each tapped by the draft. Split after layer 2, the first device holds the
// embeddings and two layers, the experts of the second in host memory, and hops its hidden state
// and tap columns to the last device (the last layer, lm_head and the draft): the tokens,
// logits, log-probabilities and acceptance are one device's (experts on it) to the bit. About
// 14 GB of host memory a model: the single device's run ends before the split one loads, and
// one split is all the suite's time allows (the tiny pairs take every boundary).
struct ScoutPair {
  std::filesystem::path root, target, draft;
  ScoutPair() {
    root = std::filesystem::temp_directory_path() / ("eaglevk-split-scout-" + std::to_string(::getpid()));
    target = root / "llama4-scout";
    draft = root / "llama4-scout-eagle3";
    SynthOptions o;
    o.layers = 3;
    o.moe_step = 2;  // layer 1 holds the experts
    o.tokenizer_dir = kAssets + "/tiny-llama3";  // the loader wants a tokenizer; the ids are random
    write_synthetic_checkpoint(SynthKind::Llama4_Scout, target, o);
    o.tokenizer_dir.clear();
    o.aux_layers = {0, 1, 2};
    write_synthetic_checkpoint(SynthKind::Eagle3_Scout, draft, o);
  }
  ~ScoutPair() { std::filesystem::remove_all(root); }
};


TEST(LayerSplitScout, ScoutShapeSplitWithExpertsInHostGivesTheSingleDeviceBitsAndAcceptance) {
  const ScoutPair files;
  constexpr uint32_t kScoutContext = 64, kTokens = 4;
  api::LoadOptions o;
  o.context = kScoutContext;
  o.draft = files.draft;
  engine::GenerationOptions go;
  go.n_predict = kTokens;
  go.ignore_eos = true;
  go.logprobs = 3;
  std::vector<int32_t> prompt;
  SplitRun plain_ref;
  ReplayedRun chain_ref;
  uint64_t routed = 0;
  {
    const api::Runtime one = api::open_runtime("0");
    const api::LoadPlan plan = api::plan_load(one, files.target, o);
    routed = plan.memory.routed_experts;
    const auto whole = api::load_model(one, plan);
    ASSERT_EQ(whole->target->config().hidden_size, 5120);
    ASSERT_EQ(whole->vocab_size(), 202048);
    ASSERT_EQ(whole->draft->config.draft_vocab_size, 202048);
    prompt = random_prompt(10, 7, 1, 200000);
    plain_ref = generate(*whole, prompt, vk::replay_from_env(), kTokens, kScoutContext);
    chain_ref = replayed_run(*whole, prompt, 3, {}, go, vk::replay_from_env(), 512);
  }
  ASSERT_EQ(plain_ref.tokens.size(), kTokens);
  ASSERT_GT(chain_ref.run.stats.num_drafts, 0u);
  ASSERT_FALSE(chain_ref.taps.empty());
  // 16 experts, each a [5120, 16384] gate_up and a [8192, 5120] down in bf16
  EXPECT_EQ(routed, 16ull * (5120 * 16384 + 8192 * 5120) * 2);
  const uint64_t H = 5120;
  const api::Runtime two = open_devices(2);
  o.split = {2, 1};
  o.experts_in_host = true;
  const api::LoadPlan plan = api::plan_load(two, files.target, o);
  ASSERT_TRUE(plan.split);
  const std::vector<engine::DeviceShare>& d = plan.split->devices;
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].layers.end, 2u);
  EXPECT_EQ(d[0].routed_experts, routed);  // layer 1's, in host memory for device 0
  EXPECT_EQ(d[1].routed_experts, 0u);
  EXPECT_EQ(plan.split->host_weights(), routed);
  const auto split = api::load_model(two, plan);
  const models::TargetModel& first = *split->target->earlier.at(0).model;
  EXPECT_EQ(first.weight_bytes(), d[0].weights);
  EXPECT_EQ(models::expert_traffic(first).host_bytes, routed);
  const SplitRun plain = generate(*split, prompt, vk::replay_from_env(), kTokens, kScoutContext);
  expect_same_bits(plain_ref, plain, "plain");
  EXPECT_EQ(plain.hops.hops, plain.hops.passes);
  EXPECT_EQ(plain.hops.passes, kTokens);  // the prefill, then every token but the first
  EXPECT_EQ(plain.hops.bytes, (prompt.size() + kTokens - 1) * H * 4);
  // The chain: with random weights the draft is rarely accepted, so the tap rows its verify
  // passes hand the draft (two of the three columns hopped from the first device) are compared
  // too, bit for bit.
  const ReplayedRun got = replayed_run(*split, prompt, 3, {}, go, vk::replay_from_env(), 512);
  expect_same_chain(chain_ref.run, got.run, "chain");
  ASSERT_EQ(got.taps.size(), chain_ref.taps.size());
  EXPECT_EQ(std::memcmp(got.taps.data(), chain_ref.taps.data(), got.taps.size() * 4), 0);
  // Each hop carries the rows' hidden state and their three tap columns.
  EXPECT_EQ(got.run.hops.passes, 1 + got.run.stats.num_drafts);
  EXPECT_EQ(got.run.hops.bytes, (prompt.size() + got.run.stats.num_drafts * 4ull) * 4 * H * 4);
}

}  // namespace
}  // namespace eaglevk::testing
