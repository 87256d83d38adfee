#include "loader/gguf.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <eaglevk/error.h>

#include "loader/input_path.h"
#include "loader/json_excerpt.h"
#include "loader/output_file.h"
#include "loader/quant.h"

namespace eaglevk::loader {
namespace fs = std::filesystem;
using nlohmann::json;

// Read and written by memcpy, which is only right on a little-endian host.
static_assert(std::endian::native == std::endian::little, "GGUF loader assumes little-endian");

namespace {

constexpr uint32_t kVersion = 3;
constexpr uint64_t kDefaultAlignment = 32;
// Keys and tensor names are short in practice (llama.cpp caps tensor names at 63 bytes); a
// bound keeps a corrupt length from being taken for a 4 GiB name that happens to fit the file.
constexpr uint64_t kMaxNameLength = 65535;
constexpr uint32_t kMaxDims = 4;  // GGML_MAX_DIMS
// The smallest encodings: a kv pair is a key (8-byte length, at least 1 byte), a type and a
// 1-byte value; a tensor info is a name, n_dims, one ne, a type and an offset. Counts are
// checked against these before anything is reserved.
constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 1 + 4 + 8 + 4 + 8;
// Those checks bound a count by the file size only, and a parsed element takes more memory
// than its encoding (16 bytes of JSON per UINT8), so a large file could still claim a huge
// array. The biggest real vocabularies are ~260k tokens; 2^24 elements leaves a wide margin.
constexpr uint64_t kMaxArrayCount = uint64_t(1) << 24;
// Vectors are reserved up to this many entries; beyond it they grow with what is actually read.
constexpr uint64_t kMaxReserve = uint64_t(1) << 16;

// ggml's type ids, with the DType each supported one maps to. The ids not listed (4, 5, 31-33,
// 36-38) were removed from ggml or never assigned; they are reported as unknown.
struct GgmlType {
  uint32_t id;
  std::string_view name;
  std::optional<DType> dtype;  // nullopt: a real ggml type eaglevk has no kernels for
};
constexpr GgmlType kGgmlTypes[] = {
    {0, "F32", DType::F32},        {1, "F16", DType::F16},         {2, "Q4_0", DType::Q4_0},
    {3, "Q4_1", DType::Q4_1},      {6, "Q5_0", DType::Q5_0},       {7, "Q5_1", DType::Q5_1},
    {8, "Q8_0", DType::Q8_0},      {9, "Q8_1", std::nullopt},      {10, "Q2_K", DType::Q2_K},
    {11, "Q3_K", DType::Q3_K},     {12, "Q4_K", DType::Q4_K},      {13, "Q5_K", DType::Q5_K},
    {14, "Q6_K", DType::Q6_K},     {15, "Q8_K", std::nullopt},     {16, "IQ2_XXS", DType::IQ2_XXS},
    {17, "IQ2_XS", DType::IQ2_XS},  {18, "IQ3_XXS", DType::IQ3_XXS},  {19, "IQ1_S", DType::IQ1_S},
    {20, "IQ4_NL", DType::IQ4_NL}, {21, "IQ3_S", DType::IQ3_S},    {22, "IQ2_S", DType::IQ2_S},
    {23, "IQ4_XS", DType::IQ4_XS}, {24, "I8", DType::I8},          {25, "I16", DType::I16},
    {26, "I32", DType::I32},       {27, "I64", DType::I64},        {28, "F64", DType::F64},
    {29, "IQ1_M", DType::IQ1_M},   {30, "BF16", DType::BF16},      {34, "TQ1_0", std::nullopt},
    {35, "TQ2_0", std::nullopt},   {39, "MXFP4", DType::MXFP4},     {40, "NVFP4", std::nullopt},
};

const GgmlType* ggml_type(uint32_t id) {
  for (const auto& entry : kGgmlTypes)
    if (entry.id == id) return &entry;
  return nullptr;
}

std::optional<uint32_t> ggml_id(DType dtype) {
  for (const auto& entry : kGgmlTypes)
    if (entry.dtype == dtype) return entry.id;
  return std::nullopt;  // U8 and BOOL: safetensors types with no ggml counterpart
}

std::string supported_type_names() {
  std::vector<std::string_view> names;
  for (const auto& entry : kGgmlTypes)
    if (entry.dtype) names.push_back(entry.name);
  return fmt::format("{}", fmt::join(names, ", "));
}

bool is_integer(GgufType type) {
  switch (type) {
    case GgufType::U8: case GgufType::I8: case GgufType::U16: case GgufType::I16:
    case GgufType::U32: case GgufType::I32: case GgufType::U64: case GgufType::I64: return true;
    default: return false;
  }
}

bool is_float(GgufType type) { return type == GgufType::F32 || type == GgufType::F64; }

// Bytes of the smallest value of `type` (an array: element type and count, no elements).
uint64_t min_value_bytes(GgufType type) {
  switch (type) {
    case GgufType::U8: case GgufType::I8: case GgufType::BOOL: return 1;
    case GgufType::U16: case GgufType::I16: return 2;
    case GgufType::U32: case GgufType::I32: case GgufType::F32: return 4;
    case GgufType::U64: case GgufType::I64: case GgufType::F64: case GgufType::STRING: return 8;
    case GgufType::ARRAY: return 4 + 8;
  }
  return 1;
}

std::string type_label(const GgufValue& value) {
  if (value.type != GgufType::ARRAY) return std::string(gguf_type_name(value.type));
  return fmt::format("[{}]", gguf_type_name(value.element_type));
}

// A cursor over the image. Every read checks the bytes left first; `where` (the key or tensor
// being read) makes a truncation message say what was cut off.
struct Reader {
  const std::byte* data;
  uint64_t size;
  const std::string& label;
  uint64_t pos = 0;
  std::string where;

