#include "support/golden.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <string>

#include <eaglevk/error.h>

namespace eaglevk::testing {

// EAGLEVK_TEST_ASSETS overrides the folder compiled in: a test binary run away from its checkout
// (the GPU check's pack, tools/gpu/gpu_check.sh) finds the assets it carries.
std::string asset(const std::string& relative) {
  const char* folder = std::getenv("EAGLEVK_TEST_ASSETS");
  return std::string(folder && *folder ? folder : EAGLEVK_ASSETS) + "/" + relative;
}

size_t golden_prompts_to_decode(size_t subset, size_t total) {
  const char* all = std::getenv("EAGLEVK_GOLDEN_ALL");
  return all && std::string(all) == "1" ? total : std::min(subset, total);
}

GoldenAcceptance golden_acceptance(const Golden& golden, uint32_t k, size_t prompts) {
  GoldenAcceptance a;
  const std::string key = std::to_string(k);
  for (size_t i = 0; i < prompts && i < golden.prompts.size(); ++i) {
    const nlohmann::json& s = golden.prompts[i].spec.at(key);
    a.drafts += s.at("num_drafts").get<uint64_t>();
    a.accepted += s.at("num_accepted_tokens").get<uint64_t>();
  }
  return a;
}

Golden load_golden(const std::string& model_dir) { return load_golden_file(model_dir + "/golden.json"); }

Golden load_golden_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("cannot open {}", path);
  Golden g;
  g.raw = nlohmann::json::parse(in);
  for (const auto& p : g.raw.at("prompts")) {
    GoldenPrompt gp;
    gp.id = p.at("id");
    gp.type = p.at("type");
    gp.prompt_ids = p.at("prompt_ids").get<std::vector<int32_t>>();
    gp.prompt_argmax_ids = p.at("prompt_argmax_ids").get<std::vector<int32_t>>();
    gp.top5_ids = p.at("last_pos_top5").at("ids").get<std::vector<int32_t>>();
    gp.top5_logits = p.at("last_pos_top5").at("logits").get<std::vector<float>>();
    gp.greedy_ids = p.at("greedy_ids").get<std::vector<int32_t>>();
    gp.greedy_margins = p.at("greedy_top2_margins").get<std::vector<float>>();
    gp.spec = p.value("spec", nlohmann::json());
    g.prompts.push_back(std::move(gp));
  }
  return g;
}

}  // namespace eaglevk::testing
