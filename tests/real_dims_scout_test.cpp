// Real dimensions, Llama-4-Scout shape: a random-weight checkpoint with Scout's per-tensor
// shapes (hidden 5120, 40/8 heads, 16 experts with gate_up_proj [16, 5120, 16384], dense MLP
// 16384, vocab 202048, QK norm, chunk 8192) and two layers (a dense one, then a mixture of
// experts), written at test time as sharded safetensors, and a speculators-format EAGLE-3
// head with the full 202,048-token vocabulary (as the Maverick speculator has). Checked:
// sharded loading of a 2.7 GB expert tensor, which exceeds lavapipe's 2 GiB allocations and is
// split; a 16-row prefill in one pass against a chunked prefill; decoding; speculative
// decoding at k = 3 lossless against plain decoding. About 12 GB of host memory: run alone.
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include <fmt/format.h>
#include <gtest/gtest.h>

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
#include "support/synthetic.h"

namespace eaglevk::testing {
namespace {

namespace fs = std::filesystem;

struct Checkpoints {
  fs::path root, target, draft;
  Checkpoints() {
    root = fs::temp_directory_path() / fmt::format("eaglevk-scout-{}", ::getpid());
    target = root / "llama4-scout";
    draft = root / "llama4-scout-eagle3";
    SynthOptions o;
    o.layers = 2;
    o.moe_step = 2;  // layer 0 dense (intermediate_size_mlp), layer 1 experts, as Maverick alternates
    o.shard_bytes = 2ull << 30;
    write_synthetic_checkpoint(SynthKind::Llama4_Scout, target, o);
    o.aux_layers = {0, 1, 2};
    write_synthetic_checkpoint(SynthKind::Eagle3_Scout, draft, o);
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

std::vector<int32_t> prompt_ids(uint32_t n, uint32_t seed) { return random_prompt(n, seed, 200000, 200000); }

TEST_F(GpuTest, ScoutShapeLoadsItsSplitExpertTensorsAndPrefillsInOnePass) {
  loader::ModelFiles files = loader::open_model_files(checkpoints().target);
  EXPECT_GE(files.checkpoint.files.size(), 3u) << "expected a sharded checkpoint";
  const models::TargetShape shape = target().shape();
  EXPECT_EQ(shape.hidden, 5120u);
  EXPECT_EQ(shape.vocab, 202048u);
  const auto& llama4 = std::get<models::Llama4Model>(target().family);
  ASSERT_EQ(llama4.layers.size(), 2u);
  const models::ExpertTensor& gate_up = llama4.layers[1].experts_gate_up;
  EXPECT_EQ(gate_up.experts, 16u);
  // [16, 5120, 16384] bf16 is 2.68 GB; each allocation holds whole experts within the device's
  // maxMemoryAllocationSize.
  const uint64_t expert_bytes = uint64_t(5120) * 16384 * 2;
  EXPECT_LE(uint64_t(gate_up.per_buffer) * expert_bytes, gpu().ctx.max_allocation);
  EXPECT_EQ(gate_up.buffers.size(), (16 + gate_up.per_buffer - 1) / gate_up.per_buffer);
  // Split only where the device needs it: lavapipe allocates 2 GiB at once, NVIDIA's driver more.
  EXPECT_EQ(gate_up.buffers.size() > 1, 16 * expert_bytes > gpu().ctx.max_allocation)
      << "maxMemoryAllocationSize " << gpu().ctx.max_allocation;

  // 16 rows in one pass against passes of 8 (a 64-row pass alone took lavapipe over 10 minutes
  // beside another test).
  const std::vector<int32_t> ids = prompt_ids(16, 5);
  TargetRunner one(gpu(), target(), 128, 16);
  std::vector<float> one_pass = last_logits(one, ids, 16);
  TargetRunner small(gpu(), target(), 128, 8);
  std::vector<float> chunked = last_logits(small, ids, 8);
  ASSERT_EQ(one_pass.size(), 202048u);
  EXPECT_TRUE(all_close(one_pass, std::vector<double>(chunked.begin(), chunked.end()), 2e-3, 0));
  EXPECT_EQ(argmax(one_pass), argmax(chunked));
}

TEST_F(GpuTest, ScoutShapeSpeculativeK3IsLosslessWithTheFull202048TokenDraftVocabulary) {
  models::Eagle3Model draft = models::load_eagle3(gpu().ctx, checkpoints().draft, target().config());
  EXPECT_EQ(draft.config.draft_vocab_size, 202048);
  {
    // The memory plan's activations are the arenas these decoders allocate (its dry load of the
    // same files records the same forwards).
    const loader::ModelFiles tf = loader::open_model_files(checkpoints().target);
    const loader::ModelFiles df = loader::open_model_files(checkpoints().draft);
    const bool reuse = vk::arena_reuse_from_env();
    const engine::MemoryPlan plan = engine::plan_memory(gpu(), tf, &df, 32);
    const auto ts = models::make_target_state(gpu(), target(), 128, 32, reuse);
    const auto ds = models::make_eagle3_state(gpu(), draft, 128, 32, 1, reuse);
    EXPECT_EQ(plan.activations, ts.arena.plan.total_bytes + ds.arena.plan.total_bytes);
    std::printf("memory plan at 32 rows: activations %llu bytes, per pass %llu bytes\n",
                (unsigned long long)plan.activations, (unsigned long long)plan.per_pass);
  }
  // Each step reads two 202,048 x 5,120 output matrices (2 GB each), about 15 minutes of
  // lavapipe for 4 tokens after a 24-token prompt: 3 tokens after 8 make one round and more.
  const std::vector<int32_t> ids = prompt_ids(8, 9);
  engine::GenerationOptions o;
  o.n_predict = 3;
  o.ignore_eos = true;
  engine::Decoder runner = plain_decoder(target(), 128, 32);
  std::vector<int32_t> plain = testing::generate(runner, ids, o).tokens;
  ASSERT_EQ(plain.size(), 3u);
  engine::Decoder spec = chain_decoder(target(), draft, 128, 3, 32);
  engine::SpecStats stats;
  EXPECT_EQ(spec.generate(ids, o, stats).tokens, plain);
  EXPECT_GT(stats.num_drafts, 0u);
}

}  // namespace
}  // namespace eaglevk::testing
