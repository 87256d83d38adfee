#pragma once
// FP8 checkpoints, as vLLM and SGLang users have them: linear weights stored as OCP FP8 E4M3
// codes (safetensors dtype F8_E4M3) with a scale tensor beside each, in the layouts that
// config.json's quantization_config names:
//   fbgemm_fp8            Meta's FP8 releases: `W.weight_scale` [out, 1] f32, one scale a row
//   compressed-tensors    llm-compressor (RedHatAI, Meta's Llama-4 FP8): `W.weight_scale` [1]
//     (float, 8 bits)     (strategy tensor), [out, 1] (channel), [out, in / g] (group) or
//                         [out / br, in / bc] (block, block_structure [br, bc])
//   fp8                   DeepSeek-style blocks: `W.weight_scale_inv` [out / 128, in / 128]
//                         (weight_block_size); despite the name it multiplies, as the others
//   modelopt (FP8)        NVIDIA ModelOpt: `W.weight_scale` [] or [1]
// Element (r, c) of a weight is e4m3(code) * scale[r / br][c / bc] in f32 (divisions rounded
// down; a partial last block keeps its scale), as llama.cpp's converter dequantizes them.
//
// Only the weights are FP8 here: eaglevk multiplies f32 activations by these weights (the
// kernels read FP8_B32 blocks, loader/quant.h), so the activation and KV-cache scales of W8A8
// files (input_scale, k_scale, v_scale) are read past, and the outputs are those of the
// dequantized model. vLLM's W8A8 kernels round the activations to FP8 as well, so its logits
// differ from these in the low bits.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "loader/quantization_config.h"
#include "loader/safetensors.h"

namespace eaglevk::loader {

// OCP FP8 E4M3 ("e4m3fn"): sign, 4 exponent bits (bias 7), 3 mantissa bits; no infinities,
// 0x7F and 0xFF are NaN, the largest value 448. e4m3_to_f32 is exact; f32_to_e4m3 rounds to
// nearest even and saturates at +-448 (NaN stays NaN), as llm-compressor's clamp-then-cast.
float e4m3_to_f32(uint8_t code);
uint8_t f32_to_e4m3(float value);
inline constexpr float kE4M3Max = 448.0f;

// Pairs every F8_E4M3 weight with its scale (TensorView::scale) and takes the scale tensors out
// of the checkpoint, along with the activation and KV-cache scales (one note says so). Errors:
// an FP8 weight without a scale or with a scale of a shape the scheme does not explain, a scale
// without its FP8 weight, FP8 tensors that are not 2-D, FP8 tensors with no quantization_config
// saying how to read them.
void attach_fp8_scales(Checkpoint& ckpt, const std::optional<QuantScheme>& scheme, const std::string& source,
                       std::vector<std::string>& notes);

// Device bytes of an FP8 weight as FP8_B32 blocks (36 bytes per 32 elements).
uint64_t fp8_block_bytes(const TensorView& weight);

// Rows [first, first + count) of an FP8 weight as FP8_B32 blocks appended to `out`: per block of
// 32 elements of a row, the f32 scale of that block, then the 32 codes as stored. Fails naming
// the tensor and row on a NaN code or a non-finite scale, and unless the rows are a whole
// number of 32-element blocks.
void fp8_rows_to_blocks(const TensorView& weight, int64_t first, int64_t count, std::vector<std::byte>& out);

}  // namespace eaglevk::loader
