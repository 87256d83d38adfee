#pragma once
// The golden files shipped with the tiny models (made by an independent PyTorch reference).
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace eaglevk::testing {

struct GoldenPrompt {
  int id = 0;
  std::string type;
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> prompt_argmax_ids;
  std::vector<int32_t> top5_ids;
  std::vector<float> top5_logits;
  std::vector<int32_t> greedy_ids;
  std::vector<float> greedy_margins;
  nlohmann::json spec;
};

struct Golden {
  nlohmann::json raw;
  std::vector<GoldenPrompt> prompts;
};

Golden load_golden(const std::string& model_dir);  // model_dir/golden.json
// Any file of golden.json's target shape (the GGUF float goldens: no `spec` per prompt).
Golden load_golden_file(const std::string& path);
std::string asset(const std::string& relative);  // EAGLEVK_TEST_ASSETS (else EAGLEVK_ASSETS) / relative

// How many of the golden prompts (the first ones) a test decodes: `subset` by default, which
// keeps the suite within CI's time on lavapipe (about 10 tokens/s for the tiny models), and
// every one with EAGLEVK_GOLDEN_ALL=1 (docs/testing.md records such full runs).
size_t golden_prompts_to_decode(size_t subset, size_t total);

// golden.json's per-prompt speculative counts at k, summed over its first `prompts` prompts.
struct GoldenAcceptance {
  uint64_t drafts = 0, accepted = 0;
  double mean_acceptance_length() const { return drafts ? 1.0 + double(accepted) / double(drafts) : 0.0; }
};
GoldenAcceptance golden_acceptance(const Golden& golden, uint32_t k, size_t prompts);

}  // namespace eaglevk::testing
