#include "loader/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <eaglevk/error.h>

#include "loader/input_path.h"
#include "loader/json_excerpt.h"
#include "loader/output_file.h"

namespace eaglevk::loader {
namespace fs = std::filesystem;
using nlohmann::json;

// The format is little-endian; reading it by memcpy is only right on a little-endian host.
static_assert(std::endian::native == std::endian::little, "safetensors loader assumes little-endian");

namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  size_t size;  // 0: a ggml block type, never valid in a safetensors header
};
constexpr DTypeInfo kDTypes[] = {
    {DType::F32, "F32", 4},   {DType::F16, "F16", 2},   {DType::BF16, "BF16", 2}, {DType::I64, "I64", 8},
    {DType::I32, "I32", 4},   {DType::I16, "I16", 2},   {DType::I8, "I8", 1},     {DType::U8, "U8", 1},
    {DType::BOOL, "BOOL", 1}, {DType::F64, "F64", 8},   {DType::Q4_0, "Q4_0", 0}, {DType::Q4_1, "Q4_1", 0},
    {DType::Q5_0, "Q5_0", 0}, {DType::Q5_1, "Q5_1", 0}, {DType::Q8_0, "Q8_0", 0}, {DType::Q2_K, "Q2_K", 0},
    {DType::Q3_K, "Q3_K", 0}, {DType::Q4_K, "Q4_K", 0}, {DType::Q5_K, "Q5_K", 0}, {DType::Q6_K, "Q6_K", 0},
    {DType::IQ4_NL, "IQ4_NL", 0}, {DType::IQ4_XS, "IQ4_XS", 0}, {DType::IQ1_S, "IQ1_S", 0},
    {DType::IQ1_M, "IQ1_M", 0}, {DType::IQ2_XXS, "IQ2_XXS", 0}, {DType::IQ2_XS, "IQ2_XS", 0},
    {DType::IQ2_S, "IQ2_S", 0}, {DType::IQ3_XXS, "IQ3_XXS", 0}, {DType::IQ3_S, "IQ3_S", 0},
    {DType::MXFP4, "MXFP4", 0},   {DType::F8_E4M3, "F8_E4M3", 1}, {DType::F8_E5M2, "F8_E5M2", 1},
    {DType::FP8_B32, "FP8_B32", 0}, {DType::INT4_PACKED, "INT4", 0}, {DType::INT4_B32, "INT4_B32", 0},
};

const DTypeInfo& info(DType dtype) {
  for (const auto& entry : kDTypes)
    if (entry.dtype == dtype) return entry;
  fail("invalid DType value {}", static_cast<int>(dtype));
}

// numel × element size, or nullopt on overflow (a hostile header can claim any shape).
std::optional<uint64_t> byte_size(const std::vector<int64_t>& shape, DType dtype) {
  uint64_t total = dtype_size(dtype);
  for (int64_t dim : shape) {
    if (dim < 0 || __builtin_mul_overflow(total, static_cast<uint64_t>(dim), &total)) return std::nullopt;
  }
  return total;
}

template <typename T>
T load(const std::byte* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

std::map<std::string, std::string> read_string_map(const json& object, const std::string& where) {
  if (!object.is_object()) fail("{}: metadata is not a JSON object", where);
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : object.items()) {
    if (!value.is_string()) fail("{}: metadata entry '{}' is not a string", where, key);
    out[key] = value.get<std::string>();
  }
  return out;
}

