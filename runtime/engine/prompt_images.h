#pragma once
// Image features of a prompt on the device, and where they go: one feature row per <|patch|>
// token, in prompt order (vision-spec.md §4). The prefill passes of both generation paths
// take these rows instead of the <|patch|> embedding; nothing else about the prompt changes.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "loader/image_decode.h"
#include "loader/llama4_image.h"
#include "loader/llama4_image_prompt.h"
#include "models/llama4_vision.h"
#include "models/target.h"
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

// What a model needs to take images: its vision tower, the preprocessing of its
// preprocessor_config.json (or of its attached mmproj), and the image tokens of its tokenizer.
struct ImageSupport {
  const models::Llama4Vision* vision = nullptr;
  loader::Llama4ImageConfig preprocess;
  loader::Llama4ImageTokens tokens;
};
// nullopt, with the reason in `why`, when the model cannot take images (a text-only
// checkpoint, placeholder image ids, a GGUF file without its mmproj).
std::optional<ImageSupport> image_support(const models::TargetModel& model, const loader::ModelFiles& files,
                                          const loader::Tokenizer& tokenizer, std::string* why = nullptr);

// A prompt whose ids hold one <|image|> placeholder per image (a rendered chat), with the
// placeholders expanded into the images' token layouts and the features of all their tiles.
struct ImagePrompt {
  std::vector<int32_t> ids;
  PromptImages images;
};
ImagePrompt build_image_prompt(ops::Gpu& gpu, const ImageSupport& support, std::span<const int32_t> ids,
                               std::span<const loader::RgbImage> images);

}  // namespace eaglevk::engine
