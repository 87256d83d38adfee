#pragma once
// A plain C++ Llama-3 or Qwen3 forward over a Hugging Face checkpoint folder, independent of the
// runtime: its own reading of config.json, weights converted from the file, f32 activations
// with double accumulation, the K/V cache rounded through f16 as the device keeps it, and
// the llama3 rope scaling recomputed from its formula. Qwen3 (config.json's architecture
// Qwen3ForCausalLM) adds the per-head q/k RMSNorms before the rotation; a checkpoint without
// lm_head.weight uses embed_tokens as its output (tied). Threads over output rows so that the
// 8B-shaped synthetic checkpoints take seconds, not minutes.
#include <cstdint>
#include <filesystem>
#include <vector>

namespace eaglevk::testing {

// Logits [vocab] at the last of `ids` (positions 0..n-1).
std::vector<double> ref_llama3_last_logits(const std::filesystem::path& model_dir, const std::vector<int32_t>& ids);

}  // namespace eaglevk::testing
