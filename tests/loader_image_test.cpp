// Image input: PNG/JPEG decoding (valid files of every colour type, and broken, hostile or
// unsupported ones), the antialiased resize against an independent float64 formulation, the
// canvas choice on vision-spec.md's examples, and the whole Llama-4 preprocessing against
// golden_vision.json for the 6 test images.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include <eaglevk/error.h>

#include <zlib.h>

#include "loader/image_decode.h"
#include "loader/image_resize.h"
#include "loader/llama4_image.h"
#include "loader/sha256.h"
#include "support/image_writers.h"
#include "support/loader_test_util.h"

namespace fs = std::filesystem;
using namespace eaglevk::loader;
using eaglevk::testing::expect_error;
using eaglevk::testing::JpegSpec;
using eaglevk::testing::PngSpec;
using eaglevk::testing::write_jpeg;
using eaglevk::testing::write_png;
using nlohmann::json;

// The loader's SHA-256 (checked against FIPS 180-2's vectors and sha256sum in
// loader_fingerprint_test) over raw bytes; text goes to loader::sha256_hex itself.
std::string sha256_hex(const void* data, size_t size) {
  return eaglevk::loader::sha256_hex(std::string_view(static_cast<const char*>(data), size));
}

namespace {

const fs::path kModelDir = fs::path(EAGLEVK_ASSETS) / "tiny-llama4-vision";

std::vector<uint8_t> read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

const json& golden() {
  static const json g = json::parse(read_bytes(kModelDir / "golden_vision.json"));
  return g;
}

// A smooth RGB test picture (gradients), so that JPEG keeps it close.
std::vector<uint8_t> gradient_rgb(uint32_t width, uint32_t height) {
  std::vector<uint8_t> rgb(size_t(width) * height * 3);
  for (uint32_t y = 0; y < height; ++y)
    for (uint32_t x = 0; x < width; ++x) {
      uint8_t* p = rgb.data() + (size_t(y) * width + x) * 3;
      p[0] = static_cast<uint8_t>(40 + 160 * x / width);
      p[1] = static_cast<uint8_t>(30 + 180 * y / height);
      p[2] = static_cast<uint8_t>(200 - 100 * (x + y) / (width + height));
    }
  return rgb;
}

uint32_t crc_of(const uint8_t* data, size_t size) {
  return static_cast<uint32_t>(crc32(0, data, static_cast<uInt>(size)));  // zlib comes with libpng
}

void put_be32(std::vector<uint8_t>& bytes, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) bytes[at + i] = static_cast<uint8_t>(v >> (24 - 8 * i));
}

// A PNG whose IHDR declares width x height, with a correct CRC, so that only the size is wrong.
std::vector<uint8_t> png_with_declared_size(std::vector<uint8_t> png, uint32_t width, uint32_t height) {
  // 8-byte signature, then IHDR: length (4), "IHDR" (4), width (4), height (4), 5 more, CRC (4).
  put_be32(png, 16, width);
  put_be32(png, 20, height);
  put_be32(png, 29, crc_of(png.data() + 12, 17));
  return png;
}

RgbImage decode(const std::vector<uint8_t>& bytes, const ImageLimits& limits = {}) {
  return decode_image(bytes, limits, "test");
}

}  // namespace

// ---- Decoding valid files ---------------------------------------------------------------------

TEST(ImageDecode, GoldenPngsDecodeToTheirDeclaredSize) {
  for (const auto& [name, image] : golden()["images"].items()) {
    const std::vector<uint8_t> bytes = read_bytes(kModelDir / image["file"].get<std::string>());
    EXPECT_EQ(sha256_hex(bytes.data(), bytes.size()), image["png_sha256"]) << name;  // the vendored file
    const RgbImage rgb = load_image(kModelDir / image["file"].get<std::string>());
    EXPECT_EQ(rgb.height, image["original_hw"][0]) << name;
    EXPECT_EQ(rgb.width, image["original_hw"][1]) << name;
    EXPECT_EQ(rgb.rgb.size(), size_t(rgb.width) * rgb.height * 3) << name;
    EXPECT_EQ(decode(bytes).rgb, rgb.rgb) << name;
  }
}

