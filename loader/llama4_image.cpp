// Built with -ffp-contract=off (CMakeLists.txt): the normalization must round u * rescale to
// float32 before subtracting the mean, as the golden file's float32 arithmetic does.
#include "loader/llama4_image.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <nlohmann/json.hpp>

#include <eaglevk/error.h>

#include "loader/hf_config.h"
#include "loader/image_resize.h"

namespace eaglevk::loader {
namespace {

using nlohmann::json;

// image_mean / image_std: a number for all channels, or a list of three.
void read_channel_triple(const json& config, std::string_view key, std::string_view source, float (&out)[3]) {
  if (!json_field::has(config, key)) return;
  const json& value = config[std::string(key)];
  if (value.is_number()) {
    out[0] = out[1] = out[2] = value.get<float>();
    return;
  }
  if (!value.is_array() || value.size() != 3)
    fail("{}: '{}' must be a number or a list of 3 numbers, got a {}", source, key, value.type_name());
  for (size_t c = 0; c < 3; ++c) {
    if (!value[c].is_number()) fail("{}: '{}'[{}] must be a number, got a {}", source, key, c, value[c].type_name());
    out[c] = value[c].get<float>();
  }
}

// Fills `pixels` (a [3][t][t] tile) from the t x t window of `rgb` (width `stride` pixels) whose
// top-left pixel is (y0, x0). lut[c][u] is the normalized value of byte u in channel c.
void write_tile(const RgbImage& rgb, uint32_t y0, uint32_t x0, uint32_t t, const float (&lut)[3][256],
                float* pixels) {
  for (uint32_t c = 0; c < 3; ++c)
    for (uint32_t y = 0; y < t; ++y) {
      const uint8_t* row = rgb.rgb.data() + (size_t(y0 + y) * rgb.width + x0) * 3;
      float* dst = pixels + (size_t(c) * t + y) * t;
      for (uint32_t x = 0; x < t; ++x) dst[x] = lut[c][row[x * 3 + c]];
    }
}

}  // namespace

void check_llama4_image_config(const Llama4ImageConfig& config) {
  if (config.tile < 1 || config.tile > 1024) fail("Llama-4 image tile size {} is outside 1..1024", config.tile);
  if (config.max_patches < 1 || config.max_patches > 64)
    fail("Llama-4 image max_patches {} is outside 1..64", config.max_patches);
  for (int c = 0; c < 3; ++c)
    if (!(config.std[c] > 0) || !std::isfinite(config.mean[c]) || !std::isfinite(config.rescale))
      fail("Llama-4 image normalization: std must be > 0 and mean, std, rescale finite (channel {})", c);
}

Llama4ImageConfig parse_llama4_image_config(const json& config, std::string_view source) {
  using namespace json_field;
  if (!config.is_object()) fail("{}: expected a JSON object, got a {}", source, config.type_name());
  Llama4ImageConfig out;
  if (auto type = optional_string(config, "image_processor_type", source);
      type && type->find("Llama4ImageProcessor") == std::string::npos)
    fail("{}: image_processor_type is \"{}\", not a Llama-4 image processor", source, *type);
  if (!has(config, "size")) fail("{}: missing required field 'size'", source);
  const json& size = config["size"];
  const int height = required_int(size, "height", source), width = required_int(size, "width", source);
  if (height != width) fail("{}: size must be square (the tile), got height {} and width {}", source, height, width);
  if (height < 1) fail("{}: size.height {} must be positive", source, height);
  out.tile = static_cast<uint32_t>(height);
  if (auto n = optional_int(config, "max_patches", source)) {
    if (*n < 1) fail("{}: max_patches {} must be positive", source, *n);
    out.max_patches = static_cast<uint32_t>(*n);
  }
  out.resize_to_max_canvas = optional_bool(config, "resize_to_max_canvas", source).value_or(false);
  if (!optional_bool(config, "do_resize", source).value_or(true))
    fail("{}: do_resize false is not supported (the tiles need the resize)", source);
  if (auto resample = optional_int(config, "resample", source); resample && *resample != 2)
    fail("{}: resample {} is not supported (only 2, bilinear)", source, *resample);
  if (optional_bool(config, "do_rescale", source).value_or(true))
    out.rescale = optional_float(config, "rescale_factor", source).value_or(1.0f / 255.0f);
  else
    out.rescale = 1;
  if (optional_bool(config, "do_normalize", source).value_or(true)) {
    read_channel_triple(config, "image_mean", source, out.mean);
    read_channel_triple(config, "image_std", source, out.std);
  } else {
    std::fill(std::begin(out.mean), std::end(out.mean), 0.0f);
    std::fill(std::begin(out.std), std::end(out.std), 1.0f);
  }
  try {
    check_llama4_image_config(out);
  } catch (const Error& e) {
    fail("{}: {}", source, e.what());
  }
  return out;
}

Llama4ImageConfig load_llama4_image_config(const std::filesystem::path& model_dir) {
  const auto path = model_dir / "preprocessor_config.json";
  if (!std::filesystem::exists(path))
    fail("{} not found: a Llama-4 model needs it to preprocess images", path.string());
  return parse_llama4_image_config(json_field::read_file(path), path.string());
}

std::vector<TileGrid> llama4_canvas_grids(uint32_t max_patches) {
  // HF keys its groups by the float a / (n / a); equal ratios give bit-equal floats (division is
  // correctly rounded), so grouping by the reduced fraction is the same grouping.
  std::vector<std::pair<TileGrid, std::vector<TileGrid>>> groups;
  for (uint32_t n = max_patches; n >= 1; --n)
    for (uint32_t a = 1; a <= n; ++a) {
      if (n % a) continue;
      const uint32_t b = n / a, g = std::gcd(a, b);
      const TileGrid ratio{a / g, b / g};
      auto group = std::find_if(groups.begin(), groups.end(), [&](const auto& e) { return e.first == ratio; });
      if (group == groups.end()) group = groups.insert(groups.end(), {ratio, {}});
      group->second.push_back({a, b});
    }
  std::vector<TileGrid> grids;
  for (const auto& [ratio, members] : groups) grids.insert(grids.end(), members.begin(), members.end());
  return grids;
}

TileGrid choose_llama4_grid(uint32_t height, uint32_t width, const Llama4ImageConfig& config) {
  if (height == 0 || width == 0) fail("Llama-4 image: empty image {} x {}", height, width);
  const std::vector<TileGrid> grids = llama4_canvas_grids(config.max_patches);
  // float32 as torch divides integer tensors: float(target) / float(original).
  std::vector<float> scales;
  for (const TileGrid& g : grids) {
    const float scale_h = float(uint64_t(g.rows) * config.tile) / float(height);
    const float scale_w = float(uint64_t(g.cols) * config.tile) / float(width);
    scales.push_back(scale_h > scale_w ? scale_w : scale_h);
  }
  bool any_up = false;
  float up = 0, down = 0;  // the chosen upscale (>= 1) and the largest downscale (< 1)
  for (float s : scales) {
    if (s >= 1) {
      up = !any_up ? s : config.resize_to_max_canvas ? std::max(up, s) : std::min(up, s);
      any_up = true;
    } else {
      down = std::max(down, s);
    }
  }
  const float selected = any_up ? up : down;
  size_t best = grids.size();
  for (size_t i = 0; i < grids.size(); ++i) {
    if (scales[i] != selected) continue;
    // The smallest area; the first in list order on a tie (torch.argmin).
    if (best == grids.size() || uint64_t(grids[i].rows) * grids[i].cols < uint64_t(grids[best].rows) * grids[best].cols)
      best = i;
  }
  return grids[best];
}

ImageSize llama4_resized_size(ImageSize image, ImageSize canvas, uint32_t tile, bool resize_to_max_canvas) {
  // Limit the target so that the image is not enlarged beyond its own size unless a side is
  // below one tile. HF's code (version read) leaves the limited target unset when
  // resize_to_max_canvas is true and would fail there; the canvas itself is the evident intent.
  ImageSize target = canvas;
  if (!resize_to_max_canvas) {
    target.height = std::min(std::max(image.height, tile), canvas.height);
    target.width = std::min(std::max(image.width, tile), canvas.width);
  }
  // Python floats (double) in HF's get_max_res_without_distortion.
  const double scale_w = double(target.width) / image.width, scale_h = double(target.height) / image.height;
  ImageSize out;
  if (scale_w < scale_h) {
    out.width = target.width;
    out.height = static_cast<uint32_t>(std::min(std::floor(image.height * scale_w), double(target.height)));
  } else {
    out.height = target.height;
    out.width = static_cast<uint32_t>(std::min(std::floor(image.width * scale_h), double(target.width)));
  }
  out.height = std::max(out.height, 1u);
  out.width = std::max(out.width, 1u);
  return out;
}

Llama4ImagePlan plan_llama4_image(uint32_t height, uint32_t width, const Llama4ImageConfig& config) {
  check_llama4_image_config(config);
  const TileGrid grid = choose_llama4_grid(height, width, config);
  Llama4ImagePlan plan;
  plan.rows = grid.rows;
  plan.cols = grid.cols;
  plan.canvas_h = grid.rows * config.tile;  // <= 64 * 1024: no overflow
  plan.canvas_w = grid.cols * config.tile;
  const ImageSize resized = llama4_resized_size({height, width}, {plan.canvas_h, plan.canvas_w}, config.tile,
                                                config.resize_to_max_canvas);
  plan.resized_h = resized.height;
  plan.resized_w = resized.width;
  plan.tiles = grid.rows * grid.cols + (grid.rows * grid.cols > 1 ? 1 : 0);
  return plan;
}

RgbImage llama4_canvas_u8(const RgbImage& image, const Llama4ImagePlan& plan) {
  if (plan.resized_h > plan.canvas_h || plan.resized_w > plan.canvas_w)
    fail("Llama-4 image: resized {} x {} does not fit the canvas {} x {}", plan.resized_h, plan.resized_w,
         plan.canvas_h, plan.canvas_w);
  const RgbImage resized = resize_bilinear_antialias(image, plan.resized_h, plan.resized_w);
  RgbImage canvas;
  canvas.width = plan.canvas_w;
  canvas.height = plan.canvas_h;
  canvas.rgb.assign(uint64_t(plan.canvas_w) * plan.canvas_h * 3, 0);  // padding is black
  for (size_t y = 0; y < resized.height; ++y)
    std::copy_n(resized.rgb.data() + y * resized.width * 3, size_t(resized.width) * 3,
                canvas.rgb.data() + y * canvas.width * 3);
  return canvas;
}

RgbImage llama4_global_tile_u8(const RgbImage& image, uint32_t tile) {
  return resize_bilinear_antialias(image, tile, tile);
}

PreprocessedImage preprocess_llama4_image(const RgbImage& image, const Llama4ImageConfig& config) {
  if (image.width == 0 || image.height == 0 || uint64_t(image.width) * image.height * 3 != image.rgb.size())
    fail("Llama-4 image: {} x {} with {} bytes of RGB", image.width, image.height, image.rgb.size());
  const Llama4ImagePlan plan = plan_llama4_image(image.height, image.width, config);
  const uint32_t t = config.tile;

  // v = (float(u) * rescale - mean) / std, all in float32, for each of the 256 byte values.
  float lut[3][256];
  for (int c = 0; c < 3; ++c)
    for (int u = 0; u < 256; ++u) lut[c][u] = (float(u) * config.rescale - config.mean[c]) / config.std[c];

  PreprocessedImage out;
  out.canvas_h = plan.canvas_h;
  out.canvas_w = plan.canvas_w;
  out.resized_h = plan.resized_h;
  out.resized_w = plan.resized_w;
  out.rows = plan.rows;
  out.cols = plan.cols;
  out.tiles = plan.tiles;
  const size_t tile_values = size_t(3) * t * t;
  out.pixels.resize(uint64_t(plan.tiles) * tile_values);  // <= 65 tiles of 3 x 1024 x 1024

  const RgbImage canvas = llama4_canvas_u8(image, plan);
  for (uint32_t r = 0; r < plan.rows; ++r)
    for (uint32_t c = 0; c < plan.cols; ++c)
      write_tile(canvas, r * t, c * t, t, lut, out.pixels.data() + (size_t(r) * plan.cols + c) * tile_values);
  if (plan.rows * plan.cols > 1) {
    const RgbImage global = llama4_global_tile_u8(image, t);
    write_tile(global, 0, 0, t, lut, out.pixels.data() + size_t(plan.rows) * plan.cols * tile_values);
  }
  return out;
}

}  // namespace eaglevk::loader