  uint64_t remaining() const { return size - pos; }

  void need(uint64_t n, std::string_view what) const {
    if (n > remaining())
      fail("{}: {}{} at offset {} needs {} bytes but only {} remain (truncated or corrupt file)", label, where,
           what, pos, n, remaining());
  }

  template <typename T>
  T read(std::string_view what) {
    need(sizeof(T), what);
    T value;
    std::memcpy(&value, data + pos, sizeof(T));
    pos += sizeof(T);
    return value;
  }

  std::string read_string(std::string_view what, uint64_t max_length) {
    const uint64_t length = read<uint64_t>(what);
    if (length > max_length) fail("{}: {}{} has length {} (at most {} allowed)", label, where, what, length, max_length);
    need(length, what);
    std::string out(reinterpret_cast<const char*>(data + pos), static_cast<size_t>(length));
    pos += length;
    return out;
  }
};

GgufType read_type(Reader& r, std::string_view what) {
  const uint32_t raw = r.read<uint32_t>(what);
  if (raw > static_cast<uint32_t>(GgufType::F64)) fail("{}: {}unknown value type id {}", r.label, r.where, raw);
  return static_cast<GgufType>(raw);
}

json read_scalar(Reader& r, GgufType type) {
  switch (type) {
    case GgufType::U8: return r.read<uint8_t>("UINT8 value");
    case GgufType::I8: return r.read<int8_t>("INT8 value");
    case GgufType::U16: return r.read<uint16_t>("UINT16 value");
    case GgufType::I16: return r.read<int16_t>("INT16 value");
    case GgufType::U32: return r.read<uint32_t>("UINT32 value");
    case GgufType::I32: return r.read<int32_t>("INT32 value");
    case GgufType::U64: return r.read<uint64_t>("UINT64 value");
    case GgufType::I64: return r.read<int64_t>("INT64 value");
    case GgufType::F32: return static_cast<double>(r.read<float>("FLOAT32 value"));
    case GgufType::F64: return r.read<double>("FLOAT64 value");
    case GgufType::BOOL: {
      const uint8_t raw = r.read<uint8_t>("BOOL value");
      if (raw > 1) fail("{}: {}BOOL value {} at offset {} is neither 0 nor 1", r.label, r.where, raw, r.pos - 1);
      return raw == 1;
    }
    case GgufType::STRING: return r.read_string("STRING value", std::numeric_limits<uint64_t>::max());
    case GgufType::ARRAY: break;
  }
  fail("{}: {}an array where a scalar was expected", r.label, r.where);
}

GgufValue read_value(Reader& r, GgufType type) {
  GgufValue out;
  out.type = type;
  if (type != GgufType::ARRAY) {
    out.value = read_scalar(r, type);
    return out;
  }
  out.element_type = read_type(r, "array element type");
  // The spec allows arrays of arrays; llama.cpp's files never contain them and nothing here
  // would read one, so they are refused rather than half-supported.
  if (out.element_type == GgufType::ARRAY) fail("{}: {}nested arrays are not supported", r.label, r.where);
  const uint64_t count = r.read<uint64_t>("array count");
  const uint64_t each = min_value_bytes(out.element_type);
  if (count > r.remaining() / each)
    fail("{}: {}array of {} {} elements cannot fit in the {} bytes left in the file", r.label, r.where, count,
         gguf_type_name(out.element_type), r.remaining());
  if (count > kMaxArrayCount)
    fail("{}: {}array of {} elements is longer than the {} eaglevk accepts", r.label, r.where, count, kMaxArrayCount);
  out.value = json::array();
  auto& elements = out.value.get_ref<json::array_t&>();
  elements.reserve(static_cast<size_t>(std::min(count, kMaxReserve)));
  for (uint64_t i = 0; i < count; ++i) elements.push_back(read_scalar(r, out.element_type));
  return out;
}

void read_metadata(Reader& r, GgufHeader& h, uint64_t kv_count) {
  h.key_order.reserve(static_cast<size_t>(std::min(kv_count, kMaxReserve)));
  for (uint64_t i = 0; i < kv_count; ++i) {
    r.where = fmt::format("metadata pair {}: ", i);
    std::string key = r.read_string("key", kMaxNameLength);
    if (key.empty()) fail("{}: metadata pair {} has an empty key", h.label, i);
    if (h.metadata.contains(key)) fail("{}: duplicate metadata key '{}'", h.label, key);
    r.where = fmt::format("key '{}': ", key);
    const GgufType type = read_type(r, "value type");
    GgufValue value = read_value(r, type);
    h.key_order.push_back(key);
    h.metadata.emplace(std::move(key), std::move(value));
  }
  r.where.clear();
}

uint64_t read_alignment(const GgufHeader& h) {
  const GgufValue* value = h.find("general.alignment");
  if (!value) return kDefaultAlignment;
  if (value->type != GgufType::U32)
    fail("{}: general.alignment has type {} (it must be UINT32)", h.label, type_label(*value));
  const uint64_t alignment = value->value.get<uint64_t>();
  if (!std::has_single_bit(alignment))
    fail("{}: general.alignment is {} (it must be a nonzero power of two)", h.label, alignment);
  return alignment;
}

GgufTensorInfo read_tensor_info(Reader& r, const std::string& label, uint64_t index) {
  GgufTensorInfo t;
  r.where = fmt::format("tensor info {}: ", index);
  t.name = r.read_string("tensor name", kMaxNameLength);
  if (t.name.empty()) fail("{}: tensor info {} has an empty name", label, index);
  r.where = fmt::format("tensor '{}': ", t.name);
  const uint32_t n_dims = r.read<uint32_t>("n_dims");
  if (n_dims < 1 || n_dims > kMaxDims)
    fail("{}: tensor '{}' has n_dims = {} (1 to {} allowed)", label, t.name, n_dims, kMaxDims);
  uint64_t elements = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    const uint64_t dim = r.read<uint64_t>("ne");
    // ggml allows empty tensors, but no model has one and a zero would only hide a corrupt file.
    if (dim == 0) fail("{}: tensor '{}' has ne[{}] = 0", label, t.name, d);
    // Element counts are int64 in ggml and in TensorView, so the product must fit there.
    if (__builtin_mul_overflow(elements, dim, &elements) || elements > uint64_t(INT64_MAX))
      fail("{}: tensor '{}': element count overflows 64 bits (ne[{}] = {})", label, t.name, d, dim);
    t.ne.push_back(dim);
  }
  const uint32_t type_id = r.read<uint32_t>("ggml type");
  const GgmlType* type = ggml_type(type_id);
  if (!type)
    fail("{}: tensor '{}' has unknown ggml type id {} (supported: {})", label, t.name, type_id, supported_type_names());
  if (!type->dtype)
    fail("{}: tensor '{}' has ggml type {}, which eaglevk does not support (supported: {})", label, t.name,
         type->name, supported_type_names());
  t.dtype = *type->dtype;
  t.offset = r.read<uint64_t>("data offset");

