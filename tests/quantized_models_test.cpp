// FP8 and 4-bit checkpoints (loader/fp8.h, loader/int4.h) as vLLM and SGLang users have them,
// written at test time from the tiny pairs in each layout (support/quantized_checkpoint.h): the
// model read from the quantized folder against the same model whose weights were decoded by the
// test's own loops and stored as F32 (the float path the golden tests check), prefill and decode
// steps; Llama-4's experts as one 2-D matrix each (llm-compressor's layout), FP8, 4-bit and bf16;
// and EAGLE-3 on FP8 and 4-bit targets, lossless. How far quantization moves each model from its
// bf16 golden is printed, not bounded.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <unistd.h>

#include <fmt/format.h>

#include "loader/model_files.h"
#include "models/target.h"
#include "runtime/engine/generate.h"
#include "support/quantized_checkpoint.h"
#include "support/target_runner.h"
#include "support/golden.h"
#include "support/gpu_fixture.h"
#include "support/pairs.h"
#include "support/real_dims.h"

namespace eaglevk::testing {
namespace {

namespace fs = std::filesystem;

constexpr float kLogitTolerance = 2e-3f;  // as model_golden_test

struct QuantCase {
  const char* pair;  // asset folder
  QuantRecipe recipe;
  bool split_experts;
  const char* label;
};

// A temporary folder removed with the test, unless EAGLEVK_KEEP_TEST_FILES is set (then kept for
// other tools to read: docs/testing.md checks the 4-bit files with llama.cpp's converter).
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& label)
      : path(fs::temp_directory_path() / fmt::format("eaglevk-fp8-{}-{}", label, ::getpid())) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    if (std::getenv("EAGLEVK_KEEP_TEST_FILES"))
      fmt::print("kept {}\n", path.string());
    else
      fs::remove_all(path);
  }
};

class QuantizedModels : public GpuTest, public ::testing::WithParamInterface<QuantCase> {};