TEST(ImageDecode, Sha256OfKnownVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(ImageDecode, GreyPngBecomesRgb) {
  PngSpec spec{.width = 5, .height = 3, .color_type = PNG_COLOR_TYPE_GRAY};
  std::vector<uint8_t> grey(15);
  for (size_t i = 0; i < grey.size(); ++i) grey[i] = static_cast<uint8_t>(i * 17);
  const RgbImage rgb = decode(write_png(spec, grey));
  ASSERT_EQ(rgb.width, 5u);
  ASSERT_EQ(rgb.height, 3u);
  for (size_t i = 0; i < grey.size(); ++i)
    for (int c = 0; c < 3; ++c) EXPECT_EQ(rgb.rgb[i * 3 + c], grey[i]) << i;
}

TEST(ImageDecode, SixteenBitPngsKeepTheHighByte) {
  // Grey, 16-bit big-endian samples.
  PngSpec grey_spec{.width = 4, .height = 1, .color_type = PNG_COLOR_TYPE_GRAY, .bit_depth = 16};
  const std::vector<uint8_t> grey = {0x12, 0x34, 0xFF, 0xFF, 0x00, 0x80, 0x7F, 0x01};
  RgbImage rgb = decode(write_png(grey_spec, grey));
  const uint8_t high[4] = {0x12, 0xFF, 0x00, 0x7F};
  for (int i = 0; i < 4; ++i)
    for (int c = 0; c < 3; ++c) EXPECT_EQ(rgb.rgb[i * 3 + c], high[i]);
  // RGB, 16-bit.
  PngSpec rgb_spec{.width = 1, .height = 1, .color_type = PNG_COLOR_TYPE_RGB, .bit_depth = 16};
  rgb = decode(write_png(rgb_spec, {0xAB, 0xCD, 0x01, 0x02, 0xFE, 0xFF}));
  EXPECT_EQ(rgb.rgb, (std::vector<uint8_t>{0xAB, 0x01, 0xFE}));
}

TEST(ImageDecode, AlphaIsDroppedNotComposited) {
  // RGBA: a fully transparent pixel keeps its stored colour, as PIL's convert("RGB") does.
  PngSpec rgba_spec{.width = 2, .height = 1, .color_type = PNG_COLOR_TYPE_RGBA};
  RgbImage rgb = decode(write_png(rgba_spec, {10, 20, 30, 0, 200, 100, 50, 128}));
  EXPECT_EQ(rgb.rgb, (std::vector<uint8_t>{10, 20, 30, 200, 100, 50}));
  // Grey + alpha.
  PngSpec ga_spec{.width = 2, .height = 1, .color_type = PNG_COLOR_TYPE_GRAY_ALPHA};
  rgb = decode(write_png(ga_spec, {77, 0, 250, 255}));
  EXPECT_EQ(rgb.rgb, (std::vector<uint8_t>{77, 77, 77, 250, 250, 250}));
}

TEST(ImageDecode, PalettePngsAreLookedUpWithTransparencyIgnored) {
  PngSpec spec{.width = 4, .height = 2, .color_type = PNG_COLOR_TYPE_PALETTE, .bit_depth = 2};
  spec.palette = {{255, 0, 0}, {0, 255, 0}, {0, 0, 255}, {9, 8, 7}};
  spec.palette_alpha = {0, 128};  // entries 0 and 1 (partly) transparent
  // 2 bits per pixel, high bits first: row 0 = 0 1 2 3, row 1 = 3 2 1 0.
  const RgbImage rgb = decode(write_png(spec, {0b00011011, 0b11100100}));
  const int index[8] = {0, 1, 2, 3, 3, 2, 1, 0};
  ASSERT_EQ(rgb.rgb.size(), 24u);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(rgb.rgb[i * 3 + 0], spec.palette[index[i]].red) << i;
    EXPECT_EQ(rgb.rgb[i * 3 + 1], spec.palette[index[i]].green) << i;
    EXPECT_EQ(rgb.rgb[i * 3 + 2], spec.palette[index[i]].blue) << i;
  }
}

TEST(ImageDecode, OneBitGreyAndInterlacedPngs) {
  PngSpec one_bit{.width = 8, .height = 1, .color_type = PNG_COLOR_TYPE_GRAY, .bit_depth = 1};
  RgbImage rgb = decode(write_png(one_bit, {0b10110000}));
  const uint8_t expected[8] = {255, 0, 255, 255, 0, 0, 0, 0};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(rgb.rgb[i * 3], expected[i]) << i;

  // Adam7 interlacing must give the same pixels as the plain file.
  const std::vector<uint8_t> pixels = gradient_rgb(13, 11);
  PngSpec plain{.width = 13, .height = 11};
  PngSpec interlaced = plain;
  interlaced.interlaced = true;
  EXPECT_EQ(decode(write_png(interlaced, pixels)).rgb, pixels);
  EXPECT_EQ(decode(write_png(plain, pixels)).rgb, pixels);
}