TensorView parse_entry(const std::string& file, const std::string& name, const json& entry,
                       const std::byte* data_section, uint64_t data_size) {
  if (!entry.is_object()) fail("{}: tensor '{}': header entry is not a JSON object", file, name);
  TensorView view;
  view.name = name;
  view.file = file;

  auto dtype_it = entry.find("dtype");
  if (dtype_it == entry.end() || !dtype_it->is_string()) fail("{}: tensor '{}': missing or non-string dtype", file, name);
  auto dtype = parse_dtype(dtype_it->get_ref<const std::string&>());
  if (!dtype) fail("{}: tensor '{}': unknown dtype '{}'", file, name, dtype_it->get<std::string>());
  view.dtype = *dtype;

  auto shape_it = entry.find("shape");
  if (shape_it == entry.end() || !shape_it->is_array()) fail("{}: tensor '{}': missing or non-array shape", file, name);
  for (const auto& dim : *shape_it) {
    if (!dim.is_number_integer()) fail("{}: tensor '{}': shape entry {} is not an integer", file, name, json_excerpt(dim));
    if (dim.is_number_unsigned() ? dim.get<uint64_t>() > uint64_t(INT64_MAX) : dim.get<int64_t>() < 0)
      fail("{}: tensor '{}': shape entry {} is negative or too large", file, name, json_excerpt(dim));
    view.shape.push_back(dim.get<int64_t>());
  }

  auto offsets_it = entry.find("data_offsets");
  if (offsets_it == entry.end() || !offsets_it->is_array() || offsets_it->size() != 2 ||
      !(*offsets_it)[0].is_number_unsigned() || !(*offsets_it)[1].is_number_unsigned())
    fail("{}: tensor '{}': data_offsets must be two non-negative integers", file, name);
  uint64_t begin = (*offsets_it)[0].get<uint64_t>(), end = (*offsets_it)[1].get<uint64_t>();
  if (begin > end) fail("{}: tensor '{}': data_offsets [{}, {}) begin after end", file, name, begin, end);
  if (end > data_size)
    fail("{}: tensor '{}': data_offsets [{}, {}) run past the end of the data section ({} bytes)", file, name, begin,
         end, data_size);

  auto expected = byte_size(view.shape, view.dtype);
  if (!expected || *expected != end - begin)
    fail("{}: tensor '{}': size mismatch: shape [{}] of {} needs {} bytes but data_offsets span {} bytes", file, name,
         fmt::join(view.shape, ", "), dtype_name(view.dtype), expected ? fmt::to_string(*expected) : "too many",
         end - begin);
  view.data = data_section + begin;
  view.bytes = static_cast<size_t>(end - begin);
  return view;
}

// The reference reader's rule (Metadata::validate, then MetadataIncompleteBuffer): taken in
// order of their offsets, each tensor starts where the one before ends, the first at 0, and the
// last ends where the data section does. A hole is bytes no tensor owns (what a tensor named
// twice leaves, the first entry's bytes), an overlap two tensors sharing bytes, trailing bytes a
// file cut wrong or padded: each means the header does not describe the file.
void check_exact_cover(const std::string& file, const std::vector<TensorView>& tensors, const std::byte* data_section,
                       uint64_t data_size) {
  std::vector<const TensorView*> order;
  for (const auto& t : tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) {
    return a->data != b->data ? a->data < b->data : a->bytes < b->bytes;
  });
  uint64_t end = 0;
  const TensorView* prev = nullptr;
  for (const TensorView* t : order) {
    const uint64_t begin = uint64_t(t->data - data_section);
    if (begin < end)
      fail("{}: tensors '{}' and '{}' have overlapping data_offsets ([{}, {}) and [{}, {}))", file, prev->name, t->name,
           uint64_t(prev->data - data_section), end, begin, begin + t->bytes);
    if (begin > end)
      fail("{}: bytes [{}, {}) of the data section belong to no tensor ({}'{}')", file, end, begin,
           prev ? fmt::format("between '{}' and ", prev->name) : "before ", t->name);
    end = begin + t->bytes;
    prev = t;
  }
  if (end != data_size)
    fail("{}: the tensors end at byte {} of the {}-byte data section: the header does not cover the file (cut or "
         "padded)",
         file, end, data_size);
}

