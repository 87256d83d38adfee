#pragma once
// A scan of a checkpoint's numbers for NaN and infinity before they are uploaded (llama.cpp's
// --check-tensors): a NaN weight otherwise shows only as NaN logits, many passes later. Float
// tensors are read element by element; quantized tensors by their block scales (the f16 d and
// dmin of the ggml blocks, MXFP4's E8M0 exponent), whose codes cannot be anything but finite;
// FP8 codes by their NaN (and, for E5M2, infinity) encodings. Integer tensors hold no NaN.
#include <cstdint>
#include <optional>
#include <string>

#include "loader/safetensors.h"

namespace eaglevk::loader {

// The default scans checkpoints up to this many bytes (target and draft together): about a
// quarter of a second on one core from the page cache, where a load uploads them anyway. Larger
// ones are scanned on request only (a 16 GB checkpoint would take several seconds).
inline constexpr uint64_t kAutoTensorCheckBytes = uint64_t(256) << 20;

// Whether a load scans: `requested` when given (--check-tensors, --no-check-tensors), else
// whether the checkpoint is at most kAutoTensorCheckBytes.
bool should_check_tensors(std::optional<bool> requested, uint64_t checkpoint_bytes);

// The first element (for a block type, the first block scale) that is NaN or infinite.
struct NonFiniteElement {
  uint64_t index = 0;   // element index; for a quantized tensor, the first element of the block
  std::string what;     // "element", or the block field ("block scale d", "block min dmin", ...)
  std::string value;    // "nan", "inf" or "-inf"
};
std::optional<NonFiniteElement> first_non_finite(const TensorView& tensor);

// Fails naming the first tensor (in name order) holding a NaN or an infinity, its element and
// the file. Pages read are released again (Checkpoint::release_pages).
void check_tensors_finite(const Checkpoint& checkpoint, const std::string& label);

}  // namespace eaglevk::loader
