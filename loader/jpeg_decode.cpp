// JPEG to RGB with libjpeg-turbo. libjpeg reports a fatal error by calling error_exit, which
// must not return. Throwing a C++ exception from it would unwind through libjpeg's C frames,
// which are compiled without -fexceptions (undefined behaviour, and libjpeg's own state would be
// left half-updated), so error_exit longjmps back to the stage that called libjpeg instead. As in
// png_decode.cpp, each stage is a small function whose locals are trivially destructible; it
// returns false, and the C++ code around the stages throws the eaglevk::Error.
//
// Corrupt-data warnings ("Premature end of JPEG file", "Corrupt JPEG data: ...") are fatal
// here. libjpeg would go on and fill the missing blocks with grey; a damaged prompt image should
// be refused, not silently fed to the model.
#include <cstdio>  // jpeglib.h needs FILE and size_t declared first

#include <jerror.h>
#include <jpeglib.h>

#include <algorithm>
#include <climits>
#include <csetjmp>
#include <cstring>

#include <eaglevk/error.h>

#include "loader/image_decode.h"

namespace eaglevk::loader {
namespace {

// libjpeg hands the callbacks a jpeg_error_mgr* / j_common_ptr: `mgr` and `progress` come first
// so that the containing structs can be recovered from them.
struct JpegErrorState {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

struct JpegScanLimit {
  jpeg_progress_mgr progress;
  int max_scans;
};

void on_jpeg_error(j_common_ptr cinfo) {
  auto* state = reinterpret_cast<JpegErrorState*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, state->message);
  std::longjmp(state->jump, 1);
}

// level -1: a warning about corrupt data (fatal, see above); 0 and up: trace output (ignored).
void on_jpeg_message(j_common_ptr cinfo, int level) {
  if (level < 0) on_jpeg_error(cinfo);
}

void on_jpeg_progress(j_common_ptr cinfo) {
  auto* limit = reinterpret_cast<JpegScanLimit*>(cinfo->progress);
  if (!cinfo->is_decompressor) return;
  const int scans = reinterpret_cast<j_decompress_ptr>(cinfo)->input_scan_number;
  if (scans > limit->max_scans) {
    auto* state = reinterpret_cast<JpegErrorState*>(cinfo->err);
    std::snprintf(state->message, sizeof(state->message), "more than %d progressive scans (limit)", limit->max_scans);
    state->mgr.msg_code = 0;
    std::longjmp(state->jump, 1);
  }
}

// Stage 1: create the decompressor and read the markers up to the first scan.
bool read_jpeg_header(j_decompress_ptr cinfo, JpegErrorState* error, JpegScanLimit* scan_limit,
                      long max_memory, const uint8_t* data, unsigned long size) {
  if (setjmp(error->jump)) return false;
  jpeg_create_decompress(cinfo);
  // Whole-image buffers (the coefficients of a progressive file) beyond this would need a
  // backing store, which libjpeg-turbo is built without: it fails instead of allocating.
  cinfo->mem->max_memory_to_use = max_memory;
  cinfo->progress = &scan_limit->progress;
  jpeg_mem_src(cinfo, data, size);
  jpeg_read_header(cinfo, TRUE);
  return true;
}

// Stage 2: RGB output (libjpeg converts YCbCr and greyscale; CMYK was refused before this).
bool start_jpeg_rgb_output(j_decompress_ptr cinfo, JpegErrorState* error) {
  if (setjmp(error->jump)) return false;
  cinfo->out_color_space = JCS_RGB;
  jpeg_start_decompress(cinfo);
  return true;
}

// Stage 3: every row into `rgb` (output_height rows of `row_bytes`), then the end of the file.
bool read_jpeg_pixels(j_decompress_ptr cinfo, JpegErrorState* error, uint8_t* rgb, size_t row_bytes) {
  if (setjmp(error->jump)) return false;
  while (cinfo->output_scanline < cinfo->output_height) {
    JSAMPROW row = rgb + size_t(cinfo->output_scanline) * row_bytes;
    jpeg_read_scanlines(cinfo, &row, 1);
  }
  jpeg_finish_decompress(cinfo);
  return true;
}

// Owns the decompressor; jpeg_destroy_decompress is safe on a zeroed or half-created struct.
struct JpegDecompressor {
  jpeg_decompress_struct cinfo{};
  ~JpegDecompressor() { jpeg_destroy_decompress(&cinfo); }
};

[[noreturn]] void fail_jpeg(std::string_view source, const JpegErrorState& error) {
  if (error.mgr.msg_code == JERR_NO_BACKING_STORE)
    fail("{}: invalid JPEG: the decoder needs more memory than the image size limit allows", source);
  fail("{}: invalid JPEG: {}", source, error.message);
}

}  // namespace

RgbImage decode_jpeg(std::span<const uint8_t> bytes, const ImageLimits& limits, std::string_view source) {
  if (bytes.size() > limits.max_file_bytes)
    fail("{}: {} bytes is over the image file size limit of {} bytes", source, bytes.size(), limits.max_file_bytes);
  if (bytes.size() > ULONG_MAX) fail("{}: too large for libjpeg", source);

  JpegErrorState error{};
  JpegScanLimit scan_limit{};
  scan_limit.progress.progress_monitor = on_jpeg_progress;
  scan_limit.max_scans = static_cast<int>(std::min<uint32_t>(limits.max_jpeg_scans, INT_MAX));
  JpegDecompressor d;
  d.cinfo.err = jpeg_std_error(&error.mgr);
  error.mgr.error_exit = on_jpeg_error;
  error.mgr.emit_message = on_jpeg_message;
  // A progressive 4:4:4 file keeps 3 coefficients of 2 bytes per pixel; the rest is row buffers.
  const uint64_t max_memory = std::min<uint64_t>(limits.max_pixels * 8 + (uint64_t(16) << 20), LONG_MAX);

  if (!read_jpeg_header(&d.cinfo, &error, &scan_limit, static_cast<long>(max_memory), bytes.data(), bytes.size()))
    fail_jpeg(source, error);
  const uint64_t width = d.cinfo.image_width, height = d.cinfo.image_height;
  if (width * height == 0) fail("{}: the JPEG declares an empty image ({} x {})", source, width, height);
  if (width * height > limits.max_pixels)
    fail("{}: the JPEG declares {} x {} pixels, over the limit of {} pixels", source, width, height, limits.max_pixels);
  if (d.cinfo.jpeg_color_space == JCS_CMYK || d.cinfo.jpeg_color_space == JCS_YCCK)
    fail("{}: CMYK JPEG images are not supported (convert the image to RGB)", source);

  if (!start_jpeg_rgb_output(&d.cinfo, &error)) fail_jpeg(source, error);
  if (d.cinfo.output_components != 3 || d.cinfo.output_width != width || d.cinfo.output_height != height)
    fail("{}: the JPEG did not decode to {} x {} RGB", source, width, height);

  RgbImage image;
  image.width = static_cast<uint32_t>(width);
  image.height = static_cast<uint32_t>(height);
  image.rgb.resize(width * height * 3);
  if (!read_jpeg_pixels(&d.cinfo, &error, image.rgb.data(), width * 3)) fail_jpeg(source, error);
  return image;
}

}  // namespace eaglevk::loader
