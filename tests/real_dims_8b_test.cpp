// Real dimensions, Llama-3.1-8B shape: a random-weight checkpoint with the 8B's per-tensor
// shapes (hidden 4096, 32/8 heads, MLP 14336, vocab 128256, untied) and two layers, written
// at test time as sharded safetensors with the real Llama-3 tokenizer, and its EAGLE-3 head
// (original format, 32000-token draft vocabulary with d2t). Checked: sharded loading; the
// last-position logits against a plain C++ float reference of the same layers; prefill grids
// folded past the workgroup limit (lowered, as 300 rows would need at the real one) against
// unfolded ones, bit for bit (prompts of 8 tokens: on lavapipe every pass over the 3 GB of
// weights takes many seconds, and the suite has to fit CI's time);
// speculative decoding at k = 3 lossless against plain decoding; the CLI with the real
// tokenizer, the chat template, the draft and a context shrunk to a 4 GiB device.
#include <unistd.h>

#include <cstdlib>
#include <cstdio>
#include <filesystem>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "loader/model_files.h"
#include "models/eagle3.h"
#include "models/target.h"
#include "runtime/engine/generate.h"
#include "runtime/engine/memory_plan.h"
#include "runtime/engine/decoder.h"
#include "support/decoding.h"
#include "support/target_runner.h"
#include "support/gpu_fixture.h"
#include "support/real_dims.h"
#include "support/process.h"
#include "support/reference_llama.h"
#include "support/synthetic.h"

