#pragma once
// Safetensors checkpoints: one file or a sharded set (model.safetensors.index.json), mapped
// read-only so weights go from the page cache to the GPU upload without a host copy. Every
// header is validated before any tensor is handed out, because a bad offset would otherwise
// read past the mapping.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <ostream>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace eaglevk::loader {

// Element types of checkpoint tensors. The safetensors ones come first; the block-quantized
// ggml formats (Q4_0 ... Q6_K, IQ1_S ... IQ4_XS, MXFP4) occur only in GGUF files, where loader/quant.h gives their
// geometry (dtype_size() is 0 for them: a block type has no per-element size). The FP8 types
// F8_E4M3 and F8_E5M2 are safetensors element types; FP8_B32 is eaglevk's own block of 32
// E4M3 codes with their f32 scale, made from FP8 checkpoints at upload (loader/fp8.h).
// INT4_PACKED marks a 4-bit integer weight of a GPTQ, AWQ or compressed-tensors file (its
// parts in TensorView::int4), INT4_B32 the blocks eaglevk makes of it at upload (loader/int4.h).
enum class DType { F32, F16, BF16, I64, I32, I16, I8, U8, BOOL, F64, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS,
                   IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, MXFP4, F8_E4M3, F8_E5M2, FP8_B32,
                   INT4_PACKED, INT4_B32 };

size_t dtype_size(DType dtype);
// The spelling the safetensors header uses ("F32", "BF16", "BOOL", ...).
std::string_view dtype_name(DType dtype);
// std::nullopt for a name that is not one of the safetensors types.
std::optional<DType> parse_dtype(std::string_view name);

// A tensor's bytes and shape: one part of a weight stored in several tensors.
struct TensorPart {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const std::byte* data = nullptr;
  size_t bytes = 0;
};

// Element `index` of a tensor of F32, BF16 or F16 as f32 (scales); fails naming it otherwise.
float float_at(const TensorPart& t, int64_t index);

// The scale tensor of an FP8 weight (loader/fp8.h pairs them): weight element (r, c) is
// e4m3(code) * scale[r / block_rows][c / block_cols], the scale read as f32.
struct WeightScale {
  TensorPart tensor;  // F32, BF16 or F16
  int64_t block_rows = 0, block_cols = 0;
};

// The parts of a 4-bit integer weight (loader/int4.h gathers them): element (r, c) of the
// [rows, cols] weight is (q - zero) * scale, q, zero and scale as the layout stores them for
// output r, input c and its group c / group.
struct Int4Parts {
  enum class Layout { CompressedTensors, Gptq, Awq };
  Layout layout = Layout::CompressedTensors;
  TensorPart packed, scales;
  std::optional<TensorPart> zeros;  // none: symmetric, every zero 8
  int64_t group = 0;
  int zero_offset = 0;  // GPTQ's original format stores zero - 1: 1
};

// One tensor inside a mapping. `data` is not aligned in general (the header length decides the
// data section's start), so read it with memcpy or the converters below.
struct TensorView {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const std::byte* data = nullptr;
  size_t bytes = 0;
  std::string file;  // the file the tensor lives in, for error messages
  // Non-zero when llama.cpp's converter reordered the rows of this q/k projection for its
  // rope pairing (GGUF `llama` files): the head count it used. Uploads put the rows back in
  // Hugging Face order (models/weight_loading.cpp).
  uint32_t rope_permuted_heads = 0;
  // An F8_E4M3 weight's scale; uploads turn codes and scale into FP8_B32 blocks.
  std::optional<WeightScale> scale;
  // An INT4_PACKED weight's parts; uploads turn them into INT4_B32 blocks.
  std::optional<Int4Parts> int4;

  int64_t numel() const;
  std::span<const std::byte> span() const { return {data, bytes}; }
  TensorPart part() const { return {name, dtype, shape, data, bytes}; }
};

// A read-only memory mapping of one file; owns it, move-only.
struct MappedFile {
  std::filesystem::path path;
  const std::byte* data = nullptr;
  size_t size = 0;

  static MappedFile open(const std::filesystem::path& path);
  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();
};

