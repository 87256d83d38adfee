// What `eaglevk eval` asks of a loaded model besides its sessions: stop reasons, the image
// prompt's layout, the draft's taps for an aux-layer sweep, the automatic tree shape and the
// profiler's report, so that the app reaches none of the engine's lower layers.
#include <algorithm>

#include <fmt/format.h>

#include <eaglevk/eaglevk.hpp>

#include "loader/llama4_image.h"
#include "loader/llama4_image_prompt.h"
#include "models/eagle3.h"
#include "models/target.h"
#include "runtime/api/errors.h"
#include "runtime/engine/decoder.h"
#include "runtime/engine/prompt_images.h"
#include "runtime/engine/stop_text.h"
#include "runtime/engine/tree_auto.h"
#include "runtime/ops/gpu.h"
#include "runtime/vk/profile.h"

namespace eaglevk::api {

static_assert(kMaxBatchSequences == engine::kMaxBatch);

const char* stop_reason(const GenerateOutput& out) {
  engine::GenerationResult r;
  r.stopped_at_eos = out.stopped_at_eos;
  r.stopped_at_context = out.stopped_at_context;
  return engine::stop_reason(r, out.stopped_at_stop_string);
}

void check_stop_strings(const std::vector<std::string>& stop) {
  within(ErrorKind::InvalidArgument, [&] { engine::StopText check(stop); });
}

std::vector<int32_t> image_prompt_ids(const Model& model, std::span<const int32_t> prompt,
                                      std::span<const loader::RgbImage> images) {
  if (!model.images)
    throw ApiError(ErrorKind::Model, fmt::format("this model cannot take images: {}", model.no_images_reason),
                   model.no_images_setting);
  return within(ErrorKind::InvalidArgument, [&] {
    std::vector<loader::TileGrid> grids;
    for (const loader::RgbImage& image : images) {
      const loader::PreprocessedImage p = loader::preprocess_llama4_image(image, model.images->preprocess);
      grids.push_back({p.rows, p.cols});
    }
    return loader::expand_llama4_image_tokens(prompt, grids, model.images->tokens).ids;
  });
}

uint32_t target_layers(const Model& model) { return uint32_t(model.target->config().num_hidden_layers); }

std::vector<uint32_t> draft_taps(const Model& model) {
  if (!model.draft) fail_as(ErrorKind::InvalidArgument, "the model has no draft");
  return model.draft->aux_layers;
}

void set_draft_taps(const Model& model, std::vector<uint32_t> layers) {
  if (!model.draft) fail_as(ErrorKind::InvalidArgument, "the model has no draft");
  const std::vector<uint32_t>& now = model.draft->aux_layers;
  if (layers.size() != now.size())
    fail_as(ErrorKind::InvalidArgument, "the draft taps {} layers, got {}", now.size(), layers.size());
  const uint32_t top = target_layers(model);
  for (size_t i = 0; i < layers.size(); ++i) {
    if (layers[i] > top)
      fail_as(ErrorKind::InvalidArgument, "tap layer {} is out of range: the target has {} layers (ids 0..{})",
              layers[i], top, top);
    if (i && layers[i] <= layers[i - 1])
      fail_as(ErrorKind::InvalidArgument, "tap layers must be ascending and distinct, got {} after {}", layers[i],
              layers[i - 1]);
  }
  // The decoder copies the ids when a session is made (the weights do not depend on them).
  model.draft->aux_layers = std::move(layers);
}

engine::TreeParams auto_tree_shape(const Model& model, const engine::TreeParams& bounds,
                                   const std::vector<std::vector<int32_t>>& prompts, std::string* report) {
  if (bounds.draft_tokens != 0) return bounds;
  if (!model.draft) fail_as(ErrorKind::InvalidArgument, "tree drafting needs a draft");
  engine::AutoOptions o;
  o.prompts = prompts;
  o.max_steps = bounds.steps;
  o.max_topk = bounds.topk;
  o.cache_dir = engine::default_cache_dir();
  std::error_code ec;
  const auto canonical = [&](const std::filesystem::path& p) {
    auto c = std::filesystem::weakly_canonical(p, ec);
    return ec ? p.string() : c.string();
  };
  ops::Gpu& gpu = *model.device->gpu;
  const auto& f = gpu.ctx.info;
  const auto& c = model.target->config();
  o.cache_key = fmt::format("{}|{}|{}|{}|{}|{}|{}", f.name, f.driver, canonical(model.target_dir),
                            canonical(model.draft_dir), c.hidden_size, c.num_hidden_layers, c.vocab_size);
  std::lock_guard lock(model.device->queue_mutex);
  return within(ErrorKind::Device, [&] { return engine::auto_tree_shape(gpu, *model.target, *model.draft, o, report).shape; });
}

std::string profile_report(uint64_t generated_tokens) { return vk::profile_report(generated_tokens); }

}  // namespace eaglevk::api
