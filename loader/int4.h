#pragma once
// 4-bit integer checkpoints (W4A16), as vLLM and SGLang users have them for small cards: each
// linear weight stored as packed 4-bit codes with f16/bf16 scales and 4-bit zero points per
// group of inputs, in one of three layouts (the tensors of a weight `W`, [out, in], group g):
//   gptq                AutoGPTQ / GPTQModel: W.qweight I32 [in / 8, out] (8 codes a word along
//                       the inputs, lowest bits first), W.qzeros I32 [in / g, out / 8] (along the
//                       outputs), W.scales F16 [in / g, out], W.g_idx I32 [in]; the original
//                       checkpoint_format stores each zero minus one
//   awq                 AutoAWQ's GEMM packing: W.qweight I32 [in, out / 8] and W.qzeros
//                       [in / g, out / 8] with the outputs of a word in the order 0 2 4 6 1 3 5 7
//                       (code i of a word is output 8 w + that order's i-th), W.scales F16 [in / g, out]
//   compressed-tensors  llm-compressor's pack-quantized: W.weight_packed I32 [out, in / 8],
//                       W.weight_scale [out, in / g], W.weight_shape [2], and for asymmetric
//                       schemes W.weight_zero_point I32 [out / 8, in / g] (packed along the
//                       outputs); symmetric ones have zero 8
// Element (r, c) is (q - zero) * scale, as llama.cpp's converter and the kernels of vLLM define it.
// Act-order files (GPTQ desc_act, a compressed-tensors weight_g_idx) whose group index is not
// c / g are refused: their groups are not runs of inputs.
//
// Uploads turn these into INT4_B32 blocks (loader/quant.h): per 32 inputs of a row d = scale,
// m = -zero * scale and the codes, so x = q * d + m, which with 16-bit scales and 4-bit codes is
// (q - zero) * scale exactly in f32. Activations stay f32 (vLLM's W4A16 kernels take f16).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "loader/fp8.h"
#include "loader/safetensors.h"

namespace eaglevk::loader {

// Replaces the parts of every 4-bit weight of `scheme` (gptq, awq, or int4 compressed-tensors)
// by one INT4_PACKED view under the weight's own name (`W.weight`, shape [out, in]) whose
// TensorView::int4 holds them. Errors name the tensor: missing or misshapen parts, groups that
// are not a multiple of 32, act-order group indices, non-zero biases of GPTQ layers.
void attach_int4_weights(Checkpoint& ckpt, const QuantScheme& scheme, const std::string& source,
                         std::vector<std::string>& notes);

// Device bytes of a 4-bit weight as INT4_B32 blocks (24 bytes per 32 elements).
uint64_t int4_block_bytes(const TensorView& weight);

// Rows [first, first + count) of a 4-bit weight as INT4_B32 blocks appended to `out`. Fails
// naming the tensor on a non-finite scale.
void int4_rows_to_blocks(const TensorView& weight, int64_t first, int64_t count, std::vector<std::byte>& out);

}  // namespace eaglevk::loader