TEST(ImageDecode, JpegRoundTripIsClose) {
  for (bool progressive : {false, true}) {
    const std::vector<uint8_t> pixels = gradient_rgb(40, 30);
    const RgbImage rgb =
        decode(write_jpeg({.width = 40, .height = 30, .quality = 95, .progressive = progressive}, pixels));
    ASSERT_EQ(rgb.width, 40u);
    ASSERT_EQ(rgb.height, 30u);
    double total = 0;
    int worst = 0;
    for (size_t i = 0; i < pixels.size(); ++i) {
      const int d = std::abs(int(rgb.rgb[i]) - int(pixels[i]));
      total += d;
      worst = std::max(worst, d);
    }
    EXPECT_LT(total / pixels.size(), 2.0) << "progressive " << progressive;
    EXPECT_LE(worst, 16) << "progressive " << progressive;
  }
  // Greyscale JPEG: R = G = B.
  std::vector<uint8_t> grey(16 * 8);
  for (size_t i = 0; i < grey.size(); ++i) grey[i] = static_cast<uint8_t>(i * 2);
  const RgbImage rgb = decode(write_jpeg({.width = 16, .height = 8, .grey = true, .quality = 100}, grey));
  for (size_t i = 0; i < grey.size(); ++i) {
    EXPECT_EQ(rgb.rgb[i * 3], rgb.rgb[i * 3 + 1]);
    EXPECT_EQ(rgb.rgb[i * 3], rgb.rgb[i * 3 + 2]);
    EXPECT_NEAR(rgb.rgb[i * 3], grey[i], 3);
  }
}

// ---- Broken, hostile and unsupported input ----------------------------------------------------

TEST(ImageDecode, TruncatedPngsAreRefused) {
  const std::vector<uint8_t> png = read_bytes(kModelDir / "images/grad_h56_w56.png");
  ASSERT_GT(png.size(), 100u);
  for (size_t length : {size_t(8), size_t(16), size_t(33), size_t(40), png.size() / 2, png.size() - 13,
                        png.size() - 5, png.size() - 1}) {
    SCOPED_TRACE(length);
    expect_error([&] { decode(std::vector<uint8_t>(png.begin(), png.begin() + length)); }, "truncated");
  }
  expect_error([&] { decode(std::vector<uint8_t>(png.begin(), png.begin() + 5)); }, "not a PNG or JPEG");
  expect_error([&] { decode({}); }, "empty file");
}

TEST(ImageDecode, CorruptPngsAreRefused) {
  const std::vector<uint8_t> png = read_bytes(kModelDir / "images/noise_h112_w112.png");
  std::vector<uint8_t> bad_ihdr = png;
  bad_ihdr[19] ^= 0x01;  // a width byte, CRC left as it was
  expect_error([&] { decode(bad_ihdr); }, "CRC error");
  std::vector<uint8_t> bad_crc = png;
  bad_crc[30] ^= 0xFF;  // IHDR's CRC itself
  expect_error([&] { decode(bad_crc); }, "CRC error");
  // Inside the compressed data of the first IDAT (its CRC fixed, so zlib has to notice).
  std::vector<uint8_t> bad_data = png;
  const size_t idat = std::search(png.begin(), png.end(), std::begin("IDAT"), std::end("IDAT") - 1) - png.begin();
  ASSERT_LT(idat, png.size());
  const uint32_t idat_length = uint32_t(png[idat - 4]) << 24 | uint32_t(png[idat - 3]) << 16 |
                               uint32_t(png[idat - 2]) << 8 | png[idat - 1];
  for (size_t i = idat + 6; i < idat + 4 + idat_length; i += 7) bad_data[i] ^= 0x5A;
  put_be32(bad_data, idat + 4 + idat_length, crc_of(bad_data.data() + idat, 4 + idat_length));
  expect_error([&] { decode(bad_data); }, "invalid PNG");
}

// Regression (found by image_fuzz): libpng allocates a text chunk's declared length before
// reading it; a 165-byte file declaring a 1.7 GB zTXt chunk cost 1.7 GB. Chunk lengths are now
// checked against the file first.
TEST(ImageDecode, ChunkLengthsPastTheEndAreRefusedBeforeLibpngReadsThem) {
  const std::vector<uint8_t> png = read_bytes(kModelDir / "images/small_h30_w40.png");
  std::vector<uint8_t> bomb(png.begin(), png.begin() + 33);  // signature and IHDR
  const uint8_t ztxt_header[8] = {0x6D, 0x00, 0x00, 0x00, 'z', 'T', 'X', 't'};
  bomb.insert(bomb.end(), ztxt_header, ztxt_header + 8);
  bomb.resize(bomb.size() + 100, 0x41);
  expect_error([&] { decode(bomb); }, "chunk zTXt at byte 33 declares 1828716544 bytes");
}

