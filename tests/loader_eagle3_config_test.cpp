// EAGLE-3 draft configs, host-only: the three source shapes and their tap-id rules, and tap ids
// that do not fit 32 bits (read as 64-bit and range-checked before narrowing; get<uint32_t>()
// used to wrap 2^32 + 1 to 1, a valid-looking tap).
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include <eaglevk/error.h>

#include "loader/eagle3_config.h"
#include "loader/llama4_config.h"
#include "support/loader_test_util.h"

namespace fs = std::filesystem;
using eaglevk::testing::expect_error;
using namespace eaglevk::loader;
using nlohmann::json;

namespace {

json read_json(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return json::parse(in);
}

const json& original() {  // LlamaForCausalLMEagle3, ids at the top level or under eagle_config
  static const json j = read_json(fs::path(EAGLEVK_ASSETS) / "tiny-llama3-eagle3" / "config.json");
  return j;
}
const json& speculators() {  // speculators_model_type "eagle3" with transformer_layer_config
  static const json j = read_json(fs::path(EAGLEVK_ASSETS) / "tiny-llama4-eagle3" / "config.json");
  return j;
}

TEST(Eagle3Config, ReadsBothFormatsAndTheirTapRules) {
  const Eagle3Config a = parse_eagle3_config(original(), "a");
  EXPECT_EQ(a.format, "eagle3");
  EXPECT_EQ(a.layer.architecture, "LlamaForCausalLM");
  EXPECT_EQ(a.layer.hidden_size, 256);
  EXPECT_EQ(a.draft_vocab_size, 1024);
  EXPECT_TRUE(a.aux_layers.empty());

  const Eagle3Config b = parse_eagle3_config(speculators(), "b");
  EXPECT_EQ(b.format, "speculators");
  EXPECT_EQ(b.aux_layers, (std::vector<uint32_t>{1, 3, 6}));

  json j = original();
  j["eagle_config"] = {{"eagle_aux_hidden_state_layer_ids", {1, 23, 44}}};
  EXPECT_EQ(parse_eagle3_config(j, "c").aux_layers, (std::vector<uint32_t>{2, 24, 45}));  // ModelOpt: + 1
  j["eagle_aux_hidden_state_layer_ids"] = {1, 23, 44};
  EXPECT_EQ(parse_eagle3_config(j, "d").aux_layers, (std::vector<uint32_t>{1, 23, 44}));  // top level: as given
  j["eaglevk_source_format"] = "gguf";
  EXPECT_EQ(parse_eagle3_config(j, "e").format, "gguf");
}

TEST(Eagle3Config, TapIdsOutside32BitsAreRefused) {
  const json big = 4294967297ull;  // 2^32 + 1: get<uint32_t>() made it 1
  json j = original();
  j["eagle_aux_hidden_state_layer_ids"] = {2, big, 5};
  expect_error([&] { parse_eagle3_config(j, "draft/config.json"); },
               "draft/config.json: eagle_aux_hidden_state_layer_ids holds number 4294967297, not a layer id");
  j = speculators();
  j["eagle_aux_hidden_state_layer_ids"] = {1, 3, big};
  expect_error([&] { parse_eagle3_config(j, "spec"); }, "holds number 4294967297, not a layer id (0..4294967295)");
  // ModelOpt ids get + 1: 2^32 - 1 would wrap to tap 0.
  j = original();
  j["eagle_config"] = {{"eagle_aux_hidden_state_layer_ids", {1, 4294967295ull, 3}}};
  expect_error([&] { parse_eagle3_config(j, "m"); }, "holds number 4294967295, not a layer id (0..4294967294)");
  // Negative, huge, fractional and non-numeric ids.
  for (const json& bad : {json(-1), json(18446744073709551615ull), json(-4294967295ll), json(2.5), json("3"), json(true)}) {
    j = original();
    j["eagle_aux_hidden_state_layer_ids"] = {1, bad, 3};
    expect_error([&] { parse_eagle3_config(j, "x"); }, "not a layer id");
  }
  // The largest 32-bit id passes the config (the model loader checks it against the target).
  j = original();
  j["eagle_aux_hidden_state_layer_ids"] = {1, 4294967295ull, 3};
  EXPECT_EQ(parse_eagle3_config(j, "x").aux_layers[1], 4294967295u);
  j["eagle_aux_hidden_state_layer_ids"] = "1,2,3";
  expect_error([&] { parse_eagle3_config(j, "x"); }, "must be a list of layer ids, got string \"1,2,3\"");
}

TEST(Eagle3Config, OtherErrors) {
  expect_error([&] { parse_eagle3_config(json::array(), "x"); }, "not an EAGLE-3 draft");
  json j = original();
  j["architectures"] = {7};
  expect_error([&] { parse_eagle3_config(j, "x"); }, "not an EAGLE-3 draft");
  j = original();
  j["num_hidden_layers"] = 2;
  expect_error([&] { parse_eagle3_config(j, "x"); }, "one-layer");
  j = speculators();
  j["norm_before_fc"] = true;
  expect_error([&] { parse_eagle3_config(j, "x"); }, "norm_before_fc = true is not supported");
  j = speculators();
  j["speculators_model_type"] = "medusa";
  expect_error([&] { parse_eagle3_config(j, "x"); }, "is not eagle3");
}

// Llama-4 configs moved to the loader with the same rules; values of the wrong JSON type used to
// escape as nlohmann exceptions (or, for a huge float in moe_layers, an undefined conversion).
TEST(Llama4Config, ReadsTheTinyConfigAndRefusesWrongTypes) {
  const json base = read_json(fs::path(EAGLEVK_ASSETS) / "tiny-llama4" / "config.json");
  const Llama4Config c = parse_llama4_config(base, "x");
  EXPECT_GT(c.base.num_hidden_layers, 0);
  EXPECT_EQ(c.moe_layer.size(), size_t(c.base.num_hidden_layers));
  const bool nested = base.contains("text_config");
  auto edit = [&](const char* key, const json& value) {
    json j = base;
    (nested ? j["text_config"] : j)[key] = value;
    return j;
  };
  expect_error([&] { parse_llama4_config(edit("moe_layers", {1e30}), "x"); }, "moe_layers holds number 1e+30");
  expect_error([&] { parse_llama4_config(edit("moe_layers", 3), "x"); }, "moe_layers must be a list");
  const int L = c.base.num_hidden_layers;
  expect_error([&] { parse_llama4_config(edit("no_rope_layers", std::vector<std::string>(L, "x")), "x"); },
               "no_rope_layers holds string \"x\"");
  expect_error([&] { parse_llama4_config(edit("layer_types", std::vector<int>(L, 1)), "x"); },
               "layer_types holds number 1, not a string");
  expect_error([&] { parse_llama4_config(edit("attn_temperature_tuning", "yes"), "x"); },
               "attn_temperature_tuning must be a boolean or a number");
  json j = base;
  j["architectures"] = {json::object()};
  expect_error([&] { parse_llama4_config(j, "x"); }, "is not Llama-4");
}

}  // namespace
