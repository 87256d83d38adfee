// Format sniffing, the size cap on files, and the dispatch to png_decode.cpp / jpeg_decode.cpp.
//
// Why libpng and libjpeg-turbo rather than a single-header decoder such as stb_image: both are
// maintained, fuzzed continuously upstream (OSS-Fuzz), and built to survive hostile files. PIL
// (which transformers uses to open images) decodes JPEG with libjpeg(-turbo) as well, with the
// same default settings (islow DCT, fancy upsampling), so JPEG pixels agree with the reference
// pipeline; PNG is lossless, so any correct decoder gives the same pixels.
//
// Conversion to RGB. The brief for this code said transformers' convert_to_rgb composites alpha
// over white. Read in huggingface/transformers src/transformers/image_transforms.py (two
// versions of the file, 2025): convert_to_rgb returns a PIL image unchanged when it is "RGB" and
// otherwise returns image.convert("RGB"), and PIL's RGBA -> RGB conversion simply drops the
// alpha channel (the colour stored under a transparent pixel is kept). Only a few model-specific
// processors (Idefics) composite over white. So, to feed the model what HF feeds it, alpha is
// dropped here, and a palette's transparency (tRNS) is ignored in the same way.
#include "loader/image_decode.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <string>

#include <fmt/format.h>

#include <eaglevk/error.h>

#include "loader/input_path.h"

namespace eaglevk::loader {
namespace {

bool starts_with(std::span<const uint8_t> bytes, std::string_view magic, size_t at = 0) {
  return bytes.size() >= at + magic.size() && std::memcmp(bytes.data() + at, magic.data(), magic.size()) == 0;
}

// The name of a known image format that is not supported, or "" when the bytes match none.
std::string_view other_format_name(std::span<const uint8_t> bytes) {
  if (starts_with(bytes, "GIF87a") || starts_with(bytes, "GIF89a")) return "GIF";
  if (starts_with(bytes, "BM")) return "BMP";
  if (starts_with(bytes, "RIFF") && starts_with(bytes, "WEBP", 8)) return "WebP";
  if (starts_with(bytes, std::string_view("II*\0", 4)) || starts_with(bytes, std::string_view("MM\0*", 4)))
    return "TIFF";
  if (starts_with(bytes, "ftyp", 4)) return "HEIF/AVIF";
  if (starts_with(bytes, "qoif")) return "QOI";
  return "";
}

}  // namespace

ImageFormat sniff_image_format(std::span<const uint8_t> bytes) {
  static constexpr uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  if (bytes.size() >= 8 && std::memcmp(bytes.data(), kPng, 8) == 0) return ImageFormat::Png;
  if (bytes.size() >= 3 && bytes[0] == 0xFF && bytes[1] == 0xD8 && bytes[2] == 0xFF) return ImageFormat::Jpeg;
  if (bytes.empty()) fail("empty file: not a PNG or JPEG image");
  if (std::string_view name = other_format_name(bytes); !name.empty())
    fail("{} images are not supported (only PNG and JPEG)", name);
  // Described, never quoted: the file may be anything the user can read (a key, a password file).
  const size_t head = std::min<size_t>(bytes.size(), 64);
  bool text = true;
  for (size_t i = 0; i < head; ++i) text = text && (bytes[i] >= 0x20 || bytes[i] == '\n' || bytes[i] == '\r' || bytes[i] == '\t');
  fail("not a PNG or JPEG image ({} bytes that {})", bytes.size(),
       text ? "start with text" : "start with no known image signature");
}

RgbImage decode_image(std::span<const uint8_t> bytes, const ImageLimits& limits, std::string_view source) {
  if (bytes.size() > limits.max_file_bytes)
    fail("{}: {} bytes is over the image file size limit of {} bytes", source, bytes.size(), limits.max_file_bytes);
  ImageFormat format;
  try {
    format = sniff_image_format(bytes);
  } catch (const Error& e) {
    fail("{}: {}", source, e.what());
  }
  return format == ImageFormat::Png ? decode_png(bytes, limits, source) : decode_jpeg(bytes, limits, source);
}

RgbImage load_image(const std::filesystem::path& path, const ImageLimits& limits) {
  // A FIFO or a device is refused by its type: reading it would block or never end.
  if (const PathKind kind = path_kind(path); kind != PathKind::File && kind != PathKind::Missing)
    fail("{}", file_problem(path, "image"));
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) fail("cannot read image {}: {}", path.string(), ec.message());
  if (size > limits.max_file_bytes)
    fail("{}: {} bytes is over the image file size limit of {} bytes", path.string(), size, limits.max_file_bytes);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open image {}", path.string());
  // One byte more than the size seen, so that a file that grew since is noticed and refused.
  std::vector<uint8_t> bytes(static_cast<size_t>(size) + 1);
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  bytes.resize(static_cast<size_t>(in.gcount()));
  if (in.bad()) fail("error reading image {}", path.string());
  if (bytes.size() > size) fail("{}: the file changed size while being read", path.string());
  return decode_image(bytes, limits, path.string());
}

}  // namespace eaglevk::loader
