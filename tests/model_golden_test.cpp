// tiny-llama3 and tiny-llama4 (MoE, multimodal layout; prompts longer than its 64-token
// attention chunk) against golden.json (an independent float32 PyTorch reference): the top-5
// logits at the last prompt position, the argmax at every prompt position, and the first 64
// greedy tokens. eaglevk keeps weights in bf16 (exact) and the KV cache in f16, so logits
// differ from the float32 reference by up to kLogitTolerance; a greedy divergence is allowed
// only at a step whose golden top-2 margin is below that tolerance.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include <fmt/format.h>

#include "loader/safetensors.h"
#include "models/target.h"
#include "runtime/engine/generate.h"
#include "support/decoding.h"
#include "support/gpu_fixture.h"
#include "support/golden.h"
#include "support/golden_check.h"

namespace eaglevk::testing {
namespace {

constexpr float kLogitTolerance = 2e-3f;

struct ModelGolden : GpuTest, ::testing::WithParamInterface<const char*> {
  void SetUp() override {
    GpuTest::SetUp();
    model = std::make_unique<models::TargetModel>(models::load_target(gpu().ctx, asset(GetParam())));
    golden = std::make_unique<Golden>(load_golden(asset(GetParam())));
  }
  std::unique_ptr<models::TargetModel> model;
  std::unique_ptr<Golden> golden;
};

TEST(Llama3Golden, ConfigAndWeights) {
  auto model = std::make_unique<models::TargetModel>(models::load_target(gpu().ctx, asset("tiny-llama3")));
  const auto& llama = std::get<models::Llama3Model>(model->family);
  EXPECT_EQ(model->config().num_hidden_layers, 8);
  EXPECT_EQ(llama.layers.size(), 8u);
  EXPECT_EQ(model->parameters(), 8392960u);  // README of the tiny models
  EXPECT_EQ(llama.layers[0].qkv.rows, 8u * 32 + 2 * 4 * 32);
}

TEST(Llama4Golden, ConfigAndWeights) {
  auto model = models::load_target(gpu().ctx, asset("tiny-llama4"));
  const auto& l4 = std::get<models::Llama4Model>(model.family);
  const auto& c = l4.config;
  EXPECT_EQ(c.prefix, "language_model.");
  EXPECT_EQ(c.moe_layer, (std::vector<bool>{false, true, false, true, false, true, false, true}));
  EXPECT_EQ(c.rope_layer, (std::vector<bool>{true, true, true, false, true, true, true, false}));
  EXPECT_EQ(c.chunked_layer, c.rope_layer);
  EXPECT_EQ(c.attention_chunk_size, 64);
  EXPECT_EQ(c.floor_scale, 32.0f);
  EXPECT_EQ(model.parameters(), 8921344u);  // the text model, per the tiny models' README
}

TEST_P(ModelGolden, PromptLogitsArgmaxAndGreedyTokens) {
  expect_matches_golden(*model, *golden, kLogitTolerance, GetParam());
}

}  // namespace
}  // namespace eaglevk::testing

namespace eaglevk::testing {
namespace {
INSTANTIATE_TEST_SUITE_P(TinyModels, ModelGolden, ::testing::Values("tiny-llama3", "tiny-llama4"),
                         [](const auto& info) { return std::string(info.param).substr(5) == "llama3" ? "llama3" : "llama4"; });
}  // namespace
}  // namespace eaglevk::testing

namespace eaglevk::testing {
namespace {

// The same weights in the text-only Llama4ForCausalLM layout (no language_model. prefix, no
// vision tower, config = text_config) give the golden tokens too.
TEST(Llama4Golden, TextOnlyLayout) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / fmt::format("eaglevk-llama4-text-{}", ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  {
    loader::Checkpoint ckpt = loader::Checkpoint::open(asset("tiny-llama4"));
    std::vector<loader::TensorData> tensors;
    for (const std::string& name : ckpt.names()) {
      if (name.rfind("language_model.", 0) != 0) continue;
      const loader::TensorView& t = ckpt.get(name);
      tensors.push_back({name.substr(15), t.dtype, t.shape, t.span()});
    }
    loader::write_safetensors(dir / "model.safetensors", tensors);
  }
  nlohmann::json config = loader::json_field::read_file(asset("tiny-llama4") + "/config.json")["text_config"];
  config["architectures"] = {"Llama4ForCausalLM"};
  std::ofstream(dir / "config.json") << config.dump();
  models::TargetModel model = models::load_target(gpu().ctx, dir);
  Golden golden = load_golden(asset("tiny-llama4"));
  engine::Decoder runner = plain_decoder(model, 256, 64);
  engine::GenerationOptions o;
  o.n_predict = 16;
  o.ignore_eos = true;
  auto r = testing::generate(runner, golden.prompts[0].prompt_ids, o);
  EXPECT_EQ(r.tokens, std::vector<int32_t>(golden.prompts[0].greedy_ids.begin(), golden.prompts[0].greedy_ids.begin() + 16));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace eaglevk::testing
