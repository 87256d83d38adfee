#pragma once
// FP8 and 4-bit checkpoints written at test time from the tiny models, in the layouts the real
// ones use (loader/fp8.h, loader/int4.h), each with a reference copy of the same model in which
// the quantized weights are decoded by the plain loops of quantized_checkpoint.cpp (not eaglevk's
// loader) and stored as F32 in the original tensor layout, so that the reference runs through
// the float path the golden tests check.
#include <filesystem>

namespace eaglevk::testing {

enum class QuantRecipe {
  FbgemmRows,         // fbgemm_fp8 (Meta's releases): weight_scale [out, 1] f32
  ChannelBf16Static,  // compressed-tensors, strategy channel: weight_scale [out, 1] bf16, plus the
                      // static input_scale [1] of a W8A8 file
  TensorScale,        // compressed-tensors, strategy tensor: weight_scale [1] f32
  Blocks128,          // fp8 (DeepSeek-style): weight_scale_inv [out / 128, in / 128] f32
  Bf16,               // no quantization: only the expert split (split_experts)
  // 4-bit integers (round to nearest per group, f16/bf16 scales):
  GptqSym64,          // gptq, original format: qweight [in/8, out], qzeros (zero - 1 = 7),
                      // scales f16, g_idx, groups of 64, a zero bias on the q projections
  AwqGemm128,         // awq GEMM: qweight [in, out/8] in AWQ's column order, asymmetric, groups of 128
  PackedAsym128,      // compressed-tensors pack-quantized: weight_packed, bf16 weight_scale,
                      // weight_zero_point, weight_shape, groups of 128
  PackedSymChannel,   // compressed-tensors pack-quantized, symmetric, one scale a row
};

// Copies the model folder `from` into `fp8` and `reference` (side files too). The projections of
// the transformer layers (`*.layers.N.*_proj.weight`, experts included) are quantized per
// `recipe` (FP8 the way llm-compressor does it: scale = amax / 448 per scale block, codes rounded
// to nearest even; 4-bit by round to nearest per group); with split_experts, Llama-4's fused experts (experts.gate_up_proj [E, H, 2I],
// experts.down_proj [E, I, H]) become one 2-D matrix per expert and projection, as
// llm-compressor writes them. The reference keeps the original layout.
void write_quantized_copy(const std::filesystem::path& from, const std::filesystem::path& fp8,
                    const std::filesystem::path& reference, QuantRecipe recipe, bool split_experts);

// OCP E4M3 decoded from its definition (for the references): sign, exponent e (bias 7), mantissa m.
float e4m3_reference_value(unsigned code);

}  // namespace eaglevk::testing