TEST(ImageDecode, TextChunksAreSkippedUnread) {
  // A zTXt chunk whose payload is not zlib data, and a broken IEND CRC so that decoding ends in
  // an error whose message would name the last warning: libpng must not have looked inside.
  const std::vector<uint8_t> png = read_bytes(kModelDir / "images/small_h30_w40.png");
  const std::string payload = std::string("key\0\0", 5) + "not zlib data";
  std::vector<uint8_t> chunk = {0, 0, 0, static_cast<uint8_t>(payload.size()), 'z', 'T', 'X', 't'};
  chunk.insert(chunk.end(), payload.begin(), payload.end());
  chunk.resize(chunk.size() + 4);
  put_be32(chunk, chunk.size() - 4, crc_of(chunk.data() + 4, 4 + payload.size()));
  std::vector<uint8_t> file(png.begin(), png.begin() + 33);
  file.insert(file.end(), chunk.begin(), chunk.end());
  file.insert(file.end(), png.begin() + 33, png.end());
  file.back() ^= 1;
  try {
    decode(file);
    ADD_FAILURE() << "no error";
  } catch (const eaglevk::Error& e) {
    EXPECT_NE(std::string(e.what()).find("IEND: CRC error"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find("zTXt"), std::string::npos) << e.what();
  }
}

TEST(ImageDecode, DeclaredSizesAreCheckedBeforeDecoding) {
  const std::vector<uint8_t> png = read_bytes(kModelDir / "images/small_h30_w40.png");
  expect_error([&] { decode(png_with_declared_size(png, 0, 0)); }, "zero");
  expect_error([&] { decode(png_with_declared_size(png, 40, 0)); }, "zero");
  expect_error([&] { decode(png_with_declared_size(png, 100000, 100000)); }, "over the limit");
  // Within the limit but not what the data holds: libpng runs out of image data.
  expect_error([&] { decode(png_with_declared_size(png, 41, 30)); }, "invalid PNG");
  // The pixel limit applies to PNG and JPEG alike.
  expect_error([&] { decode(png, {.max_pixels = 30 * 40 - 1}); }, "over the limit");
  EXPECT_EQ(decode(png, {.max_pixels = 30 * 40}).width, 40u);
  const std::vector<uint8_t> jpeg = write_jpeg({.width = 40, .height = 30}, gradient_rgb(40, 30));
  expect_error([&] { decode(jpeg, {.max_pixels = 1000}); }, "over the limit");
}

TEST(ImageDecode, BrokenJpegsAreRefused) {
  const std::vector<uint8_t> jpeg = write_jpeg({.width = 40, .height = 30}, gradient_rgb(40, 30));
  // Cut inside the headers, and inside the entropy-coded data.
  expect_error([&] { decode(std::vector<uint8_t>(jpeg.begin(), jpeg.begin() + 20)); }, "invalid JPEG");
  expect_error([&] { decode(std::vector<uint8_t>(jpeg.begin(), jpeg.end() - 40)); }, "Premature end");
  // SOF0's length field set to 2: a marker too short to hold the frame header.
  std::vector<uint8_t> bad_sof = jpeg;
  const uint8_t sof0[2] = {0xFF, 0xC0};
  const size_t sof = std::search(jpeg.begin(), jpeg.end(), sof0, sof0 + 2) - jpeg.begin();
  ASSERT_LT(sof + 4, jpeg.size());
  bad_sof[sof + 2] = 0;
  bad_sof[sof + 3] = 2;
  expect_error([&] { decode(bad_sof); }, "invalid JPEG");
  // Declared height 0 in SOF0.
  std::vector<uint8_t> empty = jpeg;
  empty[sof + 5] = 0;
  empty[sof + 6] = 0;
  expect_error([&] { decode(empty); }, "invalid JPEG");
}

TEST(ImageDecode, ProgressiveScanLimit) {
  const std::vector<uint8_t> jpeg =
      write_jpeg({.width = 40, .height = 30, .progressive = true}, gradient_rgb(40, 30));  // 10 scans
  expect_error([&] { decode(jpeg, {.max_jpeg_scans = 5}); }, "progressive scans");
  EXPECT_EQ(decode(jpeg, {.max_jpeg_scans = 10}).width, 40u);
}

TEST(ImageDecode, UnsupportedFormatsAreNamed) {
  using namespace std::string_view_literals;  // the magic bytes hold NULs
  auto bytes = [](std::string_view s) { return std::vector<uint8_t>(s.begin(), s.end()); };
  expect_error([&] { decode(bytes("GIF89a\x01\x00\x01\x00"sv)); }, "GIF images are not supported");
  expect_error([&] { decode(bytes("BM\x36\x00\x00\x00"sv)); }, "BMP images are not supported");
  expect_error([&] { decode(bytes("RIFF\x10\x00\x00\x00WEBPVP8 "sv)); }, "WebP images are not supported");
  expect_error([&] { decode(bytes("II*\x00\x08\x00\x00\x00"sv)); }, "TIFF images are not supported");
  std::mt19937 rng(7);
  std::vector<uint8_t> noise(300);
  for (auto& b : noise) b = static_cast<uint8_t>(rng() | 0x01);  // never starts with 0x89 0x50 or 0xFF 0xD8
  noise[0] = 0x42;
  noise[1] = 0x17;
  expect_error([&] { decode(noise); }, "not a PNG or JPEG");
}

TEST(ImageDecode, FileSizeCap) {
  const fs::path file = kModelDir / "images/grad_h56_w56.png";
  expect_error([&] { load_image(file, {.max_file_bytes = 1000}); }, "over the image file size limit");
  expect_error([&] { decode(read_bytes(file), {.max_file_bytes = 1000}); }, "over the image file size limit");
  EXPECT_EQ(load_image(file, {.max_file_bytes = fs::file_size(file)}).width, 56u);
  expect_error([&] { load_image(kModelDir / "images/no_such.png"); }, "cannot read image");
}

// ---- Resize -----------------------------------------------------------------------------------

namespace {

// The §1.4 formula written directly, in float64: every input sample is visited and weighted by
// the triangle max(0, 1 - |(j + 0.5 - center) / support|); horizontal pass first, each pass
// rounded half up to uint8. `near_half` marks values whose unrounded value, or an intermediate
// value they read, lies within 1e-3 of a .5 boundary: there float rounding may go either way.
struct Plane {
  size_t height = 0, width = 0;
  std::vector<uint8_t> value;   // [height][width][3]
  std::vector<bool> near_half;  // same shape
};

double triangle_weight(size_t j, double center, double support) {
  return std::max(0.0, 1.0 - std::abs((double(j) + 0.5 - center) / support));
}

Plane reference_resize_width(const Plane& in, size_t out_w) {
  Plane out{in.height, out_w, std::vector<uint8_t>(in.height * out_w * 3), std::vector<bool>(in.height * out_w * 3)};
  const double scale = double(in.width) / out_w, support = std::max(scale, 1.0);
  for (size_t y = 0; y < in.height; ++y)
    for (size_t x = 0; x < out_w; ++x)
      for (size_t c = 0; c < 3; ++c) {
        double sum = 0, weights = 0;
        bool near = false;
        for (size_t j = 0; j < in.width; ++j) {
          const double w = triangle_weight(j, (x + 0.5) * scale, support);
          const size_t at = (y * in.width + j) * 3 + c;
          sum += w * in.value[at];
          weights += w;
          near = near || (w > 0 && in.near_half[at]);
        }
        const double v = sum / weights;
        out.value[(y * out_w + x) * 3 + c] = static_cast<uint8_t>(std::floor(v + 0.5));
        out.near_half[(y * out_w + x) * 3 + c] = near || std::abs(v - std::floor(v) - 0.5) < 1e-3;
      }
  return out;
}

Plane reference_resize_height(const Plane& in, size_t out_h) {
  Plane out{out_h, in.width, std::vector<uint8_t>(out_h * in.width * 3), std::vector<bool>(out_h * in.width * 3)};
  const double scale = double(in.height) / out_h, support = std::max(scale, 1.0);
  for (size_t y = 0; y < out_h; ++y)
    for (size_t x = 0; x < in.width; ++x)
      for (size_t c = 0; c < 3; ++c) {
        double sum = 0, weights = 0;
        bool near = false;
        for (size_t j = 0; j < in.height; ++j) {
          const double w = triangle_weight(j, (y + 0.5) * scale, support);
          const size_t at = (j * in.width + x) * 3 + c;
          sum += w * in.value[at];
          weights += w;
          near = near || (w > 0 && in.near_half[at]);
        }
        const double v = sum / weights;
        out.value[(y * in.width + x) * 3 + c] = static_cast<uint8_t>(std::floor(v + 0.5));
        out.near_half[(y * in.width + x) * 3 + c] = near || std::abs(v - std::floor(v) - 0.5) < 1e-3;
      }
  return out;
}

// Horizontal pass first (PIL's order) unless `vertical_first`.
Plane reference_resize(const RgbImage& image, size_t out_h, size_t out_w, bool vertical_first = false) {
  Plane plane{image.height, image.width, image.rgb, std::vector<bool>(image.rgb.size(), false)};
  if (vertical_first && out_h != plane.height) plane = reference_resize_height(plane, out_h);
  if (out_w != plane.width) plane = reference_resize_width(plane, out_w);
  if (out_h != plane.height) plane = reference_resize_height(plane, out_h);
  return plane;
}

// Compares with `want`, allowing one step where `want` is within a hair of .5; returns how
// many such steps there were.
size_t expect_resize_matches(const RgbImage& got, const Plane& want) {
  EXPECT_EQ(got.height, want.height);
  EXPECT_EQ(got.width, want.width);
  if (got.rgb.size() != want.value.size()) {
    ADD_FAILURE() << "size " << got.rgb.size() << " vs " << want.value.size();
    return 0;
  }
  size_t near_half = 0;
  int reported = 0;
  for (size_t i = 0; i < want.value.size(); ++i) {
    const int diff = std::abs(int(got.rgb[i]) - int(want.value[i]));
    if (diff == 0) continue;
    if (diff == 1 && want.near_half[i]) {
      ++near_half;
      continue;
    }
    if (reported++ < 5)
      ADD_FAILURE() << "value " << i << ": got " << int(got.rgb[i]) << ", want " << int(want.value[i]);
  }
  return near_half;
}

RgbImage random_image(std::mt19937& rng, uint32_t height, uint32_t width) {
  RgbImage image{width, height, std::vector<uint8_t>(size_t(width) * height * 3)};
  for (auto& v : image.rgb) v = static_cast<uint8_t>(rng());
  return image;
}

}  // namespace

TEST(ImageResize, MatchesAnIndependentFloat64Formulation) {
  std::mt19937 rng(1234);
  // (in_h, in_w, out_h, out_w): down, up, mixed, one axis kept, odd sizes, 1-pixel edges.
  const uint32_t cases[][4] = {{13, 17, 29, 7},  {100, 60, 37, 91}, {5, 5, 56, 56},  {64, 48, 64, 20},
                               {48, 64, 20, 64}, {1, 1, 3, 3},      {200, 3, 7, 1},  {31, 113, 56, 56},
                               {70, 112, 56, 56}, {30, 40, 42, 56}, {336, 250, 19, 23}};
  size_t near_half_differences = 0, values = 0;
  for (const auto& [in_h, in_w, out_h, out_w] : cases) {
    SCOPED_TRACE(testing::Message() << in_h << "x" << in_w << " -> " << out_h << "x" << out_w);
    const RgbImage image = random_image(rng, in_h, in_w);
    near_half_differences +=
        expect_resize_matches(resize_bilinear_antialias(image, out_h, out_w), reference_resize(image, out_h, out_w));
    values += size_t(out_h) * out_w * 3;
  }
  // Allowed, but they must stay rare: a systematic off-by-one would show up here.
  EXPECT_LT(near_half_differences, values / 1000 + 1);
}

// Regression (found by image_fuzz): horizontal-first on a tall strip resized to a square (the
// global tile) held a height x tile intermediate: 1 GB and 12 s for a 2 KB PNG of 1 x 1000000
// pixels. Past a bound on that intermediate the vertical pass goes first.
TEST(ImageResize, TallStripsShrinkVerticallyFirst) {
  std::mt19937 rng(99);
  const RgbImage strip = random_image(rng, 400, 3);
  // 400 x 50 intermediate: over a bound of 10000 pixels, the input (1200) and the output (250).
  const RgbImage got = resize_bilinear_antialias(strip, 5, 50, /*max_intermediate_pixels=*/10000);
  // The case must tell the orders apart, or it would test nothing.
  ASSERT_NE(reference_resize(strip, 5, 50, false).value, reference_resize(strip, 5, 50, true).value);
  expect_resize_matches(got, reference_resize(strip, 5, 50, /*vertical_first=*/true));
  // Within the bound PIL's order is kept.
  expect_resize_matches(resize_bilinear_antialias(strip, 5, 50, 20000), reference_resize(strip, 5, 50, false));

  // The whole preprocessing of such a strip: 1 x 1000000 pixels (a 2 KB PNG), Scout's tile.
  PngSpec spec{.width = 1, .height = 1000000, .color_type = PNG_COLOR_TYPE_GRAY, .bit_depth = 1};
  const RgbImage tall = decode(write_png(spec, std::vector<uint8_t>(spec.height, 0x80)));
  const PreprocessedImage p = preprocess_llama4_image(tall, {.tile = 336, .max_patches = 16});
  EXPECT_EQ(p.rows, 16u);
  EXPECT_EQ(p.cols, 1u);
  EXPECT_EQ(p.tiles, 17u);
  EXPECT_EQ(p.resized_w, 1u);
}

TEST(ImageResize, SameSizeIsTheIdentity) {
  std::mt19937 rng(5);
  const RgbImage image = random_image(rng, 9, 14);
  EXPECT_EQ(resize_bilinear_antialias(image, 9, 14).rgb, image.rgb);
  expect_error([&] { resize_bilinear_antialias(image, 0, 3); }, "empty output");
  expect_error([&] { resize_bilinear_antialias(RgbImage{2, 2, {1, 2, 3}}, 1, 1); }, "bytes of RGB");
}

// ---- Canvas choice (vision-spec.md §1 examples) -----------------------------------------------

TEST(Llama4Canvas, CandidateListOrderAsHfDocumentsIt) {
  // find_supported_resolutions' docstring in transformers (max_num_chunks 4): the groups 0.25,
  // 1.0, 4.0, 0.33, 3.0, 0.5, 2.0 in that order.
  const std::vector<TileGrid> want = {{1, 4}, {2, 2}, {1, 1}, {4, 1}, {1, 3}, {3, 1}, {1, 2}, {2, 1}};
  EXPECT_EQ(llama4_canvas_grids(4), want);
}

TEST(Llama4Canvas, SpecExamples) {
  const Llama4ImageConfig tiny{.tile = 56, .max_patches = 16};
  struct Case {
    uint32_t h, w, canvas_h, canvas_w, resized_h, resized_w, tiles;
  };
  // §1: "56x56 -> 1 tile; h56xw112 -> 1x2 + global; h112xw56 -> 2x1 + global; 112x112 -> 2x2 +
  // global; h70xw112 -> canvas 112x112 (no resize) 2x2 + global; h30xw40 -> resized to 42x56,
  // one tile; 60x60 -> 2x2 canvas, not resized, 4 tiles + global".
  const Case cases[] = {{56, 56, 56, 56, 56, 56, 1},       {56, 112, 56, 112, 56, 112, 3},
                        {112, 56, 112, 56, 112, 56, 3},    {112, 112, 112, 112, 112, 112, 5},
                        {70, 112, 112, 112, 70, 112, 5},   {30, 40, 56, 56, 42, 56, 1},
                        {60, 60, 112, 112, 60, 60, 5}};
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << c.h << "x" << c.w);
    const Llama4ImagePlan plan = plan_llama4_image(c.h, c.w, tiny);
    EXPECT_EQ(plan.canvas_h, c.canvas_h);
    EXPECT_EQ(plan.canvas_w, c.canvas_w);
    EXPECT_EQ(plan.resized_h, c.resized_h);
    EXPECT_EQ(plan.resized_w, c.resized_w);
    EXPECT_EQ(plan.tiles, c.tiles);
    EXPECT_EQ(plan.rows * plan.cols + (plan.tiles > 1 ? 1 : 0), plan.tiles);
  }
  // Scout (t = 336): an h500 x w300 photo gets canvas 672 x 336 (2 x 1), is not resized, and
  // gives 2 local tiles + 1 global tile.
  const Llama4ImagePlan scout = plan_llama4_image(500, 300, Llama4ImageConfig{.tile = 336, .max_patches = 16});
  EXPECT_EQ(scout.canvas_h, 672u);
  EXPECT_EQ(scout.canvas_w, 336u);
  EXPECT_EQ(scout.rows, 2u);
  EXPECT_EQ(scout.cols, 1u);
  EXPECT_EQ(scout.resized_h, 500u);
  EXPECT_EQ(scout.resized_w, 300u);
  EXPECT_EQ(scout.tiles, 3u);
}

