// Soak: one speculative session generates EAGLEVK_SOAK_TOKENS tokens (default 1,024: lavapipe
// speculates at 4 to 15 tokens/s on this pair, so 20,000 would take CI an hour) through the C
// API, 256 at a time over the first 3 golden prompts of pair A in turn (so that the fourth call
// repeats the first), and the process must not grow: Vulkan
// memory held by live buffers stays exactly what it was after the first generation, host RSS
// within 4 MiB of it, and every repeat of a prompt gives the tokens it gave the first time.
// docs/reliability.md says how to run it longer.
#include <eaglevk/eaglevk.h>

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "runtime/vk/buffer.h"
#include "support/golden.h"

namespace eaglevk::testing {
namespace {

uint64_t rss_bytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * uint64_t(::sysconf(_SC_PAGESIZE));
}

TEST(Soak, SpeculativeSessionHoldsItsMemoryFlat) {
  const char* env = std::getenv("EAGLEVK_SOAK_TOKENS");
  const uint64_t target_tokens = env ? std::strtoull(env, nullptr, 10) : 1024;
  const Golden golden = load_golden(asset("tiny-llama3"));
  eaglevk_runtime* rt = nullptr;
  eaglevk_model* model = nullptr;
  eaglevk_session* session = nullptr;
  ASSERT_EQ(eaglevk_runtime_create(nullptr, &rt), EAGLEVK_OK) << eaglevk_last_error();
  ASSERT_EQ(eaglevk_model_load(rt, asset("tiny-llama3").c_str(), asset("tiny-llama3-eagle3").c_str(), &model), EAGLEVK_OK)
      << eaglevk_last_error();
  eaglevk_session_params p = eaglevk_session_params_default();
  p.max_new_tokens = 256;
  p.ignore_eos = 1;
  ASSERT_EQ(eaglevk_session_create(model, &p, &session), EAGLEVK_OK) << eaglevk_last_error();

  std::vector<int32_t> out(p.max_new_tokens);
  std::map<size_t, std::vector<int32_t>> first_output;
  uint64_t tokens = 0, calls = 0, device_after_warmup = 0, rss_after_warmup = 0, rss_peak = 0;
  const auto start = std::chrono::steady_clock::now();
  while (tokens < target_tokens) {
    const size_t i = calls % 3;
    const auto& prompt = golden.prompts[i].prompt_ids;
    size_t n = 0;
    ASSERT_EQ(eaglevk_generate(session, prompt.data(), prompt.size(), nullptr, nullptr, out.data(), out.size(), &n),
              EAGLEVK_OK)
        << eaglevk_last_error();
    ASSERT_EQ(n, p.max_new_tokens);
    const std::vector<int32_t> got(out.begin(), out.begin() + n);
    if (!first_output.count(i)) first_output[i] = got;
    else EXPECT_EQ(got, first_output[i]) << "prompt " << i << " repeated at call " << calls;
    tokens += n;
    ++calls;
    if (calls == 1) {
      device_after_warmup = vk::memory_in_use();
      rss_after_warmup = rss_bytes();
    }
    rss_peak = std::max(rss_peak, rss_bytes());
    EXPECT_EQ(vk::memory_in_use(), device_after_warmup) << "after " << tokens << " tokens";
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const uint64_t rss_end = rss_bytes();
  fmt::print("soak: {} tokens in {} calls, {:.1f} s ({:.1f} tokens/s); Vulkan memory {:.2f} MiB throughout; host RSS "
             "{:.2f} MiB after the first call, {:.2f} MiB at the end, peak {:.2f} MiB\n",
             tokens, calls, seconds, tokens / seconds, device_after_warmup / 1048576.0, rss_after_warmup / 1048576.0,
             rss_end / 1048576.0, rss_peak / 1048576.0);
  EXPECT_LE(rss_peak, rss_after_warmup + (4ull << 20)) << "host memory grew";
  eaglevk_session_free(session);
  eaglevk_model_free(model);
  eaglevk_runtime_destroy(rt);
  EXPECT_EQ(vk::memory_in_use(), 0u) << "buffers left after everything was freed";
}

}  // namespace
}  // namespace eaglevk::testing
