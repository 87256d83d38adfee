// PNG to RGB with libpng. libpng reports errors by calling our error callback, which must not
// return: it longjmps back to the setjmp of the stage that was running. A longjmp that skips a
// C++ destructor is undefined behaviour, so each stage that calls libpng is a small function
// whose locals are all trivially destructible (pointers, integers), it only records the failure
// and returns false, and the C++ code around the stages (which owns the vectors and the libpng
// structs) turns that into an eaglevk::Error. Nothing is thrown through libpng's C frames.
#include <png.h>

#include <algorithm>
#include <cstring>
#include <string>

#include <eaglevk/error.h>

#include "loader/image_decode.h"

namespace eaglevk::loader {
namespace {

// What libpng's callbacks read and write. Trivially destructible on purpose (see above).
struct PngReadState {
  const uint8_t* data = nullptr;
  size_t size = 0;
  size_t pos = 0;
  char error[256] = {};    // the error that stopped decoding
  char warning[256] = {};  // the last warning: libpng often warns about the cause, then fails
};

void copy_message(char (&out)[256], const char* message) {
  std::strncpy(out, message ? message : "(no message)", sizeof(out) - 1);
  out[sizeof(out) - 1] = '\0';
}

void on_png_error(png_structp png, png_const_charp message) {
  copy_message(static_cast<PngReadState*>(png_get_error_ptr(png))->error, message);
  png_longjmp(png, 1);
}

void on_png_warning(png_structp png, png_const_charp message) {
  copy_message(static_cast<PngReadState*>(png_get_error_ptr(png))->warning, message);
}

void read_png_bytes(png_structp png, png_bytep out, size_t count) {
  auto* state = static_cast<PngReadState*>(png_get_io_ptr(png));
  if (count > state->size - state->pos) png_error(png, "unexpected end of file (the PNG is truncated)");
  std::memcpy(out, state->data + state->pos, count);
  state->pos += count;
}

struct PngHeader {
  png_uint_32 width = 0, height = 0;
  int bit_depth = 0, color_type = 0;
};

// Stage 1: signature, IHDR and every chunk up to the image data. Returns false on an error.
bool read_png_header(png_structp png, png_infop info, PngHeader* header) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_read_info(png, info);
  int interlace = 0, compression = 0, filter = 0;
  png_get_IHDR(png, info, &header->width, &header->height, &header->bit_depth, &header->color_type, &interlace,
               &compression, &filter);
  return true;
}

// Stage 2: ask libpng to deliver 8-bit RGB whatever the file holds, as PIL's convert("RGB")
// would produce it (image_decode.cpp says why alpha is dropped, not composited).
bool set_png_rgb8_output(png_structp png, png_infop info, const PngHeader* header, size_t* row_bytes,
                         int* channels, int* bit_depth) {
  if (setjmp(png_jmpbuf(png))) return false;
  const int color = header->color_type;
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);  // also turns tRNS into alpha...
  if (color == PNG_COLOR_TYPE_GRAY && header->bit_depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (header->bit_depth == 16) png_set_strip_16(png);  // the high byte, as PIL's 16-bit RGB(A) unpackers
  if ((color & PNG_COLOR_MASK_ALPHA) || png_get_valid(png, info, PNG_INFO_tRNS))
    png_set_strip_alpha(png);  // ...which this drops again
  if (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  *row_bytes = png_get_rowbytes(png, info);
  *channels = png_get_channels(png, info);
  *bit_depth = png_get_bit_depth(png, info);
  return true;
}

// Stage 3: the pixels, then the chunks after them up to IEND, so that a file cut anywhere is
// refused. `rows` holds one pointer per image row.
bool read_png_pixels(png_structp png, png_bytepp rows) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_read_image(png, rows);
  png_read_end(png, nullptr);
  return true;
}

// Owns libpng's structs; destroyed on every path out of decode_png, exceptions included.
struct PngReadStructs {
  png_structp png = nullptr;
  png_infop info = nullptr;
  ~PngReadStructs() {
    if (png) png_destroy_read_struct(&png, info ? &info : nullptr, nullptr);
  }
};

uint32_t read_be32(const uint8_t* p) {
  return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3];
}