namespace eaglevk::testing {
namespace {

namespace fs = std::filesystem;

// The checkpoints, written once per process and removed at exit.
struct Checkpoints {
  fs::path root, target, draft;
  Checkpoints() {
    const char* ref = std::getenv("EAGLEVK_LLAMA3_REF");
    if (!ref || !fs::exists(fs::path(ref) / "tokenizer.json"))
      throw std::runtime_error(
          "the real Llama-3 tokenizer is missing: run `npm ci` in tests/tokenizer_ref, "
          "`node tests/tokenizer_ref/make_reference.mjs build/llama3-ref`, and set EAGLEVK_LLAMA3_REF=$PWD/build/llama3-ref "
          "(tests/run_all.sh does all three)");
    root = fs::temp_directory_path() / fmt::format("eaglevk-8b-{}", ::getpid());
    target = root / "llama3-8b";
    draft = root / "llama3-8b-eagle3";
    SynthOptions o;
    o.layers = 2;
    o.shard_bytes = 512ull << 20;  // several shards, as published checkpoints come
    o.tokenizer_dir = ref;
    write_synthetic_checkpoint(SynthKind::Llama3_8B, target, o);
    o.aux_layers = {0, 1, 2};
    o.tokenizer_dir.clear();
    write_synthetic_checkpoint(SynthKind::Eagle3_8B, draft, o);
  }
  ~Checkpoints() { fs::remove_all(root); }
};

const Checkpoints& checkpoints() {
  static Checkpoints c;
  return c;
}

const models::TargetModel& target() {
  static models::TargetModel m = models::load_target(gpu().ctx, checkpoints().target);
  return m;
}

std::vector<int32_t> prompt_ids(uint32_t n, uint32_t seed) { return random_prompt(n, seed, 128000, 128000); }

TEST_F(GpuTest, Llama8BShapeLoadsFromShardsAndMatchesTheFloatReference) {
  loader::ModelFiles files = loader::open_model_files(checkpoints().target);
  EXPECT_GE(files.checkpoint.files.size(), 3u) << "expected a sharded checkpoint";
  const models::TargetShape shape = target().shape();
  EXPECT_EQ(shape.hidden, 4096u);
  EXPECT_EQ(shape.vocab, 128256u);
  EXPECT_EQ(target().parameters(), 1486901248u);  // 2 x 218.1M per layer + 2 x 525.3M embedding/head + norms

  const std::vector<int32_t> ids = prompt_ids(8, 7);
  TargetRunner runner(gpu(), target(), 64, 32);
  std::vector<float> got = last_logits(runner, ids, 32);
  std::vector<double> want = ref_llama3_last_logits(checkpoints().target, ids);
  ASSERT_EQ(got.size(), want.size());
  // The golden tests' tolerance on logits; logits here have unit scale.
  EXPECT_TRUE(all_close(got, want, 2e-3, 0));
  std::vector<float> want_f(want.begin(), want.end());
  EXPECT_EQ(argmax(got), argmax(want_f));
}

// Lowers maxComputeWorkGroupCount[0] while alive.
struct WorkgroupLimit {
  uint32_t saved = gpu().ctx.max_workgroups[0];
  explicit WorkgroupLimit(uint32_t x) { gpu().ctx.max_workgroups[0] = x; }
  ~WorkgroupLimit() { gpu().ctx.max_workgroups[0] = saved; }
};

TEST_F(GpuTest, Llama8BShapePrefillFoldsGridsPastTheWorkgroupLimitBitForBit) {
  // At this width a one-pass prefill's one-dimensional grids pass 65,535 workgroups in x from
  // 300 rows on (300 x 14,336 SwiGLU columns / 64) and fold into y. Two 300-row prefills took
  // most of this file's time on lavapipe (about 2 GFLOP/s), so the fold runs here on 8 rows
  // under a lowered limit (SwiGLU: 1,792 workgroups > 1,024): folding moves elements between
  // workgroups, not their arithmetic, so prefill and the decoding step after it must give the
  // bits of the unfolded grids.
  const std::vector<int32_t> ids = prompt_ids(8, 11);
  auto prefill_and_step = [&](uint32_t workgroup_limit, std::vector<float>& prefill, std::vector<float>& step) {
    WorkgroupLimit limit(workgroup_limit);
    TargetRunner runner(gpu(), target(), 64, 32);
    prefill = last_logits(runner, ids, 32);
    const int32_t next = argmax(prefill);
    PassRequest req;
    req.ids = std::span<const int32_t>(&next, 1);
    req.start = uint32_t(ids.size());
    req.logits_from = 0;
    req.read_logits = true;
    PassOutput out;
    runner.run(req, out);
    step = out.logits;
  };
  std::vector<float> folded, folded_step, plain, plain_step;
  prefill_and_step(1024, folded, folded_step);
  prefill_and_step(gpu().ctx.max_workgroups[0], plain, plain_step);
  EXPECT_TRUE(bitwise_equal(folded, plain));
  EXPECT_TRUE(bitwise_equal(folded_step, plain_step));
}

TEST_F(GpuTest, Llama8BShapeSpeculativeK3IsLosslessWithA32000TokenDraftVocabulary) {
  models::Eagle3Model draft = models::load_eagle3(gpu().ctx, checkpoints().draft, target().config());
  EXPECT_EQ(draft.config.draft_vocab_size, 32000);
  {
    // The memory plan's activations are the arenas these decoders allocate (its dry load of the
    // same files records the same forwards).
    const loader::ModelFiles tf = loader::open_model_files(checkpoints().target);
    const loader::ModelFiles df = loader::open_model_files(checkpoints().draft);
    const bool reuse = vk::arena_reuse_from_env();
    const engine::MemoryPlan plan = engine::plan_memory(gpu(), tf, &df, 64);
    const auto ts = models::make_target_state(gpu(), target(), 256, 64, reuse);
    const auto ds = models::make_eagle3_state(gpu(), draft, 256, 64, 1, reuse);
    EXPECT_EQ(plan.activations, ts.arena.plan.total_bytes + ds.arena.plan.total_bytes);
    std::printf("memory plan at 64 rows: activations %llu bytes, per pass %llu bytes\n",
                (unsigned long long)plan.activations, (unsigned long long)plan.per_pass);
  }
  const std::vector<int32_t> ids = prompt_ids(8, 3);
  engine::GenerationOptions o;
  o.n_predict = 4;
  o.ignore_eos = true;
  engine::Decoder runner = plain_decoder(target(), 256, 64);
  std::vector<int32_t> plain = testing::generate(runner, ids, o).tokens;
  engine::Decoder spec = chain_decoder(target(), draft, 256, 3, 64);
  engine::SpecStats stats;
  EXPECT_EQ(spec.generate(ids, o, stats).tokens, plain);
  EXPECT_GT(stats.num_drafts, 0u);
}

// The CLI as a user runs it: the real Llama-3 tokenizer and chat template, speculative decoding
// with the head, JSON out, on a device with 4 GiB: the context shrinks from the model's 131,072
// positions to what fits beside the weights, and says so (one 3 GB load serves both checks).
TEST(Llama8BShapeCli, ChatWithTheDraftInTheContextThatFits) {
  const Checkpoints& c = checkpoints();
  // On a terminal (script(1) gives it one) a load this long shows its progress line.
  ProcessResult r = run_process(fmt::format(
      "script -qec \"EAGLEVK_VALIDATE=1 EAGLEVK_DEVICE_MEMORY=4G {} run -m {} -d {} --chat -p 'Tell me about Vulkan.' -n 2 "
      "--ignore-eos --json\" /dev/null",
      EAGLEVK_CLI, c.target.string(), c.draft.string()));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("eaglevk: loading ["), std::string::npos) << r.out.substr(0, 2000);
  EXPECT_NE(r.out.find(" s left"), std::string::npos);
  // The JSON is one line; on a terminal stderr's statistics may follow it.
  const size_t json_start = r.out.find('{');
  nlohmann::json j = nlohmann::json::parse(r.out.substr(json_start, r.out.find('\n', json_start) - json_start));
  // <|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n ... <|eot_id|> and the
  // assistant header: the real template's special tokens, encoded as single ids.
  std::vector<int32_t> prompt = j.at("prompt_tokens");
  ASSERT_GE(prompt.size(), 10u);
  EXPECT_EQ(prompt[0], 128000);
  EXPECT_EQ(prompt[1], 128006);
  EXPECT_EQ(j.at("tokens").size(), 2u);
  EXPECT_NE(r.out.find("what fits in the device's memory"), std::string::npos) << r.out.substr(0, 2000);
  const int context = j.at("context");
  EXPECT_GT(context, 1024);
  EXPECT_LT(context, 131072);
  EXPECT_EQ(context % 64, 0);
}

// A context that cannot fit is refused before anything is uploaded, with the numbers and
// what would fit (the shrinking without --ctx is the chat test's).
TEST(Llama8BShapeCli, MemoryBudgetRefusesBeforeUploading) {
  const Checkpoints& c = checkpoints();
  // 2.77 GiB of weights + 32768 x 8 KiB of KV cache + activations > 3 GiB.
  ProcessResult r = run_process(fmt::format("EAGLEVK_DEVICE_MEMORY=3G {} run -m {} -p hi -n 1 --ctx 32768 2>&1",
                                            EAGLEVK_CLI, c.target.string()));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("--ctx: a context of 32768 tokens does not fit the device"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("a context of at most"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("EAGLEVK_DEVICE_MEMORY=3G"), std::string::npos) << r.out;
  // The weights alone do not fit.
  r = run_process(fmt::format("EAGLEVK_DEVICE_MEMORY=2G {} run -m {} -p hi -n 1 2>&1", EAGLEVK_CLI, c.target.string()));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("the model does not fit the device"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace eaglevk::testing
