#pragma once
// Antialiased bilinear resize of 8-bit RGB images: PIL's Image.resize(BILINEAR) algorithm, which
// torchvision's antialiased uint8 resize (used by transformers' fast image processors) follows.
// Separable: for output index i along an axis of n_in -> n_out samples, with scale = n_in/n_out
// and support = max(scale, 1), the inputs j in [max(int(center - support + 0.5), 0),
// min(int(center + support + 0.5), n_in)) around center = (i + 0.5) * scale are weighted by
// max(0, 1 - |(j - center + 0.5) / support|), normalized to sum 1 (vision-spec.md §1.4).
// Weights and sums are double; PIL uses fixed-point weights, so results can differ by one step
// where a value is within a hair of .5.
#include <cstdint>

#include "loader/image_decode.h"

namespace eaglevk::loader {

// The horizontal pass first, rounded half up to uint8 after each pass (as PIL). A pass whose
// size does not change is skipped: it would be the identity. When the horizontal-first
// intermediate (height x out_width pixels) would be larger than the input, the output and
// `max_intermediate_pixels` (48 MB of RGB by default), the vertical pass goes first instead:
// that only happens to long strips whose width grows while their height shrinks.
RgbImage resize_bilinear_antialias(const RgbImage& image, uint32_t out_height, uint32_t out_width,
                                   uint64_t max_intermediate_pixels = uint64_t(16) << 20);

}  // namespace eaglevk::loader
