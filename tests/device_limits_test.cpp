// Device limits that real model sizes reach: maxMemoryAllocationSize (2 GiB on lavapipe, a KV
// cache of 32k tokens is 4 GiB per K and V for an 8B model) and maxComputeWorkGroupCount
// (65,535 per dimension on Mesa). The limits are lowered on the test's device so that the tiny
// model meets them; it must then still give the golden tokens, and what cannot fit must be
// refused with the numbers.
#include <algorithm>
#include <string>

#include <gtest/gtest.h>

#include <eaglevk/error.h>

#include "models/target.h"
#include "runtime/engine/generate.h"
#include "support/target_runner.h"
#include "support/decoding.h"
#include "support/golden.h"
#include "support/gpu_fixture.h"

namespace eaglevk::testing {
namespace {

// Lowers maxMemoryAllocationSize for one test and restores it even when the test throws.
struct AllocationLimit {
  uint64_t saved;
  explicit AllocationLimit(uint64_t bytes) : saved(gpu().ctx.max_allocation) { gpu().ctx.max_allocation = bytes; }
  ~AllocationLimit() { gpu().ctx.max_allocation = saved; }
};

using DeviceLimits = GpuTest;

// tiny-llama3 at a 2048-token context: its KV cache is 4 MiB per K and V over 8 layers, its
// largest weights (embeddings, lm_head) 2 MiB. Under a 3 MiB allocation limit the cache must be
// allocated per layer (512 KiB each), and the greedy tokens are the golden's.
TEST_F(DeviceLimits, KvCacheIsAllocatedPerLayer) {
  models::TargetModel model = models::load_target(gpu().ctx, asset("tiny-llama3"));
  Golden golden = load_golden(asset("tiny-llama3"));
  AllocationLimit limit(3u << 20);
  engine::Decoder runner = plain_decoder(model, 2048, 16);
  engine::GenerationOptions o;
  o.n_predict = 24;
  o.ignore_eos = true;
  for (size_t i : {size_t(0), size_t(7)}) {
    const GoldenPrompt& p = golden.prompts[i];
    engine::GenerationResult r = testing::generate(runner, p.prompt_ids, o);
    EXPECT_EQ(r.tokens, std::vector<int32_t>(p.greedy_ids.begin(), p.greedy_ids.begin() + 24)) << "prompt " << i;
  }
}

TEST_F(DeviceLimits, AllocationAboveTheLimitIsRefusedWithTheNumbers) {
  AllocationLimit limit(3u << 20);
  try {
    vk::Buffer big(gpu().ctx, 5u << 20, vk::MemoryKind::Device, "weights of a big tensor");
    FAIL() << "a 5 MiB buffer passed a 3 MiB limit";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("buffer 'weights of a big tensor' needs 5 MiB in one allocation, more than "
                                         "the device allows (3 MiB, maxMemoryAllocationSize)"),
              std::string::npos)
        << e.what();
  }
  // Loading a model whose tensors are larger than the limit stops with that message, not a
  // Vulkan failure.
  AllocationLimit tiny(1u << 20);
  try {
    models::TargetModel model = models::load_target(gpu().ctx, asset("tiny-llama3"));
    FAIL() << "2 MiB embeddings passed a 1 MiB limit";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("maxMemoryAllocationSize"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace eaglevk::testing