// Parses a header, refusing a tensor named twice: nlohmann keeps the last entry (and the
// reference reader's map does the same), so the first entry's bytes would go unread.
json parse_header(std::string_view text, const std::string& file) {
  std::set<std::string> seen;
  std::optional<std::string> repeated;
  json::parser_callback_t note = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::key && depth == 1 && !repeated && parsed.is_string()) {
      const std::string& name = parsed.get_ref<const std::string&>();
      if (!seen.insert(name).second) repeated = name;
    }
    return true;
  };
  json header;
  try {
    header = json::parse(text, note);
  } catch (const json::exception& e) {
    fail("{}: malformed JSON header: {}", file, json_parse_error_text(e));
  }
  if (repeated) fail("{}: the header names tensor '{}' twice", file, *repeated);
  return header;
}

void add_file(Checkpoint& ckpt, MappedFile mapped) {
  ParsedFile parsed = parse_safetensors({mapped.data, mapped.size}, mapped.path.string());
  for (auto& view : parsed.tensors) {
    if (ckpt.tensors.contains(view.name))
      fail("{}: tensor '{}' also appears in {}", mapped.path.string(), view.name, ckpt.tensors.at(view.name).file);
    std::string name = view.name;
    ckpt.tensors.emplace(std::move(name), std::move(view));
  }
  ckpt.metadata.merge(parsed.metadata);
  ckpt.files.push_back(std::move(mapped));
}

std::string read_index_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open for reading", path.string());
  std::error_code ec;
  if (const auto size = fs::file_size(path, ec); !ec && size > kMaxSafetensorsIndexBytes)
    fail("{}: {} bytes is over the {}-byte limit for a safetensors index", path.string(), size,
         kMaxSafetensorsIndexBytes);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void open_sharded(Checkpoint& ckpt, const fs::path& index_path) {
  const std::string index_name = index_path.string();
  const SafetensorsIndex index = parse_safetensors_index(read_index_text(index_path), index_name);
  std::set<std::string> shards;
  for (const auto& [tensor, shard] : index.weight_map) shards.insert(shard);
  for (const auto& shard : shards) {
    fs::path shard_path = index_path.parent_path() / shard;
    std::error_code ec;
    if (!fs::is_regular_file(shard_path, ec)) {
      auto user = std::find_if(index.weight_map.begin(), index.weight_map.end(),
                               [&](auto& kv) { return kv.second == shard; });
      fail("{}: shard '{}' (listed for tensor '{}') does not exist", index_name, shard, user->first);
    }
    add_file(ckpt, MappedFile::open(shard_path));
  }
  for (const auto& [tensor, shard] : index.weight_map) {
    auto it = ckpt.tensors.find(tensor);
    std::string shard_path = (index_path.parent_path() / shard).string();
    if (it == ckpt.tensors.end() || it->second.file != shard_path)
      fail("{}: tensor '{}' is mapped to shard '{}' but that shard does not contain it", index_name, tensor, shard);
  }
  // The index's metadata wins over the shards' own.
  for (const auto& [key, value] : index.metadata) ckpt.metadata[key] = value;
}

}  // namespace

SafetensorsIndex parse_safetensors_index(std::string_view text, const std::string& index_name) {
  if (text.size() > kMaxSafetensorsIndexBytes)
    fail("{}: {} bytes is over the {}-byte limit for a safetensors index", index_name, text.size(),
         kMaxSafetensorsIndexBytes);
  json index;
  try {
    index = json::parse(text);
  } catch (const json::exception& e) {
    fail("{}: malformed JSON: {}", index_name, json_parse_error_text(e));
  }
  if (!index.is_object()) fail("{}: index is not a JSON object", index_name);
  auto map_it = index.find("weight_map");
  if (map_it == index.end() || !map_it->is_object()) fail("{}: missing or non-object \"weight_map\"", index_name);

  SafetensorsIndex out;
  for (const auto& [tensor, shard] : map_it->items()) {
    if (!shard.is_string()) fail("{}: weight_map entry for tensor '{}' is not a string", index_name, tensor);
    const auto& shard_name = shard.get_ref<const std::string&>();
    // Shards are siblings of the index; refuse anything that would reach elsewhere.
    fs::path rel(shard_name);
    if (shard_name.empty() || rel.is_absolute() || shard_name.find("..") != std::string::npos)
      fail("{}: tensor '{}' names an invalid shard path '{}'", index_name, tensor, shard_name);
    out.weight_map[tensor] = shard_name;
  }
  if (auto meta = index.find("metadata"); meta != index.end() && !meta->is_null()) {
    if (!meta->is_object()) fail("{}: \"metadata\" is not a JSON object", index_name);
    // Non-string values (total_size) as their JSON text, bounded: a value may be nested deep.
    for (const auto& [key, value] : meta->items())
      out.metadata[key] = value.is_string() ? value.get<std::string>() : json_text(value, 4096);
  }
  return out;
}