TEST(Llama4Canvas, ResizeWithoutDistortionAsHfDocumentsIt) {
  // The examples of HF's get_max_res_without_distortion docstring, by §1.3's formula (floor):
  // [200, 300] into [450, 200]: 200/300 < 450/200, so (floor(200 * 200/300), 200) = (133, 200);
  // [800, 600] into [450, 1300]: (450, floor(600 * 450/800)) = (450, 337). The docstring says
  // 134 and 338, apparently from an older rounding; the code read (and the spec) floor. With
  // resize_to_max_canvas the target is the canvas itself, as in those examples.
  EXPECT_EQ(llama4_resized_size({200, 300}, {450, 200}, 56, true), (ImageSize{133, 200}));
  EXPECT_EQ(llama4_resized_size({800, 600}, {450, 1300}, 56, true), (ImageSize{450, 337}));
  // Without it the target is limited to the image's own size (a side below one tile excepted).
  EXPECT_EQ(llama4_resized_size({200, 300}, {450, 200}, 56, false), (ImageSize{133, 200}));
  EXPECT_EQ(llama4_resized_size({800, 600}, {450, 1300}, 56, false), (ImageSize{450, 337}));
  EXPECT_EQ(llama4_resized_size({100, 100}, {450, 1300}, 56, false), (ImageSize{100, 100}));
  // Extreme aspect ratios keep at least one pixel.
  const Llama4ImagePlan thin = plan_llama4_image(1, 100000, Llama4ImageConfig{.tile = 56, .max_patches = 16});
  EXPECT_EQ(thin.rows, 1u);
  EXPECT_EQ(thin.cols, 16u);
  EXPECT_EQ(thin.resized_h, 1u);
  EXPECT_EQ(thin.resized_w, 16u * 56);
}

