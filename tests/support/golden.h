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
std::string asset(const std::string& relative);  // EAGLEVK_ASSETS / relative

}  // namespace eaglevk::testing
