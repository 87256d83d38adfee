#include "models/target.h"

namespace eaglevk::models {

const loader::LlamaConfig& TargetModel::config() const {
  return std::visit([](const auto& m) -> const loader::LlamaConfig& { return shared_config(m); }, family);
}

ops::WeightMatrix TargetModel::embed() const {
  return std::visit([](const auto& m) { return m.embed.matrix(); }, family);
}

ops::WeightMatrix TargetModel::lm_head() const {
  return std::visit([](const auto& m) { return m.lm_head_matrix(); }, family);
}

TargetShape TargetModel::shape() const {
  return std::visit([](const auto& m) { return target_shape(m); }, family);
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

TargetModel load_target(const vk::Context& ctx, const loader::ModelFiles& files) {
  return target_family(files).load(ctx, files);
}

TargetPlanConfig read_target_config(const loader::ModelFiles& files) { return target_family(files).read_config(files); }

TargetState make_target_state(const vk::Context& ctx, const TargetModel& m, uint32_t capacity, uint32_t max_rows,
                              bool arena_reuse) {
  return make_target_state(ctx, m.shape(), capacity, max_rows, arena_reuse);
}

void record_target_forward(ops::OpContext& oc, const TargetModel& m, TargetState& s, const ForwardPass& pass) {
  std::visit([&](const auto& family) { record_target_forward(oc, family, s, pass); }, m.family);
}

}  // namespace eaglevk::models