// ---- The whole preprocessing against golden_vision.json -----------------------------------------

namespace {

uint64_t byte_sum(const RgbImage& image) {
  uint64_t sum = 0;
  for (uint8_t v : image.rgb) sum += v;
  return sum;
}

// Golden float sums are rounded to 4 decimals and were accumulated in another order: allow that
// plus a relative 1e-6 (one pixel off by one step moves a sum by 2/255 = 0.008).
void expect_sum(double got, const json& want, const char* what) {
  const double w = want.get<double>();
  EXPECT_NEAR(got, w, 1e-3 + 1e-6 * std::abs(w)) << what;
}

}  // namespace

TEST(Llama4Preprocess, ConfigFromPreprocessorConfigJson) {
  const Llama4ImageConfig config = load_llama4_image_config(kModelDir);
  const json& want = golden()["preprocess"];
  EXPECT_EQ(config.tile, want["tile"]);
  EXPECT_EQ(config.max_patches, want["max_patches"]);
  EXPECT_EQ(config.resize_to_max_canvas, want["resize_to_max_canvas"]);
  for (int c = 0; c < 3; ++c) {
    EXPECT_EQ(config.mean[c], want["mean"][c].get<float>());
    EXPECT_EQ(config.std[c], want["std"][c].get<float>());
  }
  EXPECT_EQ(config.rescale, want["rescale"].get<float>());
}

