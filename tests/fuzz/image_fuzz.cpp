// libFuzzer entry for image prompts (`run_fuzz.sh image` builds and runs it): the PNG
// and JPEG decoders and the Llama-4 preprocessing of whatever they accept. Every input must
// either decode or give an eaglevk::Error; a decoded image must have consistent sizes, and its
// preprocessed pixels must have the planned shape and lie in [-1, 1].
//
// A mutated PNG chunk almost always fails its CRC, which stops libpng at the first check. So a
// PNG input is decoded twice: as it is, and with every chunk's CRC recomputed, which lets the
// mutations reach the image data, the colour conversions and the preprocessing.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include <zlib.h>

#include <eaglevk/error.h>

#include "loader/image_decode.h"
#include "loader/llama4_image.h"

using namespace eaglevk::loader;

namespace {

// A copy of `data` with the CRC of every complete chunk after the PNG signature recomputed.
std::vector<uint8_t> with_fixed_png_crcs(const uint8_t* data, size_t size) {
  std::vector<uint8_t> out(data, data + size);
  size_t at = 8;
  while (at + 12 <= size) {
    const uint64_t length =
        uint64_t(out[at]) << 24 | uint64_t(out[at + 1]) << 16 | uint64_t(out[at + 2]) << 8 | out[at + 3];
    if (length > size - at - 12) break;
    const uint32_t crc = static_cast<uint32_t>(crc32(0, out.data() + at + 4, static_cast<uInt>(length + 4)));
    for (int i = 0; i < 4; ++i) out[at + 8 + length + i] = static_cast<uint8_t>(crc >> (24 - 8 * i));
    at += 12 + length;
  }
  return out;
}

void decode_and_preprocess(const uint8_t* data, size_t size) {
  // Small limits keep each run fast; the checks are the same at any size.
  const ImageLimits limits{.max_file_bytes = 1 << 20, .max_pixels = 1 << 20, .max_jpeg_scans = 100};
  RgbImage image;
  try {
    image = decode_image({data, size}, limits, "fuzz");
  } catch (const eaglevk::Error&) {
    return;
  }
  if (image.width == 0 || image.height == 0 || uint64_t(image.width) * image.height > limits.max_pixels ||
      image.rgb.size() != uint64_t(image.width) * image.height * 3)
    __builtin_trap();
  // Tile sizes and tile counts vary with the input so that odd grids are planned too.
  const Llama4ImageConfig config{.tile = uint32_t(14 * (1 + size % 4)), .max_patches = uint32_t(1 + size % 16)};
  const PreprocessedImage p = preprocess_llama4_image(image, config);
  const uint64_t t = config.tile;
  if (p.rows * p.cols > config.max_patches || p.tiles != p.rows * p.cols + (p.rows * p.cols > 1) ||
      p.canvas_h != p.rows * t || p.canvas_w != p.cols * t || p.resized_h > p.canvas_h || p.resized_w > p.canvas_w ||
      p.resized_h == 0 || p.resized_w == 0 || p.pixels.size() != p.tiles * 3 * t * t)
    __builtin_trap();
  for (float v : p.pixels)
    if (!(v >= -1.0f && v <= 1.0f)) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  decode_and_preprocess(data, size);
  static constexpr uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  if (size > 8 && std::memcmp(data, kPng, 8) == 0) {
    const std::vector<uint8_t> fixed = with_fixed_png_crcs(data, size);
    if (std::memcmp(fixed.data(), data, size) != 0) decode_and_preprocess(fixed.data(), fixed.size());
  }
  return 0;
}