// Every chunk up to IEND must lie inside the file. libpng allocates a chunk's declared length
// before reading it, for text chunks even past png_set_chunk_malloc_max (which it only warns
// about): a 165-byte file declaring a 1.7 GB zTXt chunk made it allocate 1.7 GB (found by
// tests/fuzz/image_fuzz.cpp). After this walk no buffer can be larger than the file.
void check_png_chunks_fit(std::span<const uint8_t> bytes, std::string_view source) {
  size_t at = 8;  // after the signature
  while (true) {
    if (bytes.size() - at < 12)
      fail("{}: invalid PNG: unexpected end of file (the PNG is truncated: no complete chunk at byte {})", source, at);
    const uint32_t length = read_be32(bytes.data() + at);
    const std::string_view type(reinterpret_cast<const char*>(bytes.data() + at + 4), 4);
    if (length > bytes.size() - at - 12) {
      const bool printable = std::all_of(type.begin(), type.end(), [](char c) { return c >= 0x21 && c <= 0x7E; });
      fail("{}: invalid PNG: unexpected end of file (the PNG is truncated: chunk {} at byte {} declares {} bytes, "
           "{} remain)",
           source, printable ? std::string(type) : std::string("(unprintable)"), at, length, bytes.size() - at - 12);
    }
    if (type == "IEND") return;
    at += 12 + size_t(length);
  }
}

[[noreturn]] void fail_png(std::string_view source, const PngReadState& state) {
  if (state.warning[0] && std::strcmp(state.warning, state.error) != 0)
    fail("{}: invalid PNG: {} (after: {})", source, state.error, state.warning);
  fail("{}: invalid PNG: {}", source, state.error);
}

}  // namespace

RgbImage decode_png(std::span<const uint8_t> bytes, const ImageLimits& limits, std::string_view source) {
  if (bytes.size() > limits.max_file_bytes)
    fail("{}: {} bytes is over the image file size limit of {} bytes", source, bytes.size(), limits.max_file_bytes);
  if (bytes.size() < 8) fail("{}: not a PNG (shorter than the signature)", source);
  check_png_chunks_fit(bytes, source);
  PngReadState state;
  state.data = bytes.data();
  state.size = bytes.size();

  PngReadStructs s;
  s.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &state, on_png_error, on_png_warning);
  if (!s.png) fail("{}: cannot create a PNG decoder (out of memory?)", source);
  s.info = png_create_info_struct(s.png);
  if (!s.info) fail("{}: cannot create a PNG decoder (out of memory?)", source);
  png_set_read_fn(s.png, &state, read_png_bytes);
  // libpng's own guards, before it reads anything: per-side size (checked on IHDR, the product
  // is checked below), and the memory one ancillary chunk (text, ICC profile) may decompress to.
  const png_uint_32 max_side = static_cast<png_uint_32>(std::min<uint64_t>(limits.max_pixels, PNG_USER_WIDTH_MAX));
  png_set_user_limits(s.png, max_side, max_side);
  png_set_chunk_malloc_max(s.png, 8 << 20);
  // Text and ICC profile chunks are skipped unread: the pixels do not depend on them (PIL's
  // convert("RGB") does not apply the profile either), and skipping avoids decompressing them.
  static constexpr png_byte kIgnoredChunks[] = "tEXt\0zTXt\0iTXt\0iCCP\0";
  png_set_keep_unknown_chunks(s.png, PNG_HANDLE_CHUNK_NEVER, kIgnoredChunks, 4);

  PngHeader header;
  if (!read_png_header(s.png, s.info, &header)) fail_png(source, state);
  const uint64_t pixels = uint64_t(header.width) * header.height;
  if (pixels == 0) fail("{}: the PNG declares an empty image ({} x {})", source, header.width, header.height);
  if (pixels > limits.max_pixels)
    fail("{}: the PNG declares {} x {} pixels, over the limit of {} pixels", source, header.width, header.height,
         limits.max_pixels);

  size_t row_bytes = 0;
  int channels = 0, bit_depth = 0;
  if (!set_png_rgb8_output(s.png, s.info, &header, &row_bytes, &channels, &bit_depth)) fail_png(source, state);
  if (channels != 3 || bit_depth != 8 || row_bytes != size_t(header.width) * 3)
    fail("{}: PNG colour type {} at bit depth {} did not convert to 8-bit RGB ({} channels, {} bits)", source,
         header.color_type, header.bit_depth, channels, bit_depth);

  RgbImage image;
  image.width = header.width;
  image.height = header.height;
  image.rgb.resize(pixels * 3);
  std::vector<png_bytep> rows(header.height);
  for (size_t y = 0; y < rows.size(); ++y) rows[y] = image.rgb.data() + y * row_bytes;
  if (!read_png_pixels(s.png, rows.data())) fail_png(source, state);
  return image;
}

}  // namespace eaglevk::loader
