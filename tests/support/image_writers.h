#pragma once
// PNG and JPEG writers for the image tests (and for making fuzz seeds): libpng's and libjpeg's
// own encoders, so that the files are what real tools write. Test inputs only: on an encoder
// error they abort (the data is always valid here, and aborting avoids longjmp in test code).
// Header-only: tests/support/*.cpp goes into the Vulkan-linked support library.
#include <png.h>

#include <cstdio>  // jpeglib.h needs FILE declared first
#include <cstdlib>
#include <cstring>
#include <vector>

#include <jpeglib.h>

namespace eaglevk::testing {

struct PngSpec {
  uint32_t width = 0, height = 0;
  int color_type = PNG_COLOR_TYPE_RGB;  // PNG_COLOR_TYPE_*
  int bit_depth = 8;
  bool interlaced = false;
  std::vector<png_color> palette = {};  // PNG_COLOR_TYPE_PALETTE
  std::vector<uint8_t> palette_alpha = {};  // tRNS for a palette, when not empty
};

// `samples`: height rows of packed samples as the PNG stores them (16-bit big-endian, sub-byte
// depths packed high bit first).
inline std::vector<uint8_t> write_png(const PngSpec& spec, const std::vector<uint8_t>& samples) {
  struct Out {
    static void write(png_structp png, png_bytep data, size_t n) {
      auto* v = static_cast<std::vector<uint8_t>*>(png_get_io_ptr(png));
      v->insert(v->end(), data, data + n);
    }
    static void flush(png_structp) {}
    static void error(png_structp, png_const_charp message) {
      std::fprintf(stderr, "write_png: %s\n", message);
      std::abort();
    }
  };
  std::vector<uint8_t> file;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, Out::error, nullptr);
  png_infop info = png_create_info_struct(png);
  png_set_write_fn(png, &file, Out::write, Out::flush);
  png_set_IHDR(png, info, spec.width, spec.height, spec.bit_depth, spec.color_type,
               spec.interlaced ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  if (!spec.palette.empty()) png_set_PLTE(png, info, spec.palette.data(), static_cast<int>(spec.palette.size()));
  if (!spec.palette_alpha.empty())
    png_set_tRNS(png, info, spec.palette_alpha.data(), static_cast<int>(spec.palette_alpha.size()), nullptr);
  png_write_info(png, info);
  const size_t row_bytes = png_get_rowbytes(png, info);
  std::vector<png_bytep> rows(spec.height);
  for (size_t y = 0; y < spec.height; ++y) rows[y] = const_cast<uint8_t*>(samples.data()) + y * row_bytes;
  png_write_image(png, rows.data());
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return file;
}

struct JpegSpec {
  uint32_t width = 0, height = 0;
  bool grey = false;  // 1 component (pixels hold 1 byte each), else RGB (3 bytes each)
  int quality = 90;
  bool progressive = false;
};

inline std::vector<uint8_t> write_jpeg(const JpegSpec& spec, const std::vector<uint8_t>& pixels) {
  struct Abort {
    static void error(j_common_ptr cinfo) {
      char message[JMSG_LENGTH_MAX];
      (*cinfo->err->format_message)(cinfo, message);
      std::fprintf(stderr, "write_jpeg: %s\n", message);
      std::abort();
    }
  };
  jpeg_compress_struct cinfo{};
  jpeg_error_mgr err{};
  cinfo.err = jpeg_std_error(&err);
  err.error_exit = Abort::error;
  jpeg_create_compress(&cinfo);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &buffer, &size);
  cinfo.image_width = spec.width;
  cinfo.image_height = spec.height;
  cinfo.input_components = spec.grey ? 1 : 3;
  cinfo.in_color_space = spec.grey ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, spec.quality, TRUE);
  if (spec.progressive) jpeg_simple_progression(&cinfo);
  jpeg_start_compress(&cinfo, TRUE);
  const size_t stride = size_t(spec.width) * cinfo.input_components;
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(pixels.data()) + cinfo.next_scanline * stride;
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  std::vector<uint8_t> file(buffer, buffer + size);
  jpeg_destroy_compress(&cinfo);
  std::free(buffer);
  return file;
}

}  // namespace eaglevk::testing