size_t dtype_size(DType dtype) { return info(dtype).size; }
std::string_view dtype_name(DType dtype) { return info(dtype).name; }

std::optional<DType> parse_dtype(std::string_view name) {
  for (const auto& entry : kDTypes)
    if (entry.name == name && entry.size != 0) return entry.dtype;
  return std::nullopt;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t dim : shape) n *= dim;
  return n;
}

MappedFile MappedFile::open(const fs::path& path) {
  // The type first: opening a FIFO for reading would wait for a writer. O_NONBLOCK covers one
  // that appears between the two calls; fstat below refuses it.
  if (const PathKind kind = path_kind(path); kind != PathKind::File && kind != PathKind::Missing)
    fail("{}: not a regular file ({})", path.string(), path_kind_name(kind));
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) fail("{}: file does not exist", path.string());
    fail("{}: cannot open: {}", path.string(), std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("{}: not a regular file", path.string());
  }
  MappedFile out;
  out.path = path;
  out.size = static_cast<size_t>(st.st_size);
  if (out.size > 0) {  // mmap of length 0 is an error; an empty file is reported by the parser
    void* p = ::mmap(nullptr, out.size, PROT_READ, MAP_PRIVATE, fd, 0);
    int err = errno;
    ::close(fd);
    if (p == MAP_FAILED) fail("{}: mmap failed: {}", path.string(), std::strerror(err));
    out.data = static_cast<const std::byte*>(p);
  } else {
    ::close(fd);
  }
  return out;
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path(std::move(other.path)), data(std::exchange(other.data, nullptr)), size(std::exchange(other.size, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data) ::munmap(const_cast<std::byte*>(data), size);
    path = std::move(other.path);
    data = std::exchange(other.data, nullptr);
    size = std::exchange(other.size, 0);
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (data) ::munmap(const_cast<std::byte*>(data), size);
}

ParsedFile parse_safetensors(std::span<const std::byte> bytes, const std::string& file) {
  if (bytes.size() < 8)
    fail("{}: truncated file ({} bytes; a safetensors file starts with an 8-byte header length)", file, bytes.size());
  const uint64_t header_len = load<uint64_t>(bytes.data());
  if (header_len > kMaxSafetensorsHeaderBytes)
    fail("{}: header length {} is over the {}-byte limit (the safetensors format's own)", file, header_len,
         kMaxSafetensorsHeaderBytes);
  if (header_len > bytes.size() - 8)
    fail("{}: header length {} runs past the end of the file ({} bytes)", file, header_len, bytes.size());
  std::string_view text(reinterpret_cast<const char*>(bytes.data() + 8), header_len);
  const json header = parse_header(text, file);
  if (!header.is_object()) fail("{}: JSON header is not an object", file);

  const std::byte* data_section = bytes.data() + 8 + header_len;
  const uint64_t data_size = bytes.size() - 8 - header_len;
  ParsedFile out;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      out.metadata = read_string_map(entry, file);
      continue;
    }
    out.tensors.push_back(parse_entry(file, name, entry, data_section, data_size));
  }
  check_exact_cover(file, out.tensors, data_section, data_size);
  return out;
}

