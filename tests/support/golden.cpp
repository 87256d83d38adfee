#include "support/golden.h"

#include <fstream>

#include <eaglevk/error.h>

namespace eaglevk::testing {

std::string asset(const std::string& relative) { return std::string(EAGLEVK_ASSETS) + "/" + relative; }

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
