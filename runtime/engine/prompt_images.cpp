#include "runtime/engine/prompt_images.h"

#include <algorithm>

#include <fmt/format.h>

#include <eaglevk/error.h>

#include "runtime/vk/recorder.h"

namespace eaglevk::engine {

models::EmbeddingOverride PromptImages::override_for(uint32_t start, uint32_t rows) const {
  models::EmbeddingOverride o;
  o.features = ops::Act(features, hidden);
  auto it = std::lower_bound(patch_positions.begin(), patch_positions.end(), start);
  for (; it != patch_positions.end() && *it < start + rows; ++it) {
    const uint32_t feature_row = uint32_t(it - patch_positions.begin()), pass_row = *it - start;
    models::EmbeddingRun* last = o.runs.empty() ? nullptr : &o.runs.back();
    if (last && last->pass_row + last->rows == pass_row && last->feature_row + last->rows == feature_row)
      ++last->rows;
    else
      o.runs.push_back({pass_row, feature_row, 1});
  }
  return o;
}

void PromptImages::check(std::span<const int32_t> prompt) const {
  if (uint64_t(patch_positions.size()) * hidden * 4 > features.bytes)
    fail("{} image tokens but features for only {}", patch_positions.size(), features.bytes / 4 / std::max(hidden, 1u));
  size_t next = 0;
  for (size_t pos = 0; pos < prompt.size(); ++pos) {
    const bool listed = next < patch_positions.size() && patch_positions[next] == pos;
    if (listed != (prompt[pos] == patch_id))
      fail("the prompt's image tokens do not match its images (position {} holds token {})", pos, prompt[pos]);
    next += listed;
  }
  if (next != patch_positions.size()) fail("image token positions beyond the prompt of {} tokens", prompt.size());
}

vk::Buffer encode_image_tiles(ops::Gpu& gpu, const models::Llama4Vision& vision, std::span<const float> pixels,
                              uint32_t tiles) {
  const models::Llama4VisionConfig& c = vision.config;
  if (tiles == 0) fail("no image tiles to encode");
  const uint64_t tokens = uint64_t(tiles) * c.tokens_per_tile(), feature_bytes = tokens * c.text_hidden * 4;
  if (feature_bytes > gpu.ctx.max_binding_range)
    fail("the image features of {} tiles take {} bytes, more than one storage binding holds on this device ({})",
         tiles, feature_bytes, gpu.ctx.max_binding_range);
  std::vector<float> patches = models::unfold_patches(pixels, tiles, c.image_size, c.patch_size);
  const uint64_t per_tile = uint64_t(c.patches()) * 3 * c.patch_size * c.patch_size * 4;
  vk::Buffer upload(gpu.ctx, patches.size() * 4, vk::MemoryKind::Upload, "image patches");
  std::copy(patches.begin(), patches.end(), static_cast<float*>(upload.mapped));
  vk::Buffer features(gpu.ctx, feature_bytes, vk::MemoryKind::Device, "image features");
  models::VisionWorkspace ws = models::make_vision_workspace(gpu.ctx, vision, tiles);
  vk::Recorder rec(gpu.ctx);
  ops::OpContext oc{gpu, rec};
  rec.begin();
  for (uint32_t first = 0; first < tiles; first += ws.chunk_tiles) {
    const uint32_t count = std::min(ws.chunk_tiles, tiles - first);
    rec.copy(vk::BufferRange(upload, first * per_tile, count * per_tile), vk::BufferRange(ws.patches, 0, count * per_tile),
             "image patches");
    models::record_llama4_vision(oc, vision, ws, first, count, ops::Act(features, c.text_hidden));
  }
  rec.submit_and_wait();
  return features;
}

std::optional<ImageSupport> image_support(const models::TargetModel& model, const loader::ModelFiles& files,
                                          const loader::Tokenizer& tokenizer, std::string* why) {
  auto refuse = [&](std::string reason) -> std::optional<ImageSupport> {
    if (why) *why = std::move(reason);
    return std::nullopt;
  };
  const std::string name = files.path.filename().string();
  const auto* llama4 = std::get_if<models::Llama4Model>(&model.family);
  if (!llama4) return refuse(fmt::format("{} has no vision tower (a {} text model)", name, model.architecture()));
  if (!llama4->vision) return refuse(fmt::format("{} cannot take images: {}", name, llama4->no_vision_reason));
  ImageSupport s;
  s.vision = &*llama4->vision;
  s.preprocess = loader::load_llama4_image_config(files);
  s.tokens = loader::load_llama4_image_tokens(files, tokenizer);
  const models::Llama4VisionConfig& c = s.vision->config;
  if (s.preprocess.tile != c.image_size)
    fail("{}: the preprocessor's tile of {} pixels differs from the vision tower's image_size {}", files.source(),
         s.preprocess.tile, c.image_size);
  if (s.tokens.tokens_per_tile != c.tokens_per_tile() || s.tokens.ids.patch != c.patch_id)
    fail("{}: the processor's image tokens ({} per tile, <|patch|> id {}) disagree with the vision tower ({}, {})",
         files.source(), s.tokens.tokens_per_tile, s.tokens.ids.patch, c.tokens_per_tile(), c.patch_id);
  return s;
}

ImagePrompt build_image_prompt(ops::Gpu& gpu, const ImageSupport& support, std::span<const int32_t> ids,
                               std::span<const loader::RgbImage> images) {
  std::vector<loader::TileGrid> grids;
  std::vector<float> pixels;
  uint32_t tiles = 0;
  for (const loader::RgbImage& image : images) {
    loader::PreprocessedImage p = loader::preprocess_llama4_image(image, support.preprocess);
    grids.push_back({p.rows, p.cols});
    pixels.insert(pixels.end(), p.pixels.begin(), p.pixels.end());
    tiles += p.tiles;
  }
  loader::ExpandedPrompt expanded = loader::expand_llama4_image_tokens(ids, grids, support.tokens);
  ImagePrompt out;
  out.ids = std::move(expanded.ids);
  out.images.hidden = support.vision->config.text_hidden;
  out.images.patch_positions = std::move(expanded.patch_positions);
  out.images.patch_id = support.tokens.ids.patch;
  if (tiles) out.images.features = encode_image_tiles(gpu, *support.vision, pixels, tiles);
  return out;
}

}  // namespace eaglevk::engine
