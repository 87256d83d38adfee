#pragma once
// GGUF files (llama.cpp's format, version 3, little-endian): the metadata key/value pairs and
// the tensor directory, mapped read-only. Every count, string length, dimension, type and
// offset is validated before use, because a hostile file can claim anything: a bad file gives
// an eaglevk::Error naming the file and what is wrong, never a read past the mapping.
//
// Layout: magic "GGUF", u32 version, u64 tensor count, u64 kv count; kv pairs (string key,
// u32 value type, value); tensor infos (string name, u32 n_dims, u64 ne[n_dims], u32 ggml
// type, u64 offset); padding to `general.alignment` (default 32); the data section. Strings
// are u64 length + bytes (no terminator). ne[0] is the innermost (contiguous) dimension, so a
// [rows, cols] matrix is stored with ne = {cols, rows}.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "loader/safetensors.h"

namespace eaglevk::loader {

enum class GgufType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7, STRING = 8, ARRAY = 9,
  U64 = 10, I64 = 11, F64 = 12,
};
std::string_view gguf_type_name(GgufType type);  // "UINT32", "[INT32]" style names are built by callers

// One metadata value. Scalars and arrays alike are held as JSON (numbers, booleans, strings,
// arrays of those) next to the GGUF type they were stored with.
struct GgufValue {
  GgufType type = GgufType::U8;
  GgufType element_type = GgufType::U8;  // for ARRAY
  nlohmann::json value;
};

struct GgufTensorInfo {
  std::string name;
  DType dtype = DType::F32;      // the ggml type; unsupported ggml types are a load error
  std::vector<uint64_t> ne;      // ggml order: ne[0] innermost
  uint64_t offset = 0;           // from the start of the data section (validated, aligned)
  uint64_t bytes = 0;            // validated to lie inside the file
  // Shape in row-major (safetensors / PyTorch) order: ne reversed.
  std::vector<int64_t> shape() const;
};

// The parsed header of a GGUF image in memory. Tensor data pointers point into that memory.
struct GgufHeader {
  uint32_t version = 0;
  uint64_t alignment = 32;
  uint64_t data_offset = 0;                 // start of the data section in the file
  std::vector<std::string> key_order;       // keys in file order
  std::map<std::string, GgufValue, std::less<>> metadata;
  std::vector<GgufTensorInfo> tensors;      // in file order; names are unique (checked)

  const GgufValue* find(std::string_view key) const;
  const GgufTensorInfo* find_tensor(std::string_view name) const;

  // Typed accessors: nullopt when the key is absent; an Error naming the key and `label` when it
  // has an incompatible type (ints of any width and sign convert when the value fits).
  std::optional<int64_t> get_int(std::string_view key) const;
  std::optional<double> get_float(std::string_view key) const;  // F32, F64, or any integer
  std::optional<bool> get_bool(std::string_view key) const;
  std::optional<std::string> get_string(std::string_view key) const;
  std::optional<std::vector<int64_t>> get_int_array(std::string_view key) const;
  std::optional<std::vector<double>> get_float_array(std::string_view key) const;
  std::optional<std::vector<std::string>> get_string_array(std::string_view key) const;

  std::string label;  // the file, for error messages
};

// Parses and validates a whole GGUF image (the fuzz target's entry point).
GgufHeader parse_gguf(std::span<const std::byte> bytes, const std::string& label);

// An opened GGUF file: the mapping plus its header.
struct GgufFile {
  static GgufFile open(const std::filesystem::path& path);
  MappedFile file;
  GgufHeader header;
  const std::byte* data(const GgufTensorInfo& t) const { return file.data + header.data_offset + t.offset; }
  // The tensor as a TensorView (row-major shape, name as in the file).
  TensorView view(const GgufTensorInfo& t) const;
};

// True when the file starts with the GGUF magic (used to tell a .gguf from a folder or a
// safetensors file without trusting the extension).
bool is_gguf_file(const std::filesystem::path& path);

// Writes a GGUF v3 file (tests, the synthetic-checkpoint generator). Tensors are written in the
// given order, each at the next multiple of `alignment`; `shape` is row-major (reversed to ne).
struct GgufTensorData {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::span<const std::byte> bytes;
  // With `bytes` empty: the size of data a write_gguf callback streams (files larger than memory).
  uint64_t streamed_bytes = 0;
  uint64_t size() const { return bytes.empty() ? streamed_bytes : bytes.size(); }
};
void write_gguf(const std::filesystem::path& path, const std::vector<std::pair<std::string, GgufValue>>& metadata,
                std::span<const GgufTensorData> tensors, uint64_t alignment = 32);
// The same, each tensor's data written by write_data(index, out): exactly size() bytes (checked).
void write_gguf(const std::filesystem::path& path, const std::vector<std::pair<std::string, GgufValue>>& metadata,
                std::span<const GgufTensorData> tensors, uint64_t alignment,
                const std::function<void(size_t, std::ostream&)>& write_data);

}  // namespace eaglevk::loader