  const uint32_t block = block_elements(t.dtype);
  if (t.ne[0] % block != 0)
    fail("{}: tensor '{}': ne[0] = {} is not a multiple of the {} block size {}", label, t.name, t.ne[0],
         type->name, block);
  auto bytes = quantized_bytes(t.dtype, t.ne[0], elements / t.ne[0]);
  if (!bytes) fail("{}: tensor '{}': byte size overflows 64 bits", label, t.name);
  t.bytes = *bytes;
  return t;
}

// Every tensor lies inside the data section, on the alignment, and no two overlap.
void check_tensor_data(const GgufHeader& h, uint64_t file_size) {
  const uint64_t data_size = file_size > h.data_offset ? file_size - h.data_offset : 0;
  for (const auto& t : h.tensors) {
    if (t.offset % h.alignment != 0)
      fail("{}: tensor '{}' has data offset {}, not a multiple of the alignment {}", h.label, t.name, t.offset,
           h.alignment);
    if (t.offset > data_size || t.bytes > data_size - t.offset) {
      uint64_t begin, end;
      if (__builtin_add_overflow(h.data_offset, t.offset, &begin) || __builtin_add_overflow(begin, t.bytes, &end))
        fail("{}: tensor '{}' data offset {} (+{} bytes) lies past the end of the file (size {})", h.label, t.name,
             t.offset, t.bytes, file_size);
      fail("{}: tensor '{}' data [{}, {}) lies past the end of the file (size {})", h.label, t.name, begin, end,
           file_size);
    }
  }
  std::vector<const GgufTensorInfo*> order;
  for (const auto& t : h.tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < order.size(); ++i)
    if (order[i - 1]->offset + order[i - 1]->bytes > order[i]->offset)
      fail("{}: tensors '{}' and '{}' have overlapping data", h.label, order[i - 1]->name, order[i]->name);
}

// Integer values of any width and sign as int64, when they fit.
int64_t to_int64(const json& value, const std::string& label, std::string_view key) {
  if (value.is_number_unsigned()) {
    const uint64_t u = value.get<uint64_t>();
    if (u > uint64_t(INT64_MAX)) fail("{}: metadata key '{}' value {} does not fit in int64", label, key, u);
    return static_cast<int64_t>(u);
  }
  return value.get<int64_t>();
}

[[noreturn]] void wrong_type(const std::string& label, std::string_view key, const GgufValue& value,
                             std::string_view wanted) {
  fail("{}: metadata key '{}' has type {}, wanted {}", label, key, type_label(value), wanted);
}

// The writer's byte buffer for everything before the data section.
struct Writer {
  std::string out;
  template <typename T>
  void put(T value) {
    out.append(reinterpret_cast<const char*>(&value), sizeof(T));
  }
  void put_string(std::string_view s) {
    put<uint64_t>(s.size());
    out.append(s);
  }
  void pad_to(uint64_t alignment) { out.resize((out.size() + alignment - 1) / alignment * alignment, '\0'); }
};

template <typename T>
void put_int(Writer& w, const json& value, const std::string& file, std::string_view key) {
  bool fits = false;
  if (value.is_number_unsigned()) fits = std::in_range<T>(value.get<uint64_t>());
  else if (value.is_number_integer()) fits = std::in_range<T>(value.get<int64_t>());
  if (!fits) fail("{}: metadata key '{}': {} is not a {}-bit {} integer", file, key, json_excerpt(value), sizeof(T) * 8,
                  std::is_signed_v<T> ? "signed" : "unsigned");
  w.put<T>(value.is_number_unsigned() ? static_cast<T>(value.get<uint64_t>()) : static_cast<T>(value.get<int64_t>()));
}

void put_scalar(Writer& w, GgufType type, const json& value, const std::string& file, std::string_view key) {
  switch (type) {
    case GgufType::U8: return put_int<uint8_t>(w, value, file, key);
    case GgufType::I8: return put_int<int8_t>(w, value, file, key);
    case GgufType::U16: return put_int<uint16_t>(w, value, file, key);
    case GgufType::I16: return put_int<int16_t>(w, value, file, key);
    case GgufType::U32: return put_int<uint32_t>(w, value, file, key);
    case GgufType::I32: return put_int<int32_t>(w, value, file, key);
    case GgufType::U64: return put_int<uint64_t>(w, value, file, key);
    case GgufType::I64: return put_int<int64_t>(w, value, file, key);
    case GgufType::F32:
    case GgufType::F64:
      if (!value.is_number()) fail("{}: metadata key '{}': {} is not a number", file, key, json_excerpt(value));
      if (type == GgufType::F32) return w.put<float>(static_cast<float>(value.get<double>()));
      return w.put<double>(value.get<double>());
    case GgufType::BOOL:
      if (!value.is_boolean()) fail("{}: metadata key '{}': {} is not a boolean", file, key, json_excerpt(value));
      return w.put<uint8_t>(value.get<bool>() ? 1 : 0);
    case GgufType::STRING:
      if (!value.is_string()) fail("{}: metadata key '{}': {} is not a string", file, key, json_excerpt(value));
      return w.put_string(value.get_ref<const std::string&>());
    case GgufType::ARRAY: break;
  }
  fail("{}: metadata key '{}': invalid value type {}", file, key, static_cast<uint32_t>(type));
}

void put_value(Writer& w, const GgufValue& v, const std::string& file, std::string_view key) {
  w.put<uint32_t>(static_cast<uint32_t>(v.type));
  if (v.type != GgufType::ARRAY) return put_scalar(w, v.type, v.value, file, key);
  if (v.element_type == GgufType::ARRAY) fail("{}: metadata key '{}': nested arrays are not supported", file, key);
  if (!v.value.is_array()) fail("{}: metadata key '{}' is an ARRAY but its value is not a JSON array", file, key);
  w.put<uint32_t>(static_cast<uint32_t>(v.element_type));
  w.put<uint64_t>(v.value.size());
  for (const auto& element : v.value) put_scalar(w, v.element_type, element, file, key);
}

// ne (innermost first) and byte size of a tensor to write, checked against its bytes.
std::vector<uint64_t> writer_ne(const GgufTensorData& t, const std::string& file) {
  if (t.shape.empty() || t.shape.size() > kMaxDims)
    fail("{}: tensor '{}' has {} dimensions (1 to {} allowed)", file, t.name, t.shape.size(), kMaxDims);
  std::vector<uint64_t> ne;
  uint64_t rows = 1;
  for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it) {
    if (*it < 1) fail("{}: tensor '{}' has shape [{}] (every dimension must be at least 1)", file, t.name,
                      fmt::join(t.shape, ", "));
    ne.push_back(static_cast<uint64_t>(*it));
    if (ne.size() > 1 && __builtin_mul_overflow(rows, ne.back(), &rows))
      fail("{}: tensor '{}': element count overflows 64 bits", file, t.name);
  }
  if (ne[0] % block_elements(t.dtype) != 0)
    fail("{}: tensor '{}': row length {} is not a multiple of the {} block size {}", file, t.name, ne[0],
         dtype_name(t.dtype), block_elements(t.dtype));
  auto bytes = quantized_bytes(t.dtype, ne[0], rows);
  if (!bytes || *bytes != t.size())
    fail("{}: tensor '{}': shape [{}] of {} needs {} bytes, {} given", file, t.name, fmt::join(t.shape, ", "),
         dtype_name(t.dtype), bytes ? fmt::to_string(*bytes) : "too many", t.size());
  return ne;
}

