#pragma once
// Test material: llama-quantize's MXFP4_MOE file of tiny-llama4 (the routed experts in MXFP4,
// every other matrix in Q8_0), rebuilt at test time by eaglevk's quantizer from the vendored
// F16 file rather than committed (8 MB). llama-quantize's own file is described by
// assets/gguf/tiny-llama4/ref/tiny-llama4-mxfp4_moe.blocks.json (each tensor's type, size and
// FNV-1a of its bytes): a rebuilt tensor that differs from it in one byte fails
// QuantFiles.Mxfp4MoeMatchesLlamaQuantize, and llama.cpp's outputs on that file
// (tiny-llama4-mxfp4_moe.ref.json) are the reference for the model on the rebuilt one.
// Header-only: loader tests and device tests both use it.
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "loader/gguf.h"
#include "loader/quant.h"
#include "support/quantize.h"

namespace eaglevk::testing {

// llama-quantize's MXFP4_MOE rule (llama-quant.cpp): a weight with more than one expert (ne[2] >
// 1) becomes MXFP4, any other F16 matrix Q8_0; F32 tensors (norms, routers, rope factors) stay.
inline loader::DType mxfp4_moe_type(const loader::GgufTensorInfo& t) {
  if (t.dtype != loader::DType::F16) return t.dtype;
  return t.ne.size() > 2 && t.ne[2] > 1 ? loader::DType::MXFP4 : loader::DType::Q8_0;
}

inline uint64_t fnv1a_bytes(std::span<const std::byte> bytes) {
  uint64_t h = 1469598103934665603ull;
  for (std::byte b : bytes) {
    h ^= uint8_t(b);
    h *= 1099511628211ull;
  }
  return h;
}

struct RebuiltTensor {
  std::string name;
  loader::DType dtype;
  std::vector<std::byte> bytes;
};

// The tensors of the MXFP4_MOE file in the F16 file's order.
inline std::vector<RebuiltTensor> rebuild_tiny_llama4_mxfp4_moe(const loader::GgufFile& f16) {
  std::vector<RebuiltTensor> out;
  for (const loader::GgufTensorInfo& t : f16.header.tensors) {
    RebuiltTensor r{t.name, mxfp4_moe_type(t), {}};
    if (r.dtype == t.dtype) {
      const std::byte* p = f16.data(t);
      r.bytes.assign(p, p + t.bytes);
    } else {
      std::vector<float> x(t.bytes / 2);
      loader::dequantize(loader::DType::F16, f16.data(t), x);
      testing::quantize(r.dtype, x, r.bytes);
    }
    out.push_back(std::move(r));
  }
  return out;
}

// Writes the rebuilt file as `dir`/tiny-llama4-mxfp4_moe.gguf (the F16 file's metadata,
// general.file_type 38 as llama-quantize sets it) and returns its path.
inline std::filesystem::path write_tiny_llama4_mxfp4_moe(const std::filesystem::path& dir) {
  const loader::GgufFile f16 =
      loader::GgufFile::open(std::filesystem::path(EAGLEVK_ASSETS) / "gguf/tiny-llama4/tiny-llama4-f16.gguf");
  const std::vector<RebuiltTensor> rebuilt = rebuild_tiny_llama4_mxfp4_moe(f16);
  std::vector<std::pair<std::string, loader::GgufValue>> metadata;
  for (const std::string& key : f16.header.key_order) {
    loader::GgufValue v = f16.header.metadata.at(key);
    if (key == "general.file_type") v.value = 38;  // LLAMA_FTYPE_MOSTLY_MXFP4_MOE
    metadata.emplace_back(key, std::move(v));
  }
  std::vector<loader::GgufTensorData> tensors;
  for (size_t i = 0; i < rebuilt.size(); ++i)
    tensors.push_back({rebuilt[i].name, rebuilt[i].dtype, f16.header.tensors[i].shape(), rebuilt[i].bytes});
  std::filesystem::create_directories(dir);
  const std::filesystem::path out = dir / "tiny-llama4-mxfp4_moe.gguf";
  loader::write_gguf(out, metadata, tensors, f16.header.alignment);
  return out;
}

}  // namespace eaglevk::testing
