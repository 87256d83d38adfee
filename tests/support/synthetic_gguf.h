#pragma once
// A random-weight F16 GGUF with the Llama-3.1-8B shape (or a small shape for dry runs) and a
// real tokenizer, laid out as llama.cpp's converter lays a Llama out (token_embd, blk.N.attn_q
// ..., rope_freqs), so that eaglevk and llama.cpp can be timed on the same file. Not a model:
// its text is noise. Written as a stream: the 8B file (16 GB) never sits in memory.
#include <cstdint>
#include <filesystem>

namespace eaglevk::testing {

struct SynthGgufOptions {
  uint32_t layers = 32;
  // Full: hidden 4096, 32/8 heads of 128, MLP 14336. Small: hidden 256, 4/2 heads of 64,
  // MLP 512, for a CPU device's dry run; the vocabulary is the tokenizer's either way.
  bool small = false;
  uint64_t seed = 1;
  // tokenizer.json (and tokenizer_config.json's chat_template, when there) of a Llama-3
  // byte-level BPE tokenizer.
  std::filesystem::path tokenizer_dir;
};

// Writes the file; returns the bytes of tensor data.
uint64_t write_synthetic_llama3_gguf(const std::filesystem::path& path, const SynthGgufOptions& options);

}  // namespace eaglevk::testing