// The header, kv pairs and tensor infos, padded to `alignment`. Tensor data follows in the
// given order, each padded to `alignment`, which gives the offsets written here.
std::string encode_header(const std::string& file, const std::vector<std::pair<std::string, GgufValue>>& metadata,
                          std::span<const GgufTensorData> tensors, uint64_t alignment) {
  std::set<std::string_view> keys;
  bool has_alignment_key = false;
  for (const auto& [key, value] : metadata) {
    if (key.empty() || key.size() > kMaxNameLength) fail("{}: cannot write a metadata key of length {}", file, key.size());
    if (!keys.insert(key).second) fail("{}: metadata key '{}' given twice", file, key);
    if (key == "general.alignment") {
      if (value.type != GgufType::U32 || !value.value.is_number_integer() ||
          value.value.get<int64_t>() != static_cast<int64_t>(alignment))
        fail("{}: metadata general.alignment must be a UINT32 equal to the alignment {}", file, alignment);
      has_alignment_key = true;
    }
  }
  // Readers assume 32 without the key, so any other alignment must be written down.
  const bool add_alignment_key = !has_alignment_key && alignment != kDefaultAlignment;

  Writer w;
  w.out.append("GGUF", 4);
  w.put<uint32_t>(kVersion);
  w.put<uint64_t>(tensors.size());
  w.put<uint64_t>(metadata.size() + (add_alignment_key ? 1 : 0));
  for (const auto& [key, value] : metadata) {
    w.put_string(key);
    put_value(w, value, file, key);
  }
  if (add_alignment_key) {
    w.put_string("general.alignment");
    put_value(w, {GgufType::U32, GgufType::U8, alignment}, file, "general.alignment");
  }

  std::set<std::string_view> names;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    if (t.name.empty() || t.name.size() > kMaxNameLength) fail("{}: cannot write a tensor named '{}'", file, t.name);
    if (!names.insert(t.name).second) fail("{}: tensor '{}' given twice", file, t.name);
    auto id = ggml_id(t.dtype);
    if (!id) fail("{}: tensor '{}': dtype {} has no GGUF type", file, t.name, dtype_name(t.dtype));
    std::vector<uint64_t> ne = writer_ne(t, file);
    w.put_string(t.name);
    w.put<uint32_t>(static_cast<uint32_t>(ne.size()));
    for (uint64_t dim : ne) w.put<uint64_t>(dim);
    w.put<uint32_t>(*id);
    w.put<uint64_t>(offset);
    offset = (offset + t.size() + alignment - 1) / alignment * alignment;
  }
  w.pad_to(alignment);
  return std::move(w.out);
}

}  // namespace

