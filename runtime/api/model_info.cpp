// What the facade tells a front door about a loaded model: its sizes and draft taps, its routed
// experts' traffic, and the tree shape `--spec-draft-tokens auto` chooses for it.
#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include <eaglevk/eaglevk.hpp>

#include "models/eagle3.h"
#include "models/target.h"
#include "runtime/api/errors.h"
#include "runtime/engine/tree_auto.h"
#include "runtime/ops/gpu.h"

namespace eaglevk::api {

ModelInfo model_info(const Model& m) {
  const auto& c = m.target->config();
  ModelInfo info;
  info.vocab_size = c.vocab_size;
  info.bos_token_id = c.bos_token_id;
  info.hidden_size = uint32_t(c.hidden_size);
  info.layers = uint32_t(c.num_hidden_layers);
  info.weight_bytes = m.target->weight_bytes();
  info.parameters = m.target->parameters();
  if (m.draft) {
    info.draft_taps = m.draft->aux_layers;
    info.default_taps = models::default_aux_layers(info.layers);
    info.draft_taps_default = m.draft->aux_layers_default;
    info.draft_taps_rule = m.draft->config.aux_layers_rule;
  }
  return info;
}

ExpertTraffic expert_traffic(const Model& m, uint32_t verify_rows) {
  // A split model's parts each hold their own layers' experts: the model's traffic is their sum.
  models::ExpertTraffic t = models::expert_traffic(*m.target);
  for (const models::TargetPart& part : m.target->earlier) {
    const models::ExpertTraffic p = models::expert_traffic(*part.model);
    t.moe_layers += p.moe_layers;
    t.bytes += p.bytes;
    t.host_bytes += p.host_bytes;
    t.experts = std::max(t.experts, p.experts);
    t.experts_per_token = std::max(t.experts_per_token, p.experts_per_token);
    t.bytes_per_expert = std::max(t.bytes_per_expert, p.bytes_per_expert);
  }
  ExpertTraffic out;
  if (t.moe_layers == 0) return out;
  out.moe_layers = t.moe_layers;
  out.experts = t.experts;
  out.experts_per_token = t.experts_per_token;
  out.bytes = t.bytes;
  out.host_bytes = t.host_bytes;
  out.bytes_per_expert = t.bytes_per_expert;
  out.bytes_per_token = t.bytes_per_token();
  if (verify_rows) {
    out.verify_rows = verify_rows;
    out.bytes_per_verify_pass_at_most = t.bytes_per_pass_bound(verify_rows);
  }
  return out;
}

engine::TreeParams auto_tree(const Model& m, const engine::TreeParams& bounds,
                             const std::vector<std::vector<int32_t>>& prompts, std::string* report) {
  if (bounds.draft_tokens != 0) return bounds;
  if (!m.draft) fail_as(ErrorKind::InvalidArgument, "choosing a tree shape needs a draft");
  engine::AutoOptions o;
  o.prompts = prompts;
  o.max_steps = bounds.steps;
  o.max_topk = bounds.topk;
  o.cache_dir = engine::default_cache_dir();
  // The cache key names the files by their canonical paths: the same model by another path
  // finds its costs.
  std::error_code ec;
  const auto canonical = [&](const std::filesystem::path& p) {
    auto c = std::filesystem::weakly_canonical(p, ec);
    return ec ? p.string() : c.string();
  };
  const ops::Gpu& gpu = *m.device->gpu;
  const auto& f = gpu.ctx.info;
  const auto& c = m.target->config();
  o.cache_key = fmt::format("{}|{}|{}|{}|{}|{}|{}", f.name, f.driver, canonical(m.target_dir), canonical(m.draft_dir),
                            c.hidden_size, c.num_hidden_layers, c.vocab_size);
  std::lock_guard lock(m.device->queue_mutex);
  return within(ErrorKind::Device, [&] { return engine::auto_tree_shape(*m.device->gpu, *m.target, *m.draft, o, report).shape; });
}

}  // namespace eaglevk::api
