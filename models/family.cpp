#include "models/family.h"

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <eaglevk/error.h>

#include "models/target.h"

namespace eaglevk::models {
namespace {

constexpr const char* kLlama3Archs[] = {"LlamaForCausalLM"};
constexpr const char* kLlama4Archs[] = {"Llama4ForConditionalGeneration", "Llama4ForCausalLM"};
constexpr const char* kQwen3Archs[] = {"Qwen3ForCausalLM"};

TargetPlanConfig llama3_plan(const loader::ModelFiles& files) {
  loader::LlamaConfig c = read_llama3_config(files);
  const uint32_t ffn = uint32_t(c.intermediate_size);
  return {std::move(c), ffn};
}

TargetPlanConfig llama4_plan(const loader::ModelFiles& files) {
  Llama4Config c = load_llama4_config(files);
  // Dense layers may be wider than the experts (Scout: 16,384 against 8,192).
  const uint32_t ffn = uint32_t(std::max(c.intermediate_size_mlp, c.base.intermediate_size));
  return {std::move(c.base), ffn, llama4_routed_expert_bytes(files.checkpoint)};
}

TargetPlanConfig qwen3_plan(const loader::ModelFiles& files) {
  loader::LlamaConfig c = read_qwen3_config(files);
  const uint32_t ffn = uint32_t(c.intermediate_size);
  return {std::move(c), ffn};
}

TargetModel llama3_load(const vk::Context& ctx, const loader::ModelFiles& files, const WeightPlacement& placement) {
  return TargetModel{load_llama3(ctx, files, placement)};
}
TargetModel llama4_load(const vk::Context& ctx, const loader::ModelFiles& files, const WeightPlacement& placement) {
  return TargetModel{load_llama4(ctx, files, placement)};
}
TargetModel qwen3_load(const vk::Context& ctx, const loader::ModelFiles& files, const WeightPlacement& placement) {
  return TargetModel{load_qwen3(ctx, files, placement)};
}

const TargetFamily kFamilies[] = {
    {"llama3", kLlama3Archs, "llama", llama3_plan, llama3_load},
    {"llama4", kLlama4Archs, "llama4", llama4_plan, llama4_load},
    {"qwen3", kQwen3Archs, "qwen3", qwen3_plan, qwen3_load},
};

}  // namespace

std::span<const TargetFamily> target_families() { return kFamilies; }

const TargetFamily* find_target_family(std::string_view hf_architecture) {
  for (const TargetFamily& f : kFamilies)
    for (const char* arch : f.hf_architectures)
      if (hf_architecture == arch) return &f;
  return nullptr;
}

std::string supported_architectures() {
  std::string out;
  for (const TargetFamily& f : kFamilies)
    for (const char* arch : f.hf_architectures) out += (out.empty() ? "" : ", ") + std::string(arch);
  return out;
}

const TargetFamily& target_family(const loader::ModelFiles& files) {
  const nlohmann::json& j = files.config;
  std::string arch;
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty() &&
      j["architectures"][0].is_string())
    arch = j["architectures"][0].get<std::string>();
  if (const TargetFamily* f = find_target_family(arch)) return *f;
  if (arch == "LlamaForCausalLMEagle3")
    fail("{} is an EAGLE-3 draft head, not a target model (pass it with -d)", files.source());
  fail("{}: architecture '{}' is not supported ({})", files.source(), arch, supported_architectures());
}

}  // namespace eaglevk::models
