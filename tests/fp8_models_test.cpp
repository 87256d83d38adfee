// FP8 checkpoints (loader/fp8.h) as vLLM and SGLang users have them, written at test time from
// the tiny pairs in each scale layout (support/fp8_checkpoint.h): the model read from the FP8
// folder against the same model whose FP8 weights were decoded by the test's own loops and
// stored as F32 (the float path the golden tests check), prefill and decode steps; Llama-4's
// experts as one 2-D matrix each (llm-compressor's layout), FP8 and bf16; and EAGLE-3 on an FP8
// target, lossless. How far FP8 moves each model from its bf16 golden is printed, not bounded.
#include <cmath>
#include <filesystem>
#include <unistd.h>

#include <fmt/format.h>

#include "loader/model_files.h"
#include "models/target.h"
#include "runtime/engine/generate.h"
#include "support/fp8_checkpoint.h"
#include "support/golden.h"
#include "support/gpu_fixture.h"
#include "support/pairs.h"
#include "support/real_dims.h"

namespace eaglevk::testing {
namespace {

namespace fs = std::filesystem;

constexpr float kLogitTolerance = 2e-3f;  // as model_golden_test

struct Fp8Case {
  const char* pair;  // asset folder
  Fp8Recipe recipe;
  bool split_experts;
  const char* label;
};

// A temporary folder removed with the test.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& label)
      : path(fs::temp_directory_path() / fmt::format("eaglevk-fp8-{}-{}", label, ::getpid())) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

class Fp8Models : public GpuTest, public ::testing::WithParamInterface<Fp8Case> {};

TEST_P(Fp8Models, KernelsDecodeLikeTheTestsReference) {
  const Fp8Case c = GetParam();
  TempDir dir(c.label);
  write_fp8_copy(asset(c.pair), dir.path / "fp8", dir.path / "reference", c.recipe, c.split_experts);
  const loader::ModelFiles files = loader::open_model_files(dir.path / "fp8");
  if (c.recipe != Fp8Recipe::Bf16) {
    size_t fp8 = 0;
    for (const auto& [name, t] : files.checkpoint.tensors) fp8 += t.scale.has_value();
    EXPECT_GT(fp8, 0u);
    // The scales were taken out of the tensor list (and the input scales of a W8A8 file read past).
    for (const auto& [name, t] : files.checkpoint.tensors) EXPECT_EQ(name.find("_scale"), std::string::npos) << name;
  }
  models::TargetModel model = models::load_target(gpu().ctx, files);
  models::TargetModel reference = models::load_target(gpu().ctx, (dir.path / "reference").string());
  engine::TargetRunner runner(gpu(), model, 512, 128), reference_runner(gpu(), reference, 512, 128);
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
    Layouts, Fp8Models,
    ::testing::Values(Fp8Case{"tiny-llama3", Fp8Recipe::FbgemmRows, false, "llama3-fbgemm"},
                      Fp8Case{"tiny-llama3", Fp8Recipe::ChannelBf16Static, false, "llama3-channel-bf16-static"},
                      Fp8Case{"tiny-llama3", Fp8Recipe::Blocks128, false, "llama3-blocks128"},
                      Fp8Case{"tiny-llama4", Fp8Recipe::ChannelBf16Static, true, "llama4-channel-split"},
                      Fp8Case{"tiny-llama4", Fp8Recipe::TensorScale, true, "llama4-tensor-split"},
                      Fp8Case{"tiny-llama4", Fp8Recipe::Bf16, true, "llama4-bf16-split"}),
    [](const auto& info) {
      std::string s = info.param.label;
      std::replace(s.begin(), s.end(), '-', '_');
      return s;
    });

// EAGLE-3 on an FP8 target: greedy speculative output equals the FP8 target's own greedy output
// (pair A, k = 3, the first golden prompts).
TEST(Fp8Speculative, LosslessOnAnFp8Target) {
  TempDir dir("spec");
  write_fp8_copy(asset("tiny-llama3"), dir.path / "fp8", dir.path / "reference", Fp8Recipe::FbgemmRows, false);
  models::TargetModel target = models::load_target(gpu().ctx, (dir.path / "fp8").string());
  Pair p{(dir.path / "fp8").string(), asset("tiny-llama3-eagle3"), std::move(target), {}, load_golden(asset("tiny-llama3")), {}};
  models::Eagle3Model draft = models::load_eagle3(gpu().ctx, asset("tiny-llama3-eagle3"), p.target.config());
  const size_t prompts = golden_prompts_to_decode(2, p.golden.prompts.size());
  engine::SpecStats total = expect_lossless(p, draft, 3, prompts);
  fmt::print("FP8 (fbgemm) tiny-llama3 + its EAGLE-3 head, k=3 on {} prompts: AL {:.3f} (bf16 pair: {:.3f})\n", prompts,
             total.mean_acceptance_length(), golden_acceptance(p.golden, 3, prompts).mean_acceptance_length());
}

}  // namespace
}  // namespace eaglevk::testing