Checkpoint Checkpoint::open(const fs::path& path) {
  Checkpoint ckpt;
  ckpt.path = path;
  std::error_code ec;
  if (!fs::exists(path, ec)) fail("checkpoint path {} does not exist", path.string());
  if (fs::is_directory(path, ec)) {
    fs::path index = path / "model.safetensors.index.json";
    fs::path single = path / "model.safetensors";
    if (fs::exists(index, ec))
      open_sharded(ckpt, index);
    else if (fs::exists(single, ec))
      add_file(ckpt, MappedFile::open(single));
    else
      fail("{}: directory has neither model.safetensors.index.json nor model.safetensors", path.string());
  } else if (path.filename().string().ends_with(".index.json")) {
    open_sharded(ckpt, path);
  } else {
    add_file(ckpt, MappedFile::open(path));
  }
  return ckpt;
}

const TensorView* Checkpoint::find(std::string_view name) const {
  auto it = tensors.find(name);
  return it == tensors.end() ? nullptr : &it->second;
}

const TensorView& Checkpoint::get(std::string_view name) const {
  if (const TensorView* view = find(name)) return *view;
  fail("tensor '{}' not found in checkpoint {}", name, path.string());
}

void Checkpoint::release_pages(const TensorView& t) const {
  const bool mapped = std::any_of(files.begin(), files.end(), [&](const MappedFile& f) {
    return t.data >= f.data && t.data + t.bytes <= f.data + f.size;
  });
  if (!mapped) return;
  const uintptr_t page = uintptr_t(::sysconf(_SC_PAGESIZE));
  uintptr_t begin = (uintptr_t(t.data) + page - 1) / page * page, end = (uintptr_t(t.data) + t.bytes) / page * page;
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);  // advice: errors ignored
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(tensors.size());
  for (const auto& [name, view] : tensors) out.push_back(name);
  return out;
}

float bf16_to_f32(uint16_t bits) { return std::bit_cast<float>(uint32_t(bits) << 16); }

float f16_to_f32(uint16_t bits) {
  const uint32_t sign = uint32_t(bits & 0x8000) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1f;
  const uint32_t mantissa = bits & 0x3ff;
  if (exponent == 0) {  // zero or subnormal: mantissa × 2^-24, exact in f32
    float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));  // inf / nan
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

uint16_t f32_to_bf16(float value) {
  uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x0040);  // quiet nan stays nan
  bits += 0x7fffu + ((bits >> 16) & 1);  // round to nearest even; overflow lands on inf
  return uint16_t(bits >> 16);
}

uint16_t f32_to_f16(float value) {
  uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint16_t sign = uint16_t((bits >> 16) & 0x8000);
  bits &= 0x7fffffffu;
  if (bits > 0x7f800000u) return sign | 0x7e00 | uint16_t((bits >> 13) & 0x3ff);  // nan
  if (bits >= 0x477ff000u) return sign | 0x7c00;  // >= 65520 rounds to inf (and inf itself)
  if (bits < 0x38800000u) {                       // below 2^-14: f16 subnormal (or rounds up to min normal)
    float scaled = std::bit_cast<float>(bits) * 16777216.0f;  // × 2^24, exact
    return sign | uint16_t(std::nearbyint(scaled));           // default rounding mode: nearest even
  }
  return sign | uint16_t((bits - 0x38000000u + 0xfffu + ((bits >> 13) & 1)) >> 13);
}

float float_at(const TensorPart& t, int64_t index) {
  switch (t.dtype) {
    case DType::F32: return load<float>(t.data + 4 * index);
    case DType::BF16: return bf16_to_f32(load<uint16_t>(t.data + 2 * index));
    case DType::F16: return f16_to_f32(load<uint16_t>(t.data + 2 * index));
    default: fail("tensor '{}' is {}, not F32, BF16 or F16", t.name, dtype_name(t.dtype));
  }
}