TEST(Llama4Preprocess, MatchesGoldenForEveryImage) {
  const Llama4ImageConfig config = load_llama4_image_config(kModelDir);
  const uint32_t t = config.tile;
  ASSERT_EQ(golden()["images"].size(), 6u);
  for (const auto& [name, want] : golden()["images"].items()) {
    SCOPED_TRACE(name);
    const RgbImage image = load_image(kModelDir / want["file"].get<std::string>());
    const PreprocessedImage got = preprocess_llama4_image(image, config);
    EXPECT_EQ(got.canvas_h, want["canvas_hw"][0]);
    EXPECT_EQ(got.canvas_w, want["canvas_hw"][1]);
    EXPECT_EQ(got.resized_h, want["resized_hw"][0]);
    EXPECT_EQ(got.resized_w, want["resized_hw"][1]);
    EXPECT_EQ(got.rows, want["aspect_ratio_rows_cols"][0]);
    EXPECT_EQ(got.cols, want["aspect_ratio_rows_cols"][1]);
    EXPECT_EQ(got.tiles, want["num_tiles"]);
    EXPECT_EQ(got.tiles > 1, want["has_global_tile"].get<bool>());

    // The uint8 stages, exact.
    const Llama4ImagePlan plan = plan_llama4_image(image.height, image.width, config);
    EXPECT_EQ(byte_sum(llama4_canvas_u8(image, plan)), want["canvas_u8_sum"].get<uint64_t>());
    if (want["global_tile_u8_sum"].is_null())
      EXPECT_EQ(got.tiles, 1u);
    else
      EXPECT_EQ(byte_sum(llama4_global_tile_u8(image, t)), want["global_tile_u8_sum"].get<uint64_t>());

    // The float32 pixel values.
    const json& pv = want["pixel_values"];
    ASSERT_EQ(pv["shape"], json({got.tiles, 3, t, t}));
    ASSERT_EQ(got.pixels.size(), size_t(got.tiles) * 3 * t * t);
    double sum = 0, abs_sum = 0, weighted = 0;
    for (size_t i = 0; i < got.pixels.size(); ++i) {
      sum += got.pixels[i];
      abs_sum += std::abs(got.pixels[i]);
      weighted += got.pixels[i] * (double(i % 251 + 1) / 251);
    }
    expect_sum(sum, pv["sum"], "sum");
    expect_sum(abs_sum, pv["abs_sum"], "abs_sum");
    expect_sum(weighted, pv["weighted_sum"], "weighted_sum");
    static_assert(std::endian::native == std::endian::little, "the digest is of little-endian float32");
    EXPECT_EQ(sha256_hex(got.pixels.data(), got.pixels.size() * sizeof(float)), pv["sha256_f32_le"]);
    for (size_t i = 0; i < 16; ++i) EXPECT_NEAR(got.pixels[i], pv["first16"][i].get<double>(), 1e-6) << i;
    const json& means = want["pixel_values_per_tile_mean"];
    ASSERT_EQ(means.size(), got.tiles);
    const size_t per_tile = size_t(3) * t * t;
    for (size_t k = 0; k < got.tiles; ++k) {
      double tile_sum = 0;
      for (size_t i = 0; i < per_tile; ++i) tile_sum += got.pixels[k * per_tile + i];
      EXPECT_NEAR(tile_sum / per_tile, means[k].get<double>(), 1e-6) << "tile " << k;
    }
  }
}

