// The facade's additions for the CLI's run, bench, devices and inspect (issue 42: one front
// door): each checked against a reference that does not go through it: the checkpoint's own
// config.json, shorter generations of the same session, plain loops over the output.
#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <eaglevk/eaglevk.hpp>

#include "support/golden.h"

namespace eaglevk::testing {
namespace {

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

struct Loaded {
  api::Runtime runtime = api::open_runtime();
  std::shared_ptr<const api::Model> pair = api::load_model(runtime, asset("tiny-llama3"), asset("tiny-llama3-eagle3"));
};

Loaded& loaded() {
  static Loaded l;
  return l;
}

const std::vector<int32_t> kPrompt = {1, 450, 10175, 5439, 297, 445, 16385};

std::vector<int32_t> prompt_in_vocab(const api::Model& m) {
  std::vector<int32_t> ids = kPrompt;
  for (int32_t& id : ids) id %= m.vocab_size();
  return ids;
}

TEST(ApiFrontDoor, ModelInfoIsTheCheckpointsConfig) {
  const api::ModelInfo info = api::model_info(*loaded().pair);
  const nlohmann::json target = read_json(asset("tiny-llama3") + "/config.json");
  EXPECT_EQ(info.vocab_size, target["vocab_size"].get<int32_t>());
  EXPECT_EQ(info.hidden_size, target["hidden_size"].get<uint32_t>());
  EXPECT_EQ(info.layers, target["num_hidden_layers"].get<uint32_t>());
  if (target.contains("bos_token_id")) EXPECT_EQ(info.bos_token_id, target["bos_token_id"].get<int32_t>());
  // The weights as `inspect` counts them from the files, without loading them.
  const nlohmann::json files = api::describe_checkpoint(asset("tiny-llama3"));
  EXPECT_EQ(info.parameters, files["parameters"].get<uint64_t>());
  // inspect's estimate of the device bytes (norms as f32) is within 1% of what was uploaded.
  const double on_device = files["bytes_on_device"].get<double>();
  EXPECT_NEAR(double(info.weight_bytes), on_device, 0.01 * on_device);
  ASSERT_EQ(info.draft_taps.size(), 3u);
  // The head's own tap ids, when its config names them; else the family default (2, L/2, L-3).
  const uint32_t L = info.layers;
  const std::vector<uint32_t> family = {2, L / 2, L - 3};
  EXPECT_EQ(info.default_taps, family);
  if (info.draft_taps_default) EXPECT_EQ(info.draft_taps, family);
  else EXPECT_FALSE(info.draft_taps_rule.empty());
  // A model without routed experts has no expert traffic.
  EXPECT_EQ(api::expert_traffic(*loaded().pair, 4).moe_layers, 0u);
}

TEST(ApiFrontDoor, DescribeCheckpointCountsTheFiles) {
  const nlohmann::json d = api::describe_checkpoint(asset("tiny-llama3"));
  const nlohmann::json config = read_json(asset("tiny-llama3") + "/config.json");
  EXPECT_EQ(d["format"], "safetensors");
  EXPECT_EQ(d["architecture"], config["architectures"][0]);
  EXPECT_EQ(d["config"]["hidden_size"], config["hidden_size"]);
  EXPECT_EQ(d["config"]["num_hidden_layers"], config["num_hidden_layers"]);
  // The tensor types' counts add up to the whole.
  uint64_t parameters = 0, bytes = 0;
  for (auto& [type, t] : d["tensor_types"].items()) {
    parameters += t["parameters"].get<uint64_t>();
    bytes += t["bytes"].get<uint64_t>();
  }
  EXPECT_EQ(parameters, d["parameters"].get<uint64_t>());
  EXPECT_EQ(bytes, d["bytes_in_file"].get<uint64_t>());
  // A head is described as one, with the vocabulary of its config.
  const nlohmann::json h = api::describe_checkpoint(asset("tiny-llama3-eagle3"));
  ASSERT_TRUE(h.contains("draft"));
  EXPECT_FALSE(h.contains("vision"));
  EXPECT_TRUE(d.contains("vision"));
}

TEST(ApiFrontDoor, DevicesListTheOpenOne) {
  const std::vector<std::string> devices = api::describe_devices();
  ASSERT_FALSE(devices.empty());
  const std::string& name = loaded().runtime.device_name;
  EXPECT_TRUE(std::any_of(devices.begin(), devices.end(), [&](const std::string& d) { return d.find(name) != std::string::npos; }))
      << name;
}

// The prompt reports against generations of one token: the argmax at prompt position i is the
// greedy token after the prompt's first i + 1 tokens, and the largest logit is the first token.
TEST(ApiFrontDoor, PromptReportsMatchOneTokenGenerations) {
  const auto& m = loaded().pair;
  const std::vector<int32_t> prompt = prompt_in_vocab(*m);
  api::SessionParams p;
  p.k = 0;
  p.max_new_tokens = 1;
  p.top_logits = 5;
  p.prompt_argmax = true;
  p.ignore_eos = true;
  api::Session reports(m, p);
  const api::GenerateOutput r = reports.generate(prompt);
  ASSERT_EQ(r.prompt_argmax.size(), prompt.size());
  ASSERT_EQ(r.prompt_top_logits.size(), 5u);
  ASSERT_EQ(r.tokens.size(), 1u);
  EXPECT_EQ(r.prompt_top_logits[0].first, r.tokens[0]);
  for (size_t i = 1; i < r.prompt_top_logits.size(); ++i)
    EXPECT_GE(r.prompt_top_logits[i - 1].second, r.prompt_top_logits[i].second);
  EXPECT_EQ(r.prompt_ids, prompt);
  EXPECT_GT(r.prefill_seconds, 0);

  api::SessionParams plain = p;
  plain.top_logits = 0;
  plain.prompt_argmax = false;
  api::Session one(m, plain);
  for (size_t i = 0; i < prompt.size(); ++i) {
    const std::vector<int32_t> prefix(prompt.begin(), prompt.begin() + i + 1);
    EXPECT_EQ(one.generate(prefix).tokens.at(0), r.prompt_argmax[i]) << "position " << i;
  }
}

// A chat re-rendered whole each turn: the longest common prefix with the last sequence is kept,
// and the tokens are those of a fresh generation.
TEST(ApiFrontDoor, ReusingThePrefixKeepsTheTokens) {
  const auto& m = loaded().pair;
  const std::vector<int32_t> prompt = prompt_in_vocab(*m);
  for (const uint32_t k : {0u, 3u}) {
    SCOPED_TRACE(k);
    api::SessionParams p;
    p.k = k;
    p.max_new_tokens = 12;
    p.ignore_eos = true;
    api::Session session(m, p);
    const api::GenerateOutput first = session.generate(prompt);
    // The next "turn": the first sequence with its last two tokens changed, then more.
    std::vector<int32_t> next = session.sequence();
    next.resize(next.size() - 2);
    next.push_back(prompt[1]);
    next.push_back(prompt[2]);
    const std::vector<int32_t> previous = session.sequence();
    size_t common = 0;
    while (common < std::min(previous.size(), next.size() - 1) && previous[common] == next[common]) ++common;
    session.set_max_new_tokens(6);
    const api::GenerateOutput reused = session.generate_reusing_prefix(next);
    // Plainly every common row is kept; a speculative session keeps the rows both its caches
    // hold (the draft's lag behind the target), some of them.
    if (k == 0) EXPECT_EQ(reused.reused_tokens, common);
    else EXPECT_TRUE(reused.reused_tokens > 0 && reused.reused_tokens <= common) << reused.reused_tokens;
    EXPECT_EQ(reused.tokens.size(), 6u);
    api::Session fresh(m, p);
    fresh.set_max_new_tokens(6);
    const api::GenerateOutput alone = fresh.generate(next);
    EXPECT_EQ(alone.reused_tokens, 0u);
    EXPECT_EQ(reused.tokens, alone.tokens);
    EXPECT_STREQ(api::stop_reason(reused), "length");
    EXPECT_EQ(first.tokens.size(), 12u);
  }
}

// The taps of every verified position, in order: each row's token is the sequence's token at
// its position, and a row holds three tap layers of the hidden size.
TEST(ApiFrontDoor, TapCallbackSeesEveryVerifiedPosition) {
  const auto& m = loaded().pair;
  const std::vector<int32_t> prompt = prompt_in_vocab(*m);
  api::SessionParams p;
  p.k = 3;
  p.max_new_tokens = 10;
  p.ignore_eos = true;
  api::Session session(m, p);
  std::vector<int32_t> tokens, positions;
  size_t floats = 0;
  session.set_tap_callback([&](std::span<const int32_t> t, std::span<const int32_t> pos, std::span<const float> h) {
    tokens.insert(tokens.end(), t.begin(), t.end());
    positions.insert(positions.end(), pos.begin(), pos.end());
    floats += h.size();
  });
  session.generate(prompt);
  const std::vector<int32_t>& sequence = session.sequence();
  ASSERT_FALSE(positions.empty());
  ASSERT_EQ(tokens.size(), positions.size());
  EXPECT_EQ(floats, positions.size() * 3 * api::model_info(*m).hidden_size);
  for (size_t i = 0; i < positions.size(); ++i) {
    ASSERT_LT(size_t(positions[i]), sequence.size());
    EXPECT_EQ(tokens[i], sequence[positions[i]]) << "row " << i;
    if (i) EXPECT_EQ(positions[i], positions[i - 1] + 1);
  }
}

// The chain's limit as the decoder enforces it: the most draft tokens build a session, one more
// is refused.
TEST(ApiFrontDoor, SpeculationLimitsAreTheDecoders) {
  const auto& m = loaded().pair;
  const api::SpeculationLimits limits = api::speculation_limits();
  api::SessionParams p;
  p.context = 256;
  p.k = limits.chain_draft_tokens;
  EXPECT_NO_THROW(api::Session(m, p));
  p.k = limits.chain_draft_tokens + 1;
  EXPECT_THROW(api::Session(m, p), api::ApiError);
  p.k = 0;
  p.tree = {limits.tree_levels, limits.tree_topk, limits.tree_nodes};
  EXPECT_NO_THROW(api::Session(m, p));
  p.tree.draft_tokens = limits.tree_nodes + 1;
  EXPECT_THROW(api::Session(m, p), api::ApiError);
  // A shape already chosen comes back from auto_tree as it is.
  const engine::TreeParams chosen{2, 2, 4};
  const engine::TreeParams back = api::auto_tree(*m, chosen, {prompt_in_vocab(*m)});
  EXPECT_EQ(back.steps, 2u);
  EXPECT_EQ(back.topk, 2u);
  EXPECT_EQ(back.draft_tokens, 4u);
}

}  // namespace
}  // namespace eaglevk::testing