void to_f32(const TensorView& t, std::span<float> out) {
  const size_t n = static_cast<size_t>(t.numel());
  if (out.size() != n) fail("{}: tensor '{}': to_f32 output holds {} values, tensor has {}", t.file, t.name, out.size(), n);
  if (n == 0) return;  // an empty tensor: memcpy must not see the null data of an empty span (UBSan)
  switch (t.dtype) {
    case DType::F32: std::memcpy(out.data(), t.data, n * 4); return;
    case DType::BF16: for (size_t i = 0; i < n; ++i) out[i] = bf16_to_f32(load<uint16_t>(t.data + 2 * i)); return;
    case DType::F16: for (size_t i = 0; i < n; ++i) out[i] = f16_to_f32(load<uint16_t>(t.data + 2 * i)); return;
    default: fail("{}: tensor '{}': cannot convert dtype {} to f32", t.file, t.name, dtype_name(t.dtype));
  }
}

std::vector<float> to_f32(const TensorView& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  to_f32(t, out);
  return out;
}

std::vector<int64_t> to_i64(const TensorView& t) {
  const size_t n = static_cast<size_t>(t.numel());
  std::vector<int64_t> out(n);
  switch (t.dtype) {
    case DType::I64: for (size_t i = 0; i < n; ++i) out[i] = load<int64_t>(t.data + 8 * i); return out;
    case DType::I32: for (size_t i = 0; i < n; ++i) out[i] = load<int32_t>(t.data + 4 * i); return out;
    default: fail("{}: tensor '{}': cannot convert dtype {} to int64", t.file, t.name, dtype_name(t.dtype));
  }
}

std::vector<int32_t> to_i32(const TensorView& t) {
  std::vector<int64_t> wide = to_i64(t);
  std::vector<int32_t> out(wide.size());
  for (size_t i = 0; i < wide.size(); ++i) {
    if (wide[i] < INT32_MIN || wide[i] > INT32_MAX)
      fail("{}: tensor '{}': element {} = {} does not fit in int32", t.file, t.name, i, wide[i]);
    out[i] = static_cast<int32_t>(wide[i]);
  }
  return out;
}

std::vector<bool> to_bool(const TensorView& t) {
  if (t.dtype != DType::BOOL && t.dtype != DType::U8)
    fail("{}: tensor '{}': cannot convert dtype {} to bool", t.file, t.name, dtype_name(t.dtype));
  std::vector<bool> out(t.bytes);
  for (size_t i = 0; i < t.bytes; ++i) out[i] = t.data[i] != std::byte{0};
  return out;
}

void write_safetensors(const fs::path& path, std::span<const TensorData> tensors,
                       const std::map<std::string, std::string>& metadata) {
  const std::string file = path.string();
  json header = json::object();
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__") fail("{}: cannot write a tensor named '{}'", file, t.name);
    if (header.contains(t.name)) fail("{}: tensor '{}' given twice", file, t.name);
    auto expected = byte_size(t.shape, t.dtype);
    if (!expected || *expected != t.bytes.size())
      fail("{}: tensor '{}': size mismatch: shape [{}] of {} needs {} bytes, {} given", file, t.name,
           fmt::join(t.shape, ", "), dtype_name(t.dtype), expected ? fmt::to_string(*expected) : "too many",
           t.bytes.size());
    header[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + *expected}}};
    offset += *expected;
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  text.resize((text.size() + 7) / 8 * 8, ' ');  // keeps the data section 8-byte aligned in the file

  write_output_file(path, [&](std::ostream& out) {
    const uint64_t header_len = text.size();
    out.write(reinterpret_cast<const char*>(&header_len), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const auto& t : tensors)
      out.write(reinterpret_cast<const char*>(t.bytes.data()), static_cast<std::streamsize>(t.bytes.size()));
  });
}

}  // namespace eaglevk::loader