TEST(Llama4Preprocess, BadConfigsAreRefused) {
  auto config_of = [](const std::string& text) { return parse_llama4_image_config(json::parse(text), "test.json"); };
  const Llama4ImageConfig ok = config_of(R"({"size": {"height": 336, "width": 336}})");
  EXPECT_EQ(ok.tile, 336u);
  EXPECT_EQ(ok.max_patches, 16u);
  expect_error([&] { config_of(R"({"size": {"height": 336, "width": 224}})"); }, "must be square");
  expect_error([&] { config_of(R"({"max_patches": 16})"); }, "missing required field 'size'");
  expect_error([&] { config_of(R"({"size": {"height": 56, "width": 56}, "resample": 3})"); }, "resample 3");
  expect_error([&] { config_of(R"({"size": {"height": 56, "width": 56}, "max_patches": 1000})"); }, "max_patches");
  expect_error([&] { config_of(R"({"size": {"height": 56, "width": 56}, "image_std": [0.5, 0, 0.5]})"); },
               "std must be > 0");
  expect_error([&] { config_of(R"({"size": {"height": 56, "width": 56}, "image_mean": "x"})"); }, "image_mean");
  expect_error([&] { config_of(R"({"size": {"height": 56, "width": 56}, "do_resize": false})"); }, "do_resize");
  expect_error([&] { load_llama4_image_config(fs::path(EAGLEVK_ASSETS) / "tiny-llama3"); },
               "preprocessor_config.json not found");
}