std::string_view gguf_type_name(GgufType type) {
  switch (type) {
    case GgufType::U8: return "UINT8";
    case GgufType::I8: return "INT8";
    case GgufType::U16: return "UINT16";
    case GgufType::I16: return "INT16";
    case GgufType::U32: return "UINT32";
    case GgufType::I32: return "INT32";
    case GgufType::F32: return "FLOAT32";
    case GgufType::BOOL: return "BOOL";
    case GgufType::STRING: return "STRING";
    case GgufType::ARRAY: return "ARRAY";
    case GgufType::U64: return "UINT64";
    case GgufType::I64: return "INT64";
    case GgufType::F64: return "FLOAT64";
  }
  return "INVALID";
}

std::vector<int64_t> GgufTensorInfo::shape() const {
  return std::vector<int64_t>(ne.rbegin(), ne.rend());  // each ne was checked to fit in int64
}

GgufHeader parse_gguf(std::span<const std::byte> bytes, const std::string& label) {
  GgufHeader h;
  h.label = label;
  if (bytes.empty()) fail("{}: empty file (not a GGUF file)", label);
  if (bytes.size() < 4 || std::memcmp(bytes.data(), "GGUF", 4) != 0)
    fail("{}: not a GGUF file (it does not start with the magic \"GGUF\")", label);
  Reader r{bytes.data(), bytes.size(), label, /*pos=*/4, /*where=*/{}};

  h.version = r.read<uint32_t>("version");
  if (h.version != kVersion) {
    // A big-endian file (s390x builds write those) reads as a byte-swapped version here.
    const uint32_t swapped_version = __builtin_bswap32(h.version);
    const bool swapped = swapped_version >= 1 && swapped_version <= kVersion;
    fail("{}: GGUF version {} is not supported ({} is){}", label, h.version, kVersion,
         swapped ? "; the file looks big-endian, which eaglevk does not read" : "");
  }
  const uint64_t tensor_count = r.read<uint64_t>("tensor count");
  const uint64_t kv_count = r.read<uint64_t>("kv count");
  if (kv_count > r.remaining() / kMinKvBytes)
    fail("{}: kv count {} cannot fit in the {} bytes that follow the header", label, kv_count, r.remaining());
  if (tensor_count > (r.remaining() - kv_count * kMinKvBytes) / kMinTensorInfoBytes)
    fail("{}: tensor count {} cannot fit in the {} bytes that follow the header", label, tensor_count, r.remaining());

  read_metadata(r, h, kv_count);
  h.alignment = read_alignment(h);

  if (tensor_count > r.remaining() / kMinTensorInfoBytes)
    fail("{}: tensor count {} cannot fit in the {} bytes that follow the metadata", label, tensor_count, r.remaining());
  h.tensors.reserve(static_cast<size_t>(std::min(tensor_count, kMaxReserve)));
  std::set<std::string, std::less<>> names;
  for (uint64_t i = 0; i < tensor_count; ++i) {
    GgufTensorInfo t = read_tensor_info(r, label, i);
    if (!names.insert(t.name).second) fail("{}: duplicate tensor name '{}'", label, t.name);
    h.tensors.push_back(std::move(t));
  }
  // pos is at most the image size, far below 2^64 - alignment: no overflow.
  h.data_offset = (r.pos + h.alignment - 1) / h.alignment * h.alignment;
  check_tensor_data(h, bytes.size());
  return h;
}

