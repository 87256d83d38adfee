#pragma once
// Image tokens in a Llama-4 prompt (vision-spec.md §2, transformers' Llama4Processor): the chat
// text holds one "<|image|>" per image; after tokenizing it, each <|image|> id (the k-th for the
// k-th image) becomes
//   <|image_start|>
//     if rows*cols > 1: per tile row: per tile: <|patch|> x n, <|tile_x_separator|> between the
//                       tiles of a row; <|tile_y_separator|> after each row
//     <|image|> <|patch|> x n
//   <|image_end|>
// with n tokens per tile. The image features replace the <|patch|> embeddings, in order.
// Working on ids rather than text keeps the rest of the prompt tokenized exactly as before.
#include <cstdint>
#include <filesystem>
#include <span>
#include <vector>

#include "loader/llama4_image.h"
#include "loader/model_files.h"
#include "loader/tokenizer.h"

namespace eaglevk::loader {

struct ImageTokenIds {
  int32_t image_start = -1;  // <|image_start|>, config.json boi_token_index
  int32_t image_end = -1;    // <|image_end|>, eoi_token_index
  int32_t image = -1;        // <|image|>: the chat placeholder; also marks the global tile
  int32_t patch = -1;        // <|patch|>, image_token_index: one per image feature row
  int32_t tile_x_sep = -1;   // <|tile_x_separator|>
  int32_t tile_y_sep = -1;   // <|tile_y_separator|>
};

struct Llama4ImageTokens {
  ImageTokenIds ids;
  uint32_t tokens_per_tile = 0;  // n
};

// n = (tile / patch_size)^2 / round(1 / pixel_shuffle_ratio^2), as HF computes it; throws unless
// the tile is a whole number of patches and the pixel shuffle divides the patch grid.
uint32_t llama4_tokens_per_tile(uint32_t tile, uint32_t patch_size, float pixel_shuffle_ratio);

// The token strings from model_dir/processor_config.json (Llama-4's defaults when it is absent),
// their ids from the tokenizer, cross-checked against config.json's boi_token_index,
// eoi_token_index and image_token_index; n from config.json's vision_config (image_size,
// patch_size, pixel_shuffle_ratio), whose image_size must equal preprocessor_config.json's tile.
Llama4ImageTokens load_llama4_image_tokens(const std::filesystem::path& model_dir, const Tokenizer& tokenizer);

// The same for a model's opened files, whose config may be a GGUF file's with an attached
// mmproj (loader/mmproj.h): the ids are checked against files.config, and the preprocessing is
// preprocessor_config.json beside the model, else the mmproj's (files.preprocessor_config).
Llama4ImageConfig load_llama4_image_config(const ModelFiles& files);
Llama4ImageTokens load_llama4_image_tokens(const ModelFiles& files, const Tokenizer& tokenizer);

// The tokens that replace one <|image|> for an image of `grid` tiles.
std::vector<int32_t> llama4_image_layout(TileGrid grid, const Llama4ImageTokens& tokens);

struct ExpandedPrompt {
  std::vector<int32_t> ids;
  std::vector<uint32_t> patch_positions;  // index in `ids` of every <|patch|>, in order
};

// Replaces the k-th <|image|> id of `ids` by the layout of images[k]. Throws when the number of
// <|image|> ids differs from the number of images, or when `ids` already holds a <|patch|> id
// (it would take an image feature row that belongs to no image).
ExpandedPrompt expand_llama4_image_tokens(std::span<const int32_t> ids, std::span<const TileGrid> images,
                                          const Llama4ImageTokens& tokens);

}  // namespace eaglevk::loader
