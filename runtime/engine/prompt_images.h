#pragma once
// Image features of a prompt on the device, and where they go: one feature row per <|patch|>
// token, in prompt order (vision-spec.md §4). The prefill passes of both generation paths
// take these rows instead of the <|patch|> embedding; nothing else about the prompt changes.
#include <cstdint>
#include <span>
#include <vector>

#include "models/llama4_vision.h"
#include "models/target_state.h"
#include "runtime/ops/gpu.h"

namespace eaglevk::engine {

struct PromptImages {
  vk::Buffer features;                    // f32 [patch tokens, hidden]
  uint32_t hidden = 0;
  std::vector<uint32_t> patch_positions;  // ascending absolute positions of the <|patch|> tokens
  int32_t patch_id = -1;                  // the <|patch|> token id

  // Fails unless every listed position of `prompt` holds the <|patch|> id, every <|patch|> of
  // the prompt is listed, and the features hold a row for each.
  void check(std::span<const int32_t> prompt) const;

  // The feature rows of a pass over positions [start, start + rows), as runs of consecutive rows.
  models::EmbeddingOverride override_for(uint32_t start, uint32_t rows) const;
};

// Runs the vision tower over `tiles` tiles of pixels ([tiles][3][t][t], images one after
// another, each image's tiles in its own order) in one submission; returns f32 features
// [tiles * tokens per tile, text hidden] in the same order.
vk::Buffer encode_image_tiles(ops::Gpu& gpu, const models::Llama4Vision& vision, std::span<const float> pixels,
                              uint32_t tiles);

}  // namespace eaglevk::engine