const GgufValue* GgufHeader::find(std::string_view key) const {
  auto it = metadata.find(key);
  return it == metadata.end() ? nullptr : &it->second;
}

const GgufTensorInfo* GgufHeader::find_tensor(std::string_view name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

std::optional<int64_t> GgufHeader::get_int(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (!is_integer(v->type)) wrong_type(label, key, *v, "an integer");
  return to_int64(v->value, label, key);
}

std::optional<double> GgufHeader::get_float(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (!is_float(v->type) && !is_integer(v->type)) wrong_type(label, key, *v, "a number");
  return v->value.get<double>();
}

std::optional<bool> GgufHeader::get_bool(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufType::BOOL) wrong_type(label, key, *v, "BOOL");
  return v->value.get<bool>();
}

std::optional<std::string> GgufHeader::get_string(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufType::STRING) wrong_type(label, key, *v, "STRING");
  return v->value.get<std::string>();
}

std::optional<std::vector<int64_t>> GgufHeader::get_int_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufType::ARRAY || !is_integer(v->element_type)) wrong_type(label, key, *v, "an integer array");
  std::vector<int64_t> out;
  out.reserve(v->value.size());
  for (const auto& element : v->value) out.push_back(to_int64(element, label, key));
  return out;
}

std::optional<std::vector<double>> GgufHeader::get_float_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufType::ARRAY || !(is_float(v->element_type) || is_integer(v->element_type)))
    wrong_type(label, key, *v, "a number array");
  std::vector<double> out;
  out.reserve(v->value.size());
  for (const auto& element : v->value) out.push_back(element.get<double>());
  return out;
}