TEST_P(QuantizedModels, KernelsDecodeLikeTheTestsReference) {
  const QuantCase c = GetParam();
  TempDir dir(c.label);
  write_quantized_copy(asset(c.pair), dir.path / "fp8", dir.path / "reference", c.recipe, c.split_experts);
  const loader::ModelFiles files = loader::open_model_files(dir.path / "fp8");
  if (c.recipe != QuantRecipe::Bf16) {
    size_t quantized = 0;
    for (const auto& [name, t] : files.checkpoint.tensors) quantized += t.scale.has_value() || t.int4.has_value();
    EXPECT_GT(quantized, 0u);
    // The scales and packed parts were taken out of the tensor list (and the input scales of a
    // W8A8 file and the zero biases of a GPTQ file read past).
    for (const auto& [name, t] : files.checkpoint.tensors) {
      for (const char* part : {"_scale", "qweight", "qzeros", ".scales", "g_idx", "_packed", "_zero_point", "_shape"})
        EXPECT_EQ(name.find(part), std::string::npos) << name;
      EXPECT_FALSE(name.ends_with("q_proj.bias") && !name.starts_with("vision_model.")) << name;
    }
  }
  models::TargetModel model = models::load_target(gpu().ctx, files);
  models::TargetModel reference = models::load_target(gpu().ctx, (dir.path / "reference").string());
  TargetRunner runner(gpu(), model, 512, 128), reference_runner(gpu(), reference, 512, 128);
  const Golden golden = load_golden(asset(c.pair));
  float worst_prefill = 0, worst_decode = 0;
  size_t same_argmax = 0, golden_argmax = 0;
  for (size_t i = 0; i < golden.prompts.size(); ++i) {
    const std::vector<int32_t>& ids = golden.prompts[i].prompt_ids;
    const std::vector<float> want = last_logits(reference_runner, ids, uint32_t(ids.size()));
    const std::vector<float> got = last_logits(runner, ids, uint32_t(ids.size()));
    ASSERT_EQ(got.size(), want.size());
    for (size_t v = 0; v < got.size(); ++v) worst_prefill = std::max(worst_prefill, std::fabs(got[v] - want[v]));
    same_argmax += argmax(got) == argmax(want);
    golden_argmax += argmax(got) == golden.prompts[i].prompt_argmax_ids.back();
    if (i < 2) {  // every position a decode step
      const std::vector<float> stepped = last_logits(runner, ids, 1);
      for (size_t v = 0; v < got.size(); ++v) worst_decode = std::max(worst_decode, std::fabs(stepped[v] - want[v]));
    }
  }
  fmt::print("{} ({}) vs its F32 reference: worst logit difference {:.3g} (prefill, {} prompts), {:.3g} (decode "
             "steps, 2 prompts); argmax equal {}/{}; next token of the bf16 golden {}/{}\n",
             c.label, c.pair, worst_prefill, golden.prompts.size(), worst_decode, same_argmax, golden.prompts.size(),
             golden_argmax, golden.prompts.size());
  // The same weight values on both sides; only the order of additions differs.
  EXPECT_LT(worst_prefill, kLogitTolerance);
  EXPECT_LT(worst_decode, kLogitTolerance);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, QuantizedModels,
    ::testing::Values(QuantCase{"tiny-llama3", QuantRecipe::FbgemmRows, false, "llama3-fbgemm"},
                      QuantCase{"tiny-llama3", QuantRecipe::ChannelBf16Static, false, "llama3-channel-bf16-static"},
                      QuantCase{"tiny-llama3", QuantRecipe::Blocks128, false, "llama3-blocks128"},
                      QuantCase{"tiny-llama4", QuantRecipe::ChannelBf16Static, true, "llama4-channel-split"},
                      QuantCase{"tiny-llama4", QuantRecipe::TensorScale, true, "llama4-tensor-split"},
                      QuantCase{"tiny-llama4", QuantRecipe::Bf16, true, "llama4-bf16-split"},
                      QuantCase{"tiny-llama3", QuantRecipe::GptqSym64, false, "llama3-gptq"},
                      QuantCase{"tiny-llama3", QuantRecipe::AwqGemm128, false, "llama3-awq"},
                      QuantCase{"tiny-llama3", QuantRecipe::PackedAsym128, false, "llama3-packed-asym"},
                      QuantCase{"tiny-llama3", QuantRecipe::PackedSymChannel, false, "llama3-packed-sym-channel"},
                      QuantCase{"tiny-llama4", QuantRecipe::PackedAsym128, true, "llama4-packed-asym-split"}),
    [](const auto& info) {
      std::string s = info.param.label;
      std::replace(s.begin(), s.end(), '-', '_');
      return s;
    });

// EAGLE-3 on FP8 and 4-bit targets: greedy speculative output equals the target's own greedy
// output (pair A, k = 3, the first golden prompts).
class QuantizedSpeculative : public GpuTest, public ::testing::WithParamInterface<QuantRecipe> {};

TEST_P(QuantizedSpeculative, Lossless) {
  TempDir dir("spec");
  write_quantized_copy(asset("tiny-llama3"), dir.path / "fp8", dir.path / "reference", GetParam(), false);
  models::TargetModel target = models::load_target(gpu().ctx, (dir.path / "fp8").string());
  Pair p{(dir.path / "fp8").string(), asset("tiny-llama3-eagle3"), std::move(target), {}, load_golden(asset("tiny-llama3")), {}};
  models::Eagle3Model draft = models::load_eagle3(gpu().ctx, asset("tiny-llama3-eagle3"), p.target.config());
  const size_t prompts = golden_prompts_to_decode(2, p.golden.prompts.size());
  engine::SpecStats total = expect_lossless(p, draft, 3, prompts);
  fmt::print("quantized tiny-llama3 (recipe {}) + its EAGLE-3 head, k=3 on {} prompts: AL {:.3f} (bf16 pair: {:.3f})\n",
             int(GetParam()), prompts, total.mean_acceptance_length(),
             golden_acceptance(p.golden, 3, prompts).mean_acceptance_length());
}

INSTANTIATE_TEST_SUITE_P(Targets, QuantizedSpeculative, ::testing::Values(QuantRecipe::FbgemmRows, QuantRecipe::AwqGemm128));

}  // namespace
}  // namespace eaglevk::testing
