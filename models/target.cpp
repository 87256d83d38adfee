#include "models/target.h"

#include <nlohmann/json.hpp>

#include <eaglevk/error.h>

namespace eaglevk::models {

const loader::LlamaConfig& TargetModel::config() const {
  if (auto* m = std::get_if<Llama3Model>(&family)) return m->config;
  return std::get<Llama4Model>(family).config.base;
}

ops::WeightMatrix TargetModel::embed() const {
  return std::visit([](const auto& m) { return m.embed.matrix(); }, family);
}

ops::WeightMatrix TargetModel::lm_head() const {
  return std::visit([](const auto& m) { return m.lm_head_matrix(); }, family);
}

TargetShape TargetModel::shape() const {
  if (auto* m = std::get_if<Llama3Model>(&family)) return llama3_shape(*m);
  return llama4_shape(std::get<Llama4Model>(family));
}

uint64_t TargetModel::weight_bytes() const {
  return std::visit([](const auto& m) { return m.weight_bytes; }, family);
}

uint64_t TargetModel::parameters() const {
  return std::visit([](const auto& m) { return m.parameters; }, family);
}

std::string TargetModel::architecture() const { return config().architecture; }

TargetModel load_target(const vk::Context& ctx, const std::filesystem::path& path) {
  return load_target(ctx, loader::open_model_files(path));
}

namespace {

enum class Family { Llama3, Llama4 };

Family target_family(const loader::ModelFiles& files) {
  const nlohmann::json& j = files.config;
  std::string arch;
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty() &&
      j["architectures"][0].is_string())
    arch = j["architectures"][0].get<std::string>();
  if (arch == "Llama4ForConditionalGeneration" || arch == "Llama4ForCausalLM") return Family::Llama4;
  if (arch == "LlamaForCausalLM") return Family::Llama3;
  if (arch == "LlamaForCausalLMEagle3")
    fail("{} is an EAGLE-3 draft head, not a target model (pass it with -d)", files.source());
  fail("{}: architecture '{}' is not supported (LlamaForCausalLM, Llama4ForConditionalGeneration, "
       "Llama4ForCausalLM)",
       files.source(), arch);
}

}  // namespace

TargetModel load_target(const vk::Context& ctx, const loader::ModelFiles& files) {
  if (target_family(files) == Family::Llama4) return TargetModel{load_llama4(ctx, files)};
  return TargetModel{load_llama3(ctx, files)};
}

loader::LlamaConfig read_target_config(const loader::ModelFiles& files) {
  if (target_family(files) == Family::Llama4) return load_llama4_config(files).base;
  return loader::parse_llama_config(files.config, files.source());
}

TargetState make_target_state(const vk::Context& ctx, const TargetModel& m, uint32_t capacity, uint32_t max_rows,
                              bool arena_reuse) {
  return make_target_state(ctx, m.shape(), capacity, max_rows, arena_reuse);
}

void record_target_forward(ops::OpContext& oc, const TargetModel& m, TargetState& s, const ForwardPass& pass) {
  if (auto* l3 = std::get_if<Llama3Model>(&m.family))
    record_llama3_forward(oc, *l3, s, pass);
  else
    record_llama4_forward(oc, std::get<Llama4Model>(m.family), s, pass);
}

}  // namespace eaglevk::models
