#pragma once
// Test material for Llama-4 image prompts from GGUF files: tiny-llama4-vision's text model as
// the GGUF file llama.cpp's converter makes of a vision checkpoint, built at test time (18 MB)
// instead of committed. Its text tower is tiny-llama4's unchanged (shared/models/README.md), so
// the file is assets/gguf/tiny-llama4/tiny-llama4-f16.gguf (converted by llama.cpp) plus what
// the vision checkpoint adds: the six image tokens at the end of the vocabulary (their strings
// from tokenizer.json, type CONTROL as the converter marks added special tokens), their
// token_embd and output rows (bf16 -> f16, rounded to nearest even as torch's cast),
// vocab_size 4102 and the vision checkpoint's chat template. The vision checkpoint's config.json
// goes beside it (what a GGUF Llama-4 file lacks: the chunk size, the NoPE schedule).
// Header-only: loader tests and device tests both use it.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loader/gguf.h"
#include "loader/safetensors.h"

namespace eaglevk::testing {

inline std::filesystem::path write_tiny_llama4_vision_gguf(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  using nlohmann::json;
  const fs::path assets = EAGLEVK_ASSETS, vision_dir = assets / "tiny-llama4-vision";
  const loader::GgufFile base = loader::GgufFile::open(assets / "gguf/tiny-llama4/tiny-llama4-f16.gguf");
  const loader::Checkpoint vision = loader::Checkpoint::open(vision_dir);
  const json tokenizer = json::parse(std::ifstream(vision_dir / "tokenizer.json"));
  const json tokenizer_config = json::parse(std::ifstream(vision_dir / "tokenizer_config.json"));
  constexpr int64_t kTextVocab = 4096, kVocab = 4102;
  std::vector<std::string> added(kVocab - kTextVocab);
  for (const json& t : tokenizer["added_tokens"])
    if (int64_t id = t["id"]; id >= kTextVocab) added.at(size_t(id - kTextVocab)) = t["content"];

  std::vector<std::pair<std::string, loader::GgufValue>> metadata;
  for (const std::string& key : base.header.key_order) {
    loader::GgufValue v = base.header.metadata.at(key);
    if (key == "tokenizer.ggml.tokens")
      for (const std::string& s : added) v.value.push_back(s);
    if (key == "tokenizer.ggml.token_type")
      for (size_t i = 0; i < added.size(); ++i) v.value.push_back(3);  // CONTROL
    if (key == "llama4.vocab_size") v.value = kVocab;
    if (key == "tokenizer.chat_template") v.value = tokenizer_config["chat_template"];
    metadata.emplace_back(key, std::move(v));
  }

  std::vector<std::vector<std::byte>> grown;  // token_embd and output with the new rows
  grown.reserve(2);
  std::vector<loader::GgufTensorData> tensors;
  for (const loader::GgufTensorInfo& info : base.header.tensors) {
    loader::GgufTensorData t{info.name, info.dtype, info.shape(), {base.data(info), size_t(info.bytes)}};
    const char* source = info.name == "token_embd.weight" ? "language_model.model.embed_tokens.weight"
                         : info.name == "output.weight"   ? "language_model.lm_head.weight"
                                                          : nullptr;
    if (source) {
      const std::vector<float> rows = loader::to_f32(vision.get(source));
      const int64_t width = t.shape[1];
      std::vector<std::byte> bytes(t.bytes.begin(), t.bytes.end());
      for (int64_t i = kTextVocab * width; i < kVocab * width; ++i) {
        const uint16_t h = loader::f32_to_f16(rows.at(size_t(i)));
        bytes.push_back(std::byte(h & 0xff));
        bytes.push_back(std::byte(h >> 8));
      }
      grown.push_back(std::move(bytes));
      t.bytes = grown.back();
      t.shape[0] = kVocab;
    }
    tensors.push_back(t);
  }
  fs::create_directories(dir);
  const fs::path out = dir / "tiny-llama4-vision-f16.gguf";
  loader::write_gguf(out, metadata, tensors, base.header.alignment);
  fs::copy_file(vision_dir / "config.json", dir / "config.json", fs::copy_options::overwrite_existing);
  return out;
}

}  // namespace eaglevk::testing
