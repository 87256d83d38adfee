#pragma once
// Random-weight checkpoints with the per-tensor shapes of real models and only a few layers,
// written as Hugging Face publishes them: config.json plus sharded safetensors with
// model.safetensors.index.json. They make real widths, vocabularies and tensor sizes testable
// without committing gigabytes: tests write them at run time, `eaglevk-synth` writes them for
// benchmarks. Weights are uniform in +-1/sqrt(fan_in) (norm weights near 1), seeded by tensor
// name, so a tensor's bytes do not depend on how the checkpoint is sharded.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace eaglevk::testing {

enum class SynthKind {
  Llama3_8B,          // Llama-3.1-8B: hidden 4096, 32/8 heads, MLP 14336, vocab 128256, untied
  Llama4_Scout,       // Llama-4-Scout: hidden 5120, 40/8 heads, 16 experts (MLP 8192), dense MLP
                      // 16384, vocab 202048, QK norm, chunk 8192, NoPE every 4th layer
  Eagle3_8B,          // EAGLE-3 head for the 8B (original format, 32000-token draft vocab, d2t/t2d)
  Eagle3_Scout,       // EAGLE-3 head for Scout (speculators format, full 202048-token vocabulary)
  Qwen3_Tiny,         // Qwen3ForCausalLM, tiny: hidden 128, 4/2 heads of 64 (not hidden / heads), MLP
                      // 256, vocab 4096, per-head q/k norms, rope theta 1e6; tied when tie_embeddings
  Eagle3_Qwen3_Tiny,  // EAGLE-3 head for it (original format, a Llama layer, full vocabulary)
};

struct SynthOptions {
  uint32_t layers = 2;                   // target layers (drafts always have one)
  // Llama-4: every moe_step-th layer is a mixture of experts (Scout 1, Maverick 2); the others
  // are dense with intermediate_size_mlp.
  uint32_t moe_step = 1;
  uint64_t shard_bytes = 2ull << 30;     // a shard closes once it holds this much
  uint64_t seed = 1;
  // Copied beside the weights when set: tokenizer.json and tokenizer_config.json.
  std::filesystem::path tokenizer_dir;
  // Drafts: the three target layers tapped (stored in the format's own convention).
  std::vector<int> aux_layers;
  // Qwen3_Tiny: no lm_head.weight, tie_word_embeddings true (the output is embed_tokens).
  bool tie_embeddings = false;
};

// Parses "llama3-8b", "llama4-scout", "eagle3-8b", "eagle3-scout", "qwen3-tiny",
// "eagle3-qwen3-tiny"; false for anything else.
bool parse_synth_kind(const std::string& name, SynthKind& kind);
const char* synth_kind_name(SynthKind kind);

struct SynthTensor {
  std::string name;
  std::string dtype;            // safetensors dtype: BF16, I64, BOOL
  std::vector<int64_t> shape;
  uint64_t bytes() const;
};

// What write_synthetic_checkpoint writes, without writing it.
std::vector<SynthTensor> synthetic_tensors(SynthKind kind, const SynthOptions& options);
// Writes config.json, the shards and the index into `dir` (created). Returns the bytes of
// tensor data written.
uint64_t write_synthetic_checkpoint(SynthKind kind, const std::filesystem::path& dir, const SynthOptions& options);

}  // namespace eaglevk::testing
