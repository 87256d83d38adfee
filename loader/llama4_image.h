#pragma once
// Llama-4 image preprocessing: an RGB image to the pixel tiles the vision encoder takes, exactly
// as shared/docs/vision-spec.md §1 describes transformers' Llama4ImageProcessorFast (with the
// normalization in float32, as the golden file; HF does that step in bfloat16).
//
//   pick a canvas of rows x cols tiles (at most max_patches tiles) that needs the least scaling
//   -> resize the uint8 image without distortion (antialiased bilinear, PIL's algorithm)
//   -> pad right and bottom with 0 to the canvas -> normalize -> split into tiles row-major
//   -> when there is more than one tile, append a global tile: the whole image resized to t x t.
#include <cstdint>
#include <filesystem>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "loader/image_decode.h"

namespace eaglevk::loader {

struct Llama4ImageConfig {
  uint32_t tile = 336;        // t: preprocessor_config.json size.height (== size.width)
  uint32_t max_patches = 16;  // the most local tiles of one image
  bool resize_to_max_canvas = false;
  float mean[3] = {0.5f, 0.5f, 0.5f};
  float std[3] = {0.5f, 0.5f, 0.5f};
  float rescale = 1.0f / 255.0f;  // rescale_factor
};

// Reads model_dir/preprocessor_config.json; throws when it is missing or describes something
// else than this preprocessing (non-square size, another resampling filter, do_resize false).
Llama4ImageConfig load_llama4_image_config(const std::filesystem::path& model_dir);
Llama4ImageConfig parse_llama4_image_config(const nlohmann::json& config, std::string_view source);
// Throws unless 1 <= tile <= 1024, 1 <= max_patches <= 64 and every std > 0. The bounds keep
// one image's pixels (max_patches + 1 tiles of 3 x t x t floats) under 1 GiB.
void check_llama4_image_config(const Llama4ImageConfig& config);

struct TileGrid {
  uint32_t rows = 0, cols = 0;
  bool operator==(const TileGrid&) const = default;
};

// The candidate canvases as tile grids, in HF's list order (§1.1): for n = max_patches .. 1 and
// each divisor a of n ascending, (a, n/a); grouped by aspect ratio in order of first appearance.
std::vector<TileGrid> llama4_canvas_grids(uint32_t max_patches);

// The canvas for an image of height x width (§1.2): the grid whose float32 scale
// min(cols*t/width, rows*t/height) is the smallest one >= 1 (the largest with
// resize_to_max_canvas), else the largest one < 1; the smallest area among equal scales.
TileGrid choose_llama4_grid(uint32_t height, uint32_t width, const Llama4ImageConfig& config);

struct ImageSize {
  uint32_t height = 0, width = 0;
  bool operator==(const ImageSize&) const = default;
};

// The size the image is resized to before padding to `canvas` (§1.3): it is never enlarged
// beyond its own size unless a side is shorter than one tile (`tile`); the aspect ratio is kept
// (the shorter-scaled side floored). Each side at least 1.
ImageSize llama4_resized_size(ImageSize image, ImageSize canvas, uint32_t tile, bool resize_to_max_canvas);

// Every decision for one image; `tiles` counts the global tile.
struct Llama4ImagePlan {
  uint32_t canvas_h = 0, canvas_w = 0;
  uint32_t resized_h = 0, resized_w = 0;
  uint32_t rows = 0, cols = 0;
  uint32_t tiles = 0;  // rows * cols, + 1 when rows * cols > 1
};
Llama4ImagePlan plan_llama4_image(uint32_t height, uint32_t width, const Llama4ImageConfig& config);

// The uint8 canvas (§1.4-1.5): the image resized to plan.resized_* (resize_bilinear_antialias,
// image_resize.h) and padded with 0 to plan.canvas_*.
RgbImage llama4_canvas_u8(const RgbImage& image, const Llama4ImagePlan& plan);
// The uint8 global tile (§1.8): the whole image resized straight to t x t (aspect not kept).
RgbImage llama4_global_tile_u8(const RgbImage& image, uint32_t tile);

struct PreprocessedImage {
  uint32_t canvas_h = 0, canvas_w = 0, resized_h = 0, resized_w = 0, rows = 0, cols = 0, tiles = 0;
  std::vector<float> pixels;  // [tiles][3][t][t]: local tiles row-major, then the global tile
};

PreprocessedImage preprocess_llama4_image(const RgbImage& image, const Llama4ImageConfig& config);

}  // namespace eaglevk::loader
