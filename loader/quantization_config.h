#pragma once
// What a checkpoint's config.json says about its quantization (`quantization_config`, or a
// ModelOpt export's hf_quant_config.json): which of the FP8 (loader/fp8.h) and 4-bit
// (loader/int4.h) schemes eaglevk reads, with its block and group sizes. Every other scheme is
// refused here, by name, before any tensor is looked at.
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace eaglevk::loader {

// What config.json's quantization_config (or a ModelOpt hf_quant_config.json) says about the
// weights. block_rows/block_cols: the scale block of 2-D scales when the scheme names one
// (compressed-tensors block_structure, fp8 weight_block_size), else 0.
struct QuantScheme {
  std::string method;  // "fbgemm_fp8", "compressed-tensors", "fp8", "modelopt"; "gptq", "awq"
  int64_t block_rows = 0, block_cols = 0;
  int64_t group_size = 0;  // compressed-tensors strategy "group"; the int4 group (0: a whole row)
  bool int4 = false;       // 4-bit integer weights (loader/int4.h) instead of FP8
  int zero_offset = 0;     // GPTQ's original checkpoint_format stores each zero minus one
};
// nullopt for a checkpoint without quantization_config. Any other quantization (bitsandbytes,
// 8-bit integers, NVFP4, MXFP4, GPTQ/AWQ at other widths ...) is an error naming it.
std::optional<QuantScheme> parse_quantization_config(const nlohmann::json& config, const std::string& source,
                                                   const nlohmann::json* hf_quant_config = nullptr);

}  // namespace eaglevk::loader
