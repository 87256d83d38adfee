// eval's resolve_tree from the model's parts (spec_flags.h): eval still builds its decoders
// itself, so it holds no api::Model call for api::auto_tree to take. This file, the last in
// apps/ (eval aside) to include the engine, goes when eval runs through the facade (issue 42).
#include <fmt/format.h>

#include "apps/cli/spec_flags.h"
#include "runtime/engine/tree_auto.h"
#include "runtime/ops/gpu.h"

namespace eaglevk::cli {

engine::TreeParams resolve_tree(const engine::TreeParams& tree, ops::Gpu& gpu, const models::TargetModel& target,
                                const std::filesystem::path& model_path, const models::Eagle3Model& draft,
                                const std::filesystem::path& draft_path,
                                const std::vector<std::vector<int32_t>>& prompts) {
  if (tree.draft_tokens != 0) return tree;
  engine::AutoOptions o;
  o.prompts = prompts;
  o.max_steps = tree.steps;
  o.max_topk = tree.topk;
  o.cache_dir = engine::default_cache_dir();
  std::error_code ec;
  const auto canonical = [&](const std::filesystem::path& p) {
    auto c = std::filesystem::weakly_canonical(p, ec);
    return ec ? p.string() : c.string();
  };
  const auto& f = gpu.ctx.info;
  o.cache_key = fmt::format("{}|{}|{}|{}|{}|{}|{}", f.name, f.driver, canonical(model_path), canonical(draft_path),
                            target.config().hidden_size, target.config().num_hidden_layers, target.config().vocab_size);
  std::string report;
  const engine::AutoChoice c = engine::auto_tree_shape(gpu, target, draft, o, &report);
  fmt::print(stderr, "{}", report);
  return c.shape;
}

}  // namespace eaglevk::cli
