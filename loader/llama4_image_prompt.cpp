#include "loader/llama4_image_prompt.h"

#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

#include <eaglevk/error.h>

#include "loader/hf_config.h"

namespace eaglevk::loader {
namespace {

using nlohmann::json;

int32_t token_id_of(const Tokenizer& tokenizer, const std::string& token, std::string_view role) {
  auto id = tokenizer.token_id(token);
  if (!id) fail("the tokenizer has no {} token \"{}\" (needed for image prompts)", role, token);
  return *id;
}

// config.json's id for a token, when it names one, must be the tokenizer's.
void check_config_id(const json& config, std::string_view key, int32_t id, const std::string& token,
                     std::string_view source) {
  auto expected = json_field::optional_int(config, key, source);
  if (expected && *expected != id)
    fail("{}: {} is {}, but the tokenizer has {} as id {}", source, key, *expected, token, id);
}

}  // namespace

uint32_t llama4_tokens_per_tile(uint32_t tile, uint32_t patch_size, float pixel_shuffle_ratio) {
  if (patch_size == 0 || tile % patch_size != 0)
    fail("Llama-4 vision: tile {} is not a whole number of {}-pixel patches", tile, patch_size);
  if (!(pixel_shuffle_ratio > 0 && pixel_shuffle_ratio <= 1))
    fail("Llama-4 vision: pixel_shuffle_ratio {} must be in (0, 1]", pixel_shuffle_ratio);
  // Python's round() in HF: ties to even, which nearbyint does in the default rounding mode.
  const double downsample = std::nearbyint(1.0 / (double(pixel_shuffle_ratio) * pixel_shuffle_ratio));
  const uint64_t side = tile / patch_size, patches = side * side;
  if (downsample < 1 || downsample > double(patches) || patches % uint64_t(downsample) != 0)
    fail("Llama-4 vision: a pixel shuffle by {} does not divide the {} x {} patches of a tile", downsample, side,
         side);
  return static_cast<uint32_t>(patches / uint64_t(downsample));
}

namespace {

// The image tokens of a model whose config is `config` (config.json's shape, from `source`),
// with processor_config.json looked for in `model_dir`; `preprocess_tile`, when known, must be
// the vision tower's image_size.
Llama4ImageTokens image_tokens_of(const json& config, const std::string& source, const std::filesystem::path& model_dir,
                                  const Tokenizer& tokenizer, std::optional<uint32_t> preprocess_tile) {
  using namespace json_field;
  // Token strings: processor_config.json's, else the Llama-4 names.
  std::string start = "<|image_start|>", end = "<|image_end|>", image = "<|image|>", patch = "<|patch|>",
              x_sep = "<|tile_x_separator|>", y_sep = "<|tile_y_separator|>";
  std::optional<int> processor_patch_size;
  const auto processor_path = model_dir / "processor_config.json";
  if (std::filesystem::exists(processor_path)) {
    const json processor = read_file(processor_path);
    const std::string source = processor_path.string();
    start = optional_string(processor, "start_of_image_token", source).value_or(start);
    end = optional_string(processor, "end_of_image_token", source).value_or(end);
    image = optional_string(processor, "image_token", source).value_or(image);
    patch = optional_string(processor, "patch_token", source).value_or(patch);
    x_sep = optional_string(processor, "tile_x_separator_token", source).value_or(x_sep);
    y_sep = optional_string(processor, "tile_y_separator_token", source).value_or(y_sep);
    processor_patch_size = optional_int(processor, "patch_size", source);
  }
  Llama4ImageTokens out;
  out.ids.image_start = token_id_of(tokenizer, start, "image start");
  out.ids.image_end = token_id_of(tokenizer, end, "image end");
  out.ids.image = token_id_of(tokenizer, image, "image");
  out.ids.patch = token_id_of(tokenizer, patch, "image patch");
  out.ids.tile_x_sep = token_id_of(tokenizer, x_sep, "tile x separator");
  out.ids.tile_y_sep = token_id_of(tokenizer, y_sep, "tile y separator");

  check_config_id(config, "boi_token_index", out.ids.image_start, start, source);
  check_config_id(config, "eoi_token_index", out.ids.image_end, end, source);
  check_config_id(config, "image_token_index", out.ids.patch, patch, source);
  if (!has(config, "vision_config")) fail("{}: missing 'vision_config' (not a Llama-4 vision model?)", source);
  const json& vision = config["vision_config"];
  const int image_size = required_int(vision, "image_size", source);
  const int patch_size = required_int(vision, "patch_size", source);
  const float ratio = required_float(vision, "pixel_shuffle_ratio", source);
  if (image_size < 1 || patch_size < 1) fail("{}: vision_config image_size and patch_size must be positive", source);
  if (processor_patch_size && *processor_patch_size != patch_size)
    fail("{}: patch_size {} differs from vision_config.patch_size {}", processor_path.string(), *processor_patch_size,
         patch_size);
  if (preprocess_tile && *preprocess_tile != uint32_t(image_size))
    fail("{}: vision_config.image_size {} differs from the preprocessor's tile size {}", source, image_size,
         *preprocess_tile);
  out.tokens_per_tile = llama4_tokens_per_tile(uint32_t(image_size), uint32_t(patch_size), ratio);
  return out;
}

}  // namespace

Llama4ImageTokens load_llama4_image_tokens(const std::filesystem::path& model_dir, const Tokenizer& tokenizer) {
  const auto config_path = model_dir / "config.json";
  std::optional<uint32_t> tile;
  if (std::filesystem::exists(model_dir / "preprocessor_config.json")) tile = load_llama4_image_config(model_dir).tile;
  return image_tokens_of(json_field::read_file(config_path), config_path.string(), model_dir, tokenizer, tile);
}

Llama4ImageConfig load_llama4_image_config(const ModelFiles& files) {
  if (files.preprocessor_config && !std::filesystem::exists(files.folder / "preprocessor_config.json"))
    return parse_llama4_image_config(*files.preprocessor_config, files.mmproj.string());
  return load_llama4_image_config(files.folder);
}

Llama4ImageTokens load_llama4_image_tokens(const ModelFiles& files, const Tokenizer& tokenizer) {
  std::optional<uint32_t> tile;
  if (files.preprocessor_config || std::filesystem::exists(files.folder / "preprocessor_config.json"))
    tile = load_llama4_image_config(files).tile;
  const std::string source = files.mmproj.empty() ? (files.folder / "config.json").string() : files.source();
  return image_tokens_of(files.config, source, files.folder, tokenizer, tile);
}

std::vector<int32_t> llama4_image_layout(TileGrid grid, const Llama4ImageTokens& tokens) {
  const ImageTokenIds& ids = tokens.ids;
  const uint32_t n = tokens.tokens_per_tile;
  std::vector<int32_t> out{ids.image_start};
  if (uint64_t(grid.rows) * grid.cols > 1) {
    for (uint32_t r = 0; r < grid.rows; ++r) {
      for (uint32_t c = 0; c < grid.cols; ++c) {
        out.insert(out.end(), n, ids.patch);
        if (c + 1 < grid.cols) out.push_back(ids.tile_x_sep);
      }
      out.push_back(ids.tile_y_sep);
    }
  }
  out.push_back(ids.image);
  out.insert(out.end(), n, ids.patch);
  out.push_back(ids.image_end);
  return out;
}

ExpandedPrompt expand_llama4_image_tokens(std::span<const int32_t> ids, std::span<const TileGrid> images,
                                          const Llama4ImageTokens& tokens) {
  size_t placeholders = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] == tokens.ids.image) ++placeholders;
    if (ids[i] == tokens.ids.patch)
      fail("the prompt already holds a <|patch|> token (id {}) at position {}, before any image is expanded",
           tokens.ids.patch, i);
  }
  if (placeholders != images.size())
    fail("the prompt has {} image placeholder(s) (<|image|>) but {} image(s) were given", placeholders,
         images.size());
  ExpandedPrompt out;
  size_t next_image = 0;
  for (int32_t id : ids) {
    if (id != tokens.ids.image) {
      out.ids.push_back(id);
      continue;
    }
    for (int32_t t : llama4_image_layout(images[next_image++], tokens)) {
      if (t == tokens.ids.patch) out.patch_positions.push_back(static_cast<uint32_t>(out.ids.size()));
      out.ids.push_back(t);
    }
  }
  return out;
}

}  // namespace eaglevk::loader
