#include "loader/image_resize.h"

#include <algorithm>
#include <cmath>

#include <eaglevk/error.h>

namespace eaglevk::loader {
namespace {

// The taps of every output sample along one axis: output i reads inputs first[i] ..
// first[i] + count[i] - 1 with weights weights[offset[i] ..].
struct AxisTaps {
  std::vector<uint32_t> first, count;
  std::vector<size_t> offset;
  std::vector<double> weights;
};

AxisTaps axis_taps(uint32_t n_in, uint32_t n_out) {
  const double scale = double(n_in) / double(n_out);
  const double support = std::max(scale, 1.0);  // the triangle filter's support (1) times max(scale, 1)
  AxisTaps taps;
  taps.first.resize(n_out);
  taps.count.resize(n_out);
  taps.offset.resize(n_out);
  for (uint32_t i = 0; i < n_out; ++i) {
    const double center = (i + 0.5) * scale;
    // int64_t(...) truncates toward zero, as PIL's (int) cast; negative starts are clamped to 0.
    const int64_t lo = std::max<int64_t>(static_cast<int64_t>(center - support + 0.5), 0);
    const int64_t hi = std::min<int64_t>(static_cast<int64_t>(center + support + 0.5), n_in);
    taps.first[i] = static_cast<uint32_t>(lo);
    taps.count[i] = static_cast<uint32_t>(std::max<int64_t>(hi - lo, 0));
    taps.offset[i] = taps.weights.size();
    double sum = 0;
    for (int64_t j = lo; j < hi; ++j) {
      const double w = std::max(0.0, 1.0 - std::abs((double(j) - center + 0.5) / support));
      taps.weights.push_back(w);
      sum += w;
    }
    if (sum != 0)
      for (size_t k = taps.offset[i]; k < taps.weights.size(); ++k) taps.weights[k] /= sum;
  }
  return taps;
}

uint8_t round_to_u8(double v) { return static_cast<uint8_t>(std::clamp(std::floor(v + 0.5), 0.0, 255.0)); }

RgbImage resize_width(const RgbImage& in, uint32_t out_w) {
  const AxisTaps taps = axis_taps(in.width, out_w);
  RgbImage out;
  out.width = out_w;
  out.height = in.height;
  out.rgb.resize(size_t(out_w) * in.height * 3);
  for (size_t y = 0; y < in.height; ++y) {
    const uint8_t* row = in.rgb.data() + y * in.width * 3;
    uint8_t* dst = out.rgb.data() + y * out_w * 3;
    for (uint32_t x = 0; x < out_w; ++x) {
      double sum[3] = {0, 0, 0};
      const double* w = taps.weights.data() + taps.offset[x];
      for (uint32_t k = 0; k < taps.count[x]; ++k) {
        const uint8_t* px = row + size_t(taps.first[x] + k) * 3;
        for (int c = 0; c < 3; ++c) sum[c] += w[k] * px[c];
      }
      for (int c = 0; c < 3; ++c) dst[x * 3 + c] = round_to_u8(sum[c]);
    }
  }
  return out;
}

RgbImage resize_height(const RgbImage& in, uint32_t out_h) {
  const AxisTaps taps = axis_taps(in.height, out_h);
  const size_t row_values = size_t(in.width) * 3;
  RgbImage out;
  out.width = in.width;
  out.height = out_h;
  out.rgb.resize(row_values * out_h);
  std::vector<double> sum(row_values);
  for (uint32_t y = 0; y < out_h; ++y) {
    std::fill(sum.begin(), sum.end(), 0.0);
    const double* w = taps.weights.data() + taps.offset[y];
    for (uint32_t k = 0; k < taps.count[y]; ++k) {  // whole input rows at a time: contiguous reads
      const uint8_t* row = in.rgb.data() + size_t(taps.first[y] + k) * row_values;
      for (size_t v = 0; v < row_values; ++v) sum[v] += w[k] * row[v];
    }
    uint8_t* dst = out.rgb.data() + size_t(y) * row_values;
    for (size_t v = 0; v < row_values; ++v) dst[v] = round_to_u8(sum[v]);
  }
  return out;
}

}  // namespace

RgbImage resize_bilinear_antialias(const RgbImage& image, uint32_t out_height, uint32_t out_width,
                                   uint64_t max_intermediate_pixels) {
  if (image.width == 0 || image.height == 0 || uint64_t(image.width) * image.height * 3 != image.rgb.size())
    fail("resize: the image is {} x {} with {} bytes of RGB", image.width, image.height, image.rgb.size());
  if (out_height == 0 || out_width == 0) fail("resize: empty output size {} x {}", out_height, out_width);
  if (out_width == image.width && out_height == image.height) return image;
  if (out_width == image.width) return resize_height(image, out_height);
  if (out_height == image.height) return resize_width(image, out_width);
  // Horizontal first, as PIL. That order holds an intermediate of height x out_width pixels,
  // which is far larger than the input and the output only when the width grows while the
  // height shrinks a lot (a 1 x 1000000 strip resized to a 336 x 336 global tile: 1 GB for a
  // 2 KB PNG); then the vertical pass goes first. The orders may differ by a rounding step.
  const uint64_t intermediate = uint64_t(image.height) * out_width;
  const uint64_t bound = std::max({uint64_t(image.height) * image.width, uint64_t(out_height) * out_width,
                                   max_intermediate_pixels});
  if (intermediate <= bound) return resize_height(resize_width(image, out_width), out_height);
  return resize_width(resize_height(image, out_height), out_width);
}

}  // namespace eaglevk::loader