std::optional<std::vector<std::string>> GgufHeader::get_string_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufType::ARRAY || v->element_type != GgufType::STRING) wrong_type(label, key, *v, "[STRING]");
  std::vector<std::string> out;
  out.reserve(v->value.size());
  for (const auto& element : v->value) out.push_back(element.get<std::string>());
  return out;
}

GgufFile GgufFile::open(const fs::path& path) {
  GgufFile out;
  out.file = MappedFile::open(path);
  out.header = parse_gguf({out.file.data, out.file.size}, path.string());
  return out;
}

TensorView GgufFile::view(const GgufTensorInfo& t) const {
  TensorView out;
  out.name = t.name;
  out.dtype = t.dtype;
  out.shape = t.shape();
  out.data = data(t);
  out.bytes = static_cast<size_t>(t.bytes);
  out.file = header.label;
  return out;
}

bool is_gguf_file(const fs::path& path) {
  if (path_kind(path) != PathKind::File) return false;  // a FIFO would block the read
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0;
}

void write_gguf(const fs::path& path, const std::vector<std::pair<std::string, GgufValue>>& metadata,
                std::span<const GgufTensorData> tensors, uint64_t alignment) {
  write_gguf(path, metadata, tensors, alignment, [&](size_t i, std::ostream& out) {
    const auto& t = tensors[i];
    out.write(reinterpret_cast<const char*>(t.bytes.data()), static_cast<std::streamsize>(t.bytes.size()));
  });
}

void write_gguf(const fs::path& path, const std::vector<std::pair<std::string, GgufValue>>& metadata,
                std::span<const GgufTensorData> tensors, uint64_t alignment,
                const std::function<void(size_t, std::ostream&)>& write_data) {
  const std::string file = path.string();
  if (!std::has_single_bit(alignment) || alignment > UINT32_MAX)
    fail("{}: alignment {} is not a power of two that fits in 32 bits", file, alignment);
  const std::string header = encode_header(file, metadata, tensors, alignment);

  write_output_file(path, [&](std::ostream& out) {
    out.write(header.data(), static_cast<std::streamsize>(header.size()));
    // Each tensor is padded to the alignment, the last one too, as llama.cpp's writer does.
    const std::string zeros(alignment, '\0');
    for (size_t i = 0; i < tensors.size(); ++i) {
      const std::streamoff before = out.tellp();
      write_data(i, out);
      if (!out || uint64_t(out.tellp() - before) != tensors[i].size())
        fail("{}: tensor '{}': {} bytes written where its shape needs {}", file, tensors[i].name,
             uint64_t(out.tellp() - before), tensors[i].size());
      const uint64_t pad = (alignment - tensors[i].size() % alignment) % alignment;
      out.write(zeros.data(), static_cast<std::streamsize>(pad));
    }
  });
}

}  // namespace eaglevk::loader
