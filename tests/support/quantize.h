#pragma once
// Writes llama.cpp's block-quantized formats: test data for the quantized kernels and loaders,
// and byte-for-byte checks against llama-quantize's output. eaglevk reads these blocks
// (loader/quant.h) but never writes them, so the writer lives with the tests.
#include <span>
#include <vector>

#include "loader/safetensors.h"

namespace eaglevk::testing {

// Encodes `in` (a multiple of the block) into blocks, appended to `out`. Every type follows the
// quantizer llama-quantize runs without an importance matrix and gives the same bytes: ggml's
// quantize_row_*_ref (MXFP4 included), and for IQ4_NL and IQ4_XS its quantize_iq4_* (seven grid
// tries each way, which the _ref entry points skip); the K-quants and IQ4 choose scales by its
// weighted least-squares searches over candidate grid spacings. The lattice formats (IQ1_S ...
// IQ3_S) are decoded only: quantize refuses them (llama-quantize needs an importance matrix for
// them). INT4_B32 follows GPTQ's round-to-nearest without calibration (asymmetric, f16 d, 4-bit
// zero). FP8_B32 follows llm-compressor's recipe per block (scale = amax / 448, codes rounded to
// nearest even): test data shaped like the FP8 checkpoints.
void quantize(loader::DType dtype, std::span<const float> in, std::vector<std::byte>& out);

}  // namespace eaglevk::testing