// An opened checkpoint. Owns the mappings; TensorView pointers stay valid for its lifetime,
// across moves too (moving does not remap).
struct Checkpoint {
  // `path` is a .safetensors file, a model.safetensors.index.json, or a directory holding one of
  // model.safetensors.index.json (preferred) or model.safetensors.
  static Checkpoint open(const std::filesystem::path& path);
  Checkpoint() = default;
  Checkpoint(Checkpoint&&) = default;
  Checkpoint& operator=(Checkpoint&&) = default;
  Checkpoint(const Checkpoint&) = delete;
  Checkpoint& operator=(const Checkpoint&) = delete;

  const TensorView* find(std::string_view name) const;
  // Throws eaglevk::Error naming the tensor and the checkpoint when it is absent.
  const TensorView& get(std::string_view name) const;
  std::vector<std::string> names() const;  // sorted
  size_t size() const { return tensors.size(); }
  // Drops the tensor's pages from the process's resident set (whole pages inside one of
  // `files` only; a view of memory this checkpoint did not map is left alone). The mappings are
  // read-only and file-backed, so a later read faults the bytes back in from the file. Loaders
  // call this once a tensor is copied out: a load's resident memory stays near the staging
  // buffer instead of growing to the whole checkpoint.
  void release_pages(const TensorView& tensor) const;

  std::filesystem::path path;  // what open() was given
  // The header's "__metadata__"; for a sharded checkpoint the union over the shards plus the
  // index's "metadata" (index entries win; non-string index values are kept as JSON text).
  std::map<std::string, std::string> metadata;
  std::vector<MappedFile> files;
  std::map<std::string, TensorView, std::less<>> tensors;
};

// The reference implementation refuses headers over 100,000,000 bytes (its MAX_HEADER_SIZE); so
// do we, before parsing, whatever the length field says.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;
// model.safetensors.index.json lists one line per tensor: ~100 KB for the largest models.
inline constexpr size_t kMaxSafetensorsIndexBytes = size_t(64) << 20;

// model.safetensors.index.json, parsed and checked without touching the shards (exposed for
// tests and the fuzzer): every shard name is a plain sibling file name.
struct SafetensorsIndex {
  std::map<std::string, std::string> weight_map;  // tensor -> shard file name
  std::map<std::string, std::string> metadata;    // non-string values as their (bounded) JSON text
};
SafetensorsIndex parse_safetensors_index(std::string_view text, const std::string& index_label);

// Parses and validates one safetensors file that is already in memory (exposed for tests and
// for files that are not on disk). Views point into `bytes`; `file_label` names it in errors.
struct ParsedFile {
  std::map<std::string, std::string> metadata;
  std::vector<TensorView> tensors;
};
ParsedFile parse_safetensors(std::span<const std::byte> bytes, const std::string& file_label);

// Scalar conversions. bf16/f16 are exact (every value, subnormals, inf and nan included);
// f32_to_bf16 and f32_to_f16 round to nearest even and keep nan a nan.
float bf16_to_f32(uint16_t bits);
float f16_to_f32(uint16_t bits);
uint16_t f32_to_bf16(float value);
uint16_t f32_to_f16(float value);

// Tensor conversions to host vectors; each throws naming the tensor when its dtype does not fit.
std::vector<float> to_f32(const TensorView& tensor);               // from F32, F16, BF16
void to_f32(const TensorView& tensor, std::span<float> out);       // out.size() == numel
std::vector<int64_t> to_i64(const TensorView& tensor);             // from I64, I32
std::vector<int32_t> to_i32(const TensorView& tensor);             // from I64 (range-checked), I32
std::vector<bool> to_bool(const TensorView& tensor);               // from BOOL, U8 (non-zero = true)

// Writes a single-file checkpoint (header padded to 8 bytes like the reference writer) with
// loader/output_file.h: atomically over a regular file, in place into a FIFO or a device.
struct TensorData {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::span<const std::byte> bytes;
};
void write_safetensors(const std::filesystem::path& path, std::span<const TensorData> tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace eaglevk::loader
