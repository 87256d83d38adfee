// Real dimensions, Llama-3.1-8B shape: a random-weight checkpoint with the 8B's per-tensor
// shapes (hidden 4096, 32/8 heads, MLP 14336, vocab 128256, untied) and two layers, written
// at test time as sharded safetensors with the real Llama-3 tokenizer, and its EAGLE-3 head
// (original format, 32000-token draft vocabulary with d2t). Checked: sharded loading; the
// last-position logits against a plain C++ float reference of the same layers; a 300-token
// prefill in one pass (its grids fold past 65,535 workgroups) against a chunked prefill;
// speculative decoding at k = 3 lossless against plain decoding; the CLI with the real
// tokenizer, the chat template and --ctx 32768.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "loader/model_files.h"
#include "models/eagle3.h"
#include "models/target.h"
#include "runtime/engine/generate.h"
#include "runtime/engine/speculative.h"
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

  const std::vector<int32_t> ids = prompt_ids(24, 7);
  engine::TargetRunner runner(gpu(), target(), 64, 32);
  std::vector<float> got = last_logits(runner, ids, 32);
  std::vector<double> want = ref_llama3_last_logits(checkpoints().target, ids);
  ASSERT_EQ(got.size(), want.size());
  // The golden tests' tolerance on logits; logits here have unit scale.
  EXPECT_TRUE(all_close(got, want, 2e-3, 0));
  std::vector<float> want_f(want.begin(), want.end());
  EXPECT_EQ(argmax(got), argmax(want_f));
}

TEST_F(GpuTest, Llama8BShapePrefillOf300RowsInOnePassMatchesChunkedPrefill) {
  // Two 300-token prefills at real width are most of this file's time on lavapipe (about
  // 2 GFLOP/s): one in a single pass, one in passes of 64, then one decoding step after each.
  // 300 rows is the fewest whose SwiGLU grid still passes 65,535 workgroups in x.
  const std::vector<int32_t> ids = prompt_ids(300, 11);
  auto prefill_and_step = [&](uint32_t max_rows, std::vector<float>& prefill, std::vector<float>& step) {
    engine::TargetRunner runner(gpu(), target(), 1024, max_rows);
    prefill = last_logits(runner, ids, max_rows);
    const int32_t next = argmax(prefill);
    engine::PassRequest req;
    req.ids = std::span<const int32_t>(&next, 1);
    req.start = uint32_t(ids.size());
    req.logits_from = 0;
    req.read_logits = true;
    engine::PassOutput out;
    runner.run(req, out);
    step = out.logits;
  };
  // 300 rows x 14,336 SwiGLU columns = 67,200 workgroups of 64: past 65,535, folded into y.
  std::vector<float> one_pass, one_pass_step, chunked, chunked_step;
  prefill_and_step(300, one_pass, one_pass_step);
  prefill_and_step(64, chunked, chunked_step);
  EXPECT_TRUE(all_close(one_pass, std::vector<double>(chunked.begin(), chunked.end()), 2e-3, 0));
  EXPECT_EQ(argmax(one_pass), argmax(chunked));
  // Decoding continues from the one-pass prefill's cache as from the chunked one's.
  EXPECT_TRUE(all_close(one_pass_step, std::vector<double>(chunked_step.begin(), chunked_step.end()), 2e-3, 0));
  EXPECT_EQ(argmax(one_pass_step), argmax(chunked_step));
}

TEST_F(GpuTest, Llama8BShapeSpeculativeK3IsLosslessWithA32000TokenDraftVocabulary) {
  models::Eagle3Model draft = models::load_eagle3(gpu().ctx, checkpoints().draft, target().config());
  EXPECT_EQ(draft.config.draft_vocab_size, 32000);
  const std::vector<int32_t> ids = prompt_ids(24, 3);
  engine::GenerationOptions o;
  o.n_predict = 6;
  o.ignore_eos = true;
  engine::TargetRunner runner(gpu(), target(), 256, 64);
  std::vector<int32_t> plain = engine::generate(runner, ids, o).tokens;
  engine::SpeculativeDecoder spec(gpu(), target(), draft, 256, 3, 64);
  engine::SpecStats stats;
  EXPECT_EQ(spec.generate(ids, o, stats).tokens, plain);
  EXPECT_GT(stats.num_drafts, 0u);
}

// The CLI as a user runs it: the real Llama-3 tokenizer and chat template, a 32768-token
// context, speculative decoding with the head, JSON out.
TEST(Llama8BShapeCli, ChatWithContext32768AndDraft) {
  const Checkpoints& c = checkpoints();
  // On a terminal (script(1) gives it one) a load this long shows its progress line.
  ProcessResult r = run_process(fmt::format(
      "script -qec \"EAGLEVK_VALIDATE=1 {} run -m {} -d {} --chat -p 'Tell me about Vulkan.' -n 4 --ignore-eos --ctx "
      "32768 --json\" /dev/null",
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
  EXPECT_EQ(j.at("tokens").size(), 4u);
  EXPECT_EQ(j.at("context").get<int>(), 32768);
}

// A context that cannot fit is refused before anything is uploaded, with the numbers and
// what would fit; without --ctx the context shrinks to what fits and says so.
TEST(Llama8BShapeCli, MemoryBudgetRefusesOrShrinksTheContext) {
  const Checkpoints& c = checkpoints();
  // 2.77 GiB of weights + 32768 x 8 KiB of KV cache + activations > 3 GiB.
  ProcessResult r = run_process(fmt::format("EAGLEVK_DEVICE_MEMORY=3G {} run -m {} -p hi -n 1 --ctx 32768 2>&1",
                                            EAGLEVK_CLI, c.target.string()));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("--ctx 32768 does not fit the device"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("a context of at most"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("EAGLEVK_DEVICE_MEMORY=3G"), std::string::npos) << r.out;
  // The weights alone do not fit.
  r = run_process(fmt::format("EAGLEVK_DEVICE_MEMORY=2G {} run -m {} -p hi -n 1 2>&1", EAGLEVK_CLI, c.target.string()));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("the model does not fit the device"), std::string::npos) << r.out;
  // No --ctx: the largest context that fits, said on stderr and reported in the JSON.
  r = run_process(fmt::format("EAGLEVK_DEVICE_MEMORY=3G {} run -m {} -p hi -n 1 --json 2>&1", EAGLEVK_CLI,
                              c.target.string()));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("what fits in the device's memory"), std::string::npos) << r.out;
  nlohmann::json j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  const int context = j.at("context");
  EXPECT_GT(context, 1024);
  EXPECT_LT(context, 32768);
  EXPECT_EQ(context % 64, 0);
}

}  // namespace
}  // namespace eaglevk::testing
