#pragma once
// PNG and JPEG files to 8-bit RGB pixels, for image prompts. The format is recognised from the
// file's first bytes, never from its name; anything else (GIF, BMP, WebP, TIFF, garbage) is
// refused with an eaglevk::Error naming what it looks like.
//
// Every colour type becomes RGB the way PIL's Image.convert("RGB") does it, since that is what
// transformers' convert_to_rgb calls: grey is copied to R, G and B; a palette is looked up
// (its transparency ignored); 16-bit samples keep their high byte (as PIL's 16-bit RGB(A)
// readers; how PIL converts 16-bit grey, its mode "I;16", was not checked); an alpha channel is
// DROPPED, not composited (see image_decode.cpp for what was checked). EXIF orientation is not
// applied: pixels are taken as stored.
//
// Input is untrusted: sizes are checked against ImageLimits from the declared header before any
// pixel memory is allocated, and a truncated or corrupt file is an error rather than an image
// with grey or black holes.
#include <cstdint>
#include <filesystem>
#include <span>
#include <string_view>
#include <vector>

namespace eaglevk::loader {

struct RgbImage {
  uint32_t width = 0, height = 0;
  std::vector<uint8_t> rgb;  // [height][width][3], row-major
};

struct ImageLimits {
  uint64_t max_file_bytes = uint64_t(64) << 20;  // 64 MiB
  // 64 Mi pixels (8192 x 8192) takes a 48-megapixel phone photo (8000 x 6000) and bounds the
  // decoded RGB buffer to 192 MiB. Llama-4 shrinks anything bigger than 16 tiles anyway
  // (1344 x 1344 for Scout), so larger inputs would only cost memory.
  uint64_t max_pixels = uint64_t(64) << 20;
  // Every scan of a progressive JPEG is a pass over the whole coefficient buffer, and a file can
  // hold thousands of tiny scans (a known CPU exhaustion). Encoders write about 10 (libjpeg's
  // progressive script) to 20; 100 leaves room without letting a file cost minutes.
  uint32_t max_jpeg_scans = 100;
};

enum class ImageFormat { Png, Jpeg };

// Png or Jpeg from the magic bytes; throws for anything else, naming the format when it is a
// known one ("GIF images are not supported ...") and otherwise "not a PNG or JPEG".
ImageFormat sniff_image_format(std::span<const uint8_t> bytes);

// `source` names the input in error messages (a file name, "image 2").
RgbImage decode_image(std::span<const uint8_t> bytes, const ImageLimits& limits = {},
                      std::string_view source = "image");
RgbImage decode_png(std::span<const uint8_t> bytes, const ImageLimits& limits = {}, std::string_view source = "image");
RgbImage decode_jpeg(std::span<const uint8_t> bytes, const ImageLimits& limits = {}, std::string_view source = "image");

// Reads the file (refusing it before reading when it is larger than limits.max_file_bytes) and
// decodes it.
RgbImage load_image(const std::filesystem::path& path, const ImageLimits& limits = {});

}  // namespace eaglevk::loader
