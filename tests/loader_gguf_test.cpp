#include "loader/gguf.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <eaglevk/error.h>

#include "loader/quant.h"

namespace fs = std::filesystem;
using namespace eaglevk::loader;
using nlohmann::json;

namespace {

const fs::path kGgufAssets = fs::path(EAGLEVK_ASSETS) / "gguf";

// A fresh directory per test, removed afterwards.
struct TempDir {
  fs::path path;
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path = fs::temp_directory_path() /
           fmt::format("eaglevk_gguf_{}_{}_{}", info->test_suite_name(), info->name(), ::getpid());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::string read_all(const fs::path& path, size_t limit = SIZE_MAX) {
  std::ifstream in(path, std::ios::binary);
  std::string out(std::min<size_t>(limit, fs::file_size(path)), '\0');
  in.read(out.data(), static_cast<std::streamsize>(out.size()));
  return out;
}

void write_all(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::span<const std::byte> as_bytes(const std::string& s) { return {reinterpret_cast<const std::byte*>(s.data()), s.size()}; }

// Expects an eaglevk::Error whose message names the file and contains `word`.
template <typename F>
void expect_error(F&& f, const std::string& word, const std::string& label = "bad.gguf") {
  try {
    f();
    ADD_FAILURE() << "no eaglevk::Error thrown (expected one mentioning '" << word << "')";
  } catch (const eaglevk::Error& e) {
    EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << "message: " << e.what();
    EXPECT_NE(std::string(e.what()).find(label), std::string::npos) << "message: " << e.what();
  }
}

void expect_bad(const std::string& image, const std::string& word) {
  expect_error([&] { parse_gguf(as_bytes(image), "bad.gguf"); }, word);
}

// --- An independent encoder for hand-made (mostly broken) images ---------------------------

struct Bytes {
  std::string s;
  template <typename T>
  Bytes& put(T value) {
    s.append(reinterpret_cast<const char*>(&value), sizeof(T));
    return *this;
  }
  Bytes& u32(uint32_t v) { return put(v); }
  Bytes& u64(uint64_t v) { return put(v); }
  Bytes& str(std::string_view v) {
    u64(v.size());
    s.append(v);
    return *this;
  }
};

std::string kv(std::string_view key, uint32_t type, const std::string& value) {
  return Bytes().str(key).u32(type).s + value;
}
std::string kv_u32(std::string_view key, uint32_t v) { return kv(key, 4, Bytes().u32(v).s); }

std::string tensor_info(std::string_view name, const std::vector<uint64_t>& ne, uint32_t type, uint64_t offset) {
  Bytes b;
  b.str(name).u32(static_cast<uint32_t>(ne.size()));
  for (uint64_t d : ne) b.u64(d);
  return b.u32(type).u64(offset).s;
}

struct Image {
  std::vector<std::string> kvs;
  std::vector<std::string> infos;
  std::string data;
  uint64_t alignment = 32;
  uint32_t version = 3;
  std::optional<uint64_t> kv_count, tensor_count;  // overrides, for lying headers

  std::string bytes() const {
    Bytes b;
    b.s = "GGUF";
    b.u32(version).u64(tensor_count.value_or(infos.size())).u64(kv_count.value_or(kvs.size()));
    for (const auto& k : kvs) b.s += k;
    for (const auto& t : infos) b.s += t;
    b.s.resize((b.s.size() + alignment - 1) / alignment * alignment, '\0');
    return b.s + data;
  }
};

// One key and one F32 [3, 2] tensor (ne {2, 3}): each bad-file test changes one thing.
Image valid_image() {
  Image img;
  img.kvs = {kv("general.architecture", 8, Bytes().str("llama").s)};
  img.infos = {tensor_info("x", {2, 3}, 0, 0)};
  img.data = std::string(24, '\x11');
  return img;
}

// --- gguf_dump.py's text, rebuilt from our parse --------------------------------------------

std::vector<uint32_t> utf8_codepoints(const std::string& s) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const int n = c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
    uint32_t cp = n == 1 ? c : c & (0x3f >> (n - 1));
    for (int k = 1; k < n && i + k < s.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3f);
    out.push_back(cp);
    i += n;
  }
  return out;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

// Python's repr() of a str, for the characters these dumps show: ASCII escapes, C0/C1
// controls and no-break/soft-hyphen spaces as \xNN, everything else printable as itself.
std::string python_repr(const std::vector<uint32_t>& cps) {
  const bool has_single = std::count(cps.begin(), cps.end(), '\'') > 0;
  const bool has_double = std::count(cps.begin(), cps.end(), '"') > 0;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (uint32_t cp : cps) {
    if (cp == static_cast<uint32_t>(quote) || cp == '\\') out += '\\', out += static_cast<char>(cp);
    else if (cp == '\n') out += "\\n";
    else if (cp == '\r') out += "\\r";
    else if (cp == '\t') out += "\\t";
    else if (cp < 0x20 || (cp >= 0x7f && cp <= 0xa0) || cp == 0xad) out += fmt::format("\\x{:02x}", cp);
    else append_utf8(out, cp);
  }
  return out + quote;
}

std::string python_repr(const std::string& utf8) { return python_repr(utf8_codepoints(utf8)); }

// One element as gguf_dump prints it inside a list (floats are compared as numbers instead).
std::string python_element(const json& v) {
  if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
  if (v.is_string()) return python_repr(v.get<std::string>());
  return v.dump();  // integers
}

// The text after " = " for one key; STRING values over 60 characters are cut to 57 + "...".
std::string dump_value(const GgufValue& v) {
  if (v.type == GgufType::STRING) {
    auto cps = utf8_codepoints(v.value.get<std::string>());
    if (cps.size() > 60) {
      cps.resize(57);
      cps.insert(cps.end(), {'.', '.', '.'});
    }
    return python_repr(cps);
  }
  if (v.type != GgufType::ARRAY) return python_element(v.value);
  std::vector<std::string> shown;
  for (size_t i = 0; i < std::min<size_t>(6, v.value.size()); ++i) shown.push_back(python_element(v.value[i]));
  return fmt::format("[{}{}]", fmt::join(shown, ", "), v.value.size() > 6 ? ", ..." : "");
}

std::vector<std::string> split_numbers(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list.substr(1, list.size() - 2));
  for (std::string item; std::getline(in, item, ',');) out.push_back(item);
  return out;
}

// Checks a parsed file against gguf_dump.py's output for it, line by line.
void check_against_dump(const GgufHeader& h, const fs::path& dump_path) {
  std::ifstream in(dump_path);
  const std::regex kv_line(R"(^\s*(\d+): (\S+)\s*\|\s*(\d+) \| (\S+) = (.*)$)");
  const std::regex tensor_line(R"(^\s*(\d+):\s+(\d+) \|\s*([\d, ]+) \| (\S+)\s*\| (\S+)$)");
  size_t keys = 0, tensors = 0;
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_match(line, m, kv_line)) {
      SCOPED_TRACE(line);
      const std::string type = m[2], key = m[4], text = m[5];
      const uint64_t count = std::stoull(m[3]);
      ++keys;
      if (key == "GGUF.version") {
        EXPECT_EQ(text, std::to_string(h.version));
      }
      if (key == "GGUF.tensor_count") {
        EXPECT_EQ(text, std::to_string(h.tensors.size()));
      }
      if (key == "GGUF.kv_count") {
        EXPECT_EQ(text, std::to_string(h.key_order.size()));
      }
      if (key.starts_with("GGUF.")) continue;
      // gguf_dump lists the keys in file order, after its three GGUF.* pseudo-keys.
      ASSERT_LT(keys - 4, h.key_order.size());
      EXPECT_EQ(h.key_order[keys - 4], key);
      const GgufValue* v = h.find(key);
      ASSERT_NE(v, nullptr);
      const std::string ours = v->type == GgufType::ARRAY ? fmt::format("[{}]", gguf_type_name(v->element_type))
                                                          : std::string(gguf_type_name(v->type));
      EXPECT_EQ(ours, type);
      EXPECT_EQ(count, v->type == GgufType::ARRAY ? v->value.size() : 1u);
      const bool floats = v->type == GgufType::F32 || v->type == GgufType::F64 ||
                          (v->type == GgufType::ARRAY && (v->element_type == GgufType::F32 || v->element_type == GgufType::F64));
      if (!floats) {
        EXPECT_EQ(dump_value(*v), text);
      } else if (v->type != GgufType::ARRAY) {
        EXPECT_EQ(v->value.get<double>(), std::strtod(text.c_str(), nullptr));  // repr round-trips exactly
      } else {
        auto items = split_numbers(text);
        for (size_t i = 0; i < items.size() && items[i].find("...") == std::string::npos; ++i)
          EXPECT_EQ(v->value[i].get<double>(), std::strtod(items[i].c_str(), nullptr)) << "element " << i;
      }
    } else if (std::regex_match(line, m, tensor_line)) {
      SCOPED_TRACE(line);
      ASSERT_LT(tensors, h.tensors.size());
      const GgufTensorInfo& t = h.tensors[tensors++];
      EXPECT_EQ(t.name, m[5].str());
      EXPECT_EQ(dtype_name(t.dtype), m[4].str());
      std::vector<uint64_t> ne;
      for (const auto& d : split_numbers("[" + m[3].str() + "]")) ne.push_back(std::stoull(d));
      std::vector<uint64_t> padded = t.ne;
      padded.resize(4, 1);  // gguf_dump pads the shape to four dimensions with ones
      EXPECT_EQ(padded, ne);
      uint64_t elements = 1;
      for (uint64_t d : t.ne) elements *= d;
      EXPECT_EQ(elements, std::stoull(m[2]));
      EXPECT_EQ(t.bytes, elements / block_elements(t.dtype) * block_bytes(t.dtype));
    }
  }
  EXPECT_EQ(keys, h.key_order.size() + 3);
  EXPECT_EQ(tensors, h.tensors.size());
}

std::vector<std::byte> random_bytes(size_t n, std::mt19937_64& rng) {
  std::vector<std::byte> out(n);
  for (auto& b : out) b = static_cast<std::byte>(rng());
  return out;
}

// Metadata of every value type, scalars and arrays, in a deliberate (non-sorted) order.
std::vector<std::pair<std::string, GgufValue>> every_value_type() {
  using T = GgufType;
  auto array = [](T element, json values) { return GgufValue{T::ARRAY, element, std::move(values)}; };
  return {
      {"z.u8", {T::U8, T::U8, 255}},
      {"a.i8", {T::I8, T::U8, -128}},
      {"m.u16", {T::U16, T::U8, 65535}},
      {"m.i16", {T::I16, T::U8, -32768}},
      {"m.u32", {T::U32, T::U8, 4294967295u}},
      {"m.i32", {T::I32, T::U8, -2147483647 - 1}},
      {"m.u64", {T::U64, T::U8, UINT64_MAX}},
      {"m.i64", {T::I64, T::U8, INT64_MIN}},
      {"m.f32", {T::F32, T::U8, -1.25}},
      {"m.f64", {T::F64, T::U8, 0.1}},
      {"m.bool", {T::BOOL, T::U8, true}},
      {"m.string", {T::STRING, T::U8, std::string("h\xc3\xa9llo\0nul", 10)}},
      {"m.empty_string", {T::STRING, T::U8, ""}},
      {"arr.u8", array(T::U8, {0, 7, 255})},
      {"arr.i32", array(T::I32, {-1, 0, 2147483647})},
      {"arr.u64", array(T::U64, {uint64_t(1) << 63})},
      {"arr.i64", array(T::I64, {-5, 5})},
      {"arr.f32", array(T::F32, {0.5, -3.0, 1e30f})},
      {"arr.f64", array(T::F64, {0.1, -2.5e-300})},
      {"arr.bool", array(T::BOOL, {true, false, true})},
      {"arr.string", array(T::STRING, {"a", "", "\xc4\xa0t"})},
      {"arr.empty", array(T::I16, json::array())},
  };
}

constexpr DType kSupported[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q4_0, DType::Q4_1, DType::Q5_0,
                                DType::Q5_1, DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::I8,
                                DType::I16,  DType::I32,  DType::I64,  DType::F64};

}  // namespace

TEST(Gguf, MatchesGgufPyDumps) {
  int checked = 0;
  for (const auto& pair : fs::directory_iterator(kGgufAssets)) {
    if (!fs::is_directory(pair.path() / "dumps")) continue;
    for (const auto& dump : fs::directory_iterator(pair.path() / "dumps")) {
      std::string stem = dump.path().filename().string();
      stem = stem.substr(0, stem.size() - std::string(".dump.txt").size());
      const fs::path gguf = pair.path() / (stem + ".gguf");
      if (!fs::exists(gguf)) continue;  // the README lists files kept out for space
      SCOPED_TRACE(gguf.string());
      GgufFile file = GgufFile::open(gguf);
      EXPECT_EQ(file.header.version, 3u);
      EXPECT_EQ(file.header.alignment, 32u);
      EXPECT_EQ(file.header.data_offset % 32, 0u);
      check_against_dump(file.header, dump.path());
      // llama.cpp packs the data: each tensor at the previous one's end, padded to 32.
      uint64_t expected_offset = 0;
      for (const auto& t : file.header.tensors) {
        EXPECT_EQ(t.offset, expected_offset) << t.name;
        expected_offset = (t.offset + t.bytes + 31) / 32 * 32;
      }
      EXPECT_LE(file.header.data_offset + expected_offset, file.file.size);
      ++checked;
    }
  }
  EXPECT_GE(checked, 10);  // 7 tiny-llama3 files, 3 tiny-llama4 files
}

TEST(Gguf, RealFileAccessorsAndViews) {
  const fs::path path = kGgufAssets / "tiny-llama3" / "tiny-llama3-q4_k_m.gguf";
  ASSERT_TRUE(is_gguf_file(path));
  GgufFile file = GgufFile::open(path);
  const GgufHeader& h = file.header;
  EXPECT_EQ(h.get_string("general.architecture"), "llama");
  EXPECT_EQ(h.get_int("llama.block_count"), 8);
  EXPECT_EQ(h.get_float("llama.block_count"), 8.0);  // integers read as numbers too
  EXPECT_EQ(h.get_float("llama.rope.freq_base"), 500000.0);
  EXPECT_EQ(h.get_float("llama.attention.layer_norm_rms_epsilon"), static_cast<double>(1e-5f));
  EXPECT_EQ(h.get_bool("tokenizer.ggml.add_bos_token"), true);
  auto tokens = h.get_string_array("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens);
  EXPECT_EQ(tokens->size(), 4096u);
  EXPECT_EQ(tokens->front(), "\xc4\x80");  // 'Ā'
  EXPECT_EQ(h.get_int_array("tokenizer.ggml.token_type")->size(), 4096u);
  EXPECT_EQ(h.get_float_array("tokenizer.ggml.token_type")->front(), 1.0);
  EXPECT_FALSE(h.get_int("no.such.key").has_value());
  EXPECT_FALSE(h.get_string_array("no.such.key").has_value());

  const std::string label = path.string();
  expect_error([&] { h.get_int("general.architecture"); }, "'general.architecture' has type STRING", label);
  expect_error([&] { h.get_string("llama.block_count"); }, "has type UINT32, wanted STRING", label);
  expect_error([&] { h.get_bool("llama.block_count"); }, "wanted BOOL", label);
  expect_error([&] { h.get_float("tokenizer.ggml.model"); }, "wanted a number", label);
  expect_error([&] { h.get_int_array("tokenizer.ggml.tokens"); }, "has type [STRING]", label);
  expect_error([&] { h.get_string_array("tokenizer.ggml.token_type"); }, "has type [INT32], wanted [STRING]", label);
  expect_error([&] { h.get_string("tokenizer.ggml.tokens"); }, "wanted STRING", label);

  const GgufTensorInfo* q = h.find_tensor("blk.0.attn_q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->dtype, DType::Q4_K);
  EXPECT_EQ(q->ne, (std::vector<uint64_t>{256, 256}));
  EXPECT_EQ(h.find_tensor("blk.9.attn_q.weight"), nullptr);
  const GgufTensorInfo* down = h.find_tensor("blk.0.ffn_down.weight");
  ASSERT_NE(down, nullptr);
  TensorView view = file.view(*down);
  EXPECT_EQ(view.shape, (std::vector<int64_t>{256, 768}));  // ne {768, 256}, rows first
  EXPECT_EQ(view.dtype, DType::Q6_K);
  EXPECT_EQ(view.bytes, 256u * 3 * 210);
  EXPECT_EQ(view.file, label);
  // The view's bytes are the file's bytes at data_offset + offset.
  const std::string raw = read_all(path);
  EXPECT_EQ(std::memcmp(view.data, raw.data() + h.data_offset + down->offset, view.bytes), 0);
}

// Writing what was parsed reproduces llama.cpp's file byte for byte: same layout rules.
TEST(Gguf, RewritesLlamaCppFileIdentically) {
  TempDir dir;
  const fs::path path = kGgufAssets / "tiny-llama3" / "tiny-llama3-eagle3-q8_0.gguf";
  GgufFile file = GgufFile::open(path);
  std::vector<std::pair<std::string, GgufValue>> metadata;
  for (const auto& key : file.header.key_order) metadata.emplace_back(key, *file.header.find(key));
  std::vector<GgufTensorData> tensors;
  for (const auto& t : file.header.tensors) {
    TensorView v = file.view(t);
    tensors.push_back({t.name, t.dtype, v.shape, v.span()});
  }
  write_gguf(dir.path / "copy.gguf", metadata, tensors);
  EXPECT_TRUE(read_all(dir.path / "copy.gguf") == read_all(path));
}

TEST(Gguf, RoundTripEveryDtypeAndValueType) {
  TempDir dir;
  std::mt19937_64 rng(7);
  const auto metadata = every_value_type();
  for (uint64_t alignment : {32u, 64u}) {
    SCOPED_TRACE(fmt::format("alignment {}", alignment));
    std::vector<std::vector<std::byte>> storage;
    std::vector<GgufTensorData> tensors;
    for (DType dtype : kSupported) {
      const int64_t row = block_elements(dtype) * (dtype == DType::F32 ? 3 : 1);
      // Odd shapes of 1 to 4 dimensions; the rows of 13 leave each tensor unaligned at its end.
      const std::vector<int64_t> shapes[] = {{row}, {13, row}, {2, 3, row}, {1, 2, 1, row}};
      const auto& shape = shapes[tensors.size() % 4];
      uint64_t rows = 1;
      for (size_t i = 0; i + 1 < shape.size(); ++i) rows *= shape[i];
      storage.push_back(random_bytes(*quantized_bytes(dtype, row, rows), rng));
      tensors.push_back({fmt::format("t.{}", dtype_name(dtype)), dtype, shape, storage.back()});
    }
    const fs::path path = dir.path / fmt::format("rt{}.gguf", alignment);
    write_gguf(path, metadata, tensors, alignment);
    ASSERT_TRUE(is_gguf_file(path));
    GgufFile file = GgufFile::open(path);
    const GgufHeader& h = file.header;
    EXPECT_EQ(h.alignment, alignment);
    EXPECT_EQ(h.data_offset % alignment, 0u);
    // Alignment 64 is written as general.alignment after the given keys.
    std::vector<std::string> order;
    for (const auto& [key, value] : metadata) order.push_back(key);
    if (alignment != 32) order.push_back("general.alignment");
    EXPECT_EQ(h.key_order, order);
    for (const auto& [key, value] : metadata) {
      SCOPED_TRACE(key);
      const GgufValue* got = h.find(key);
      ASSERT_NE(got, nullptr);
      EXPECT_EQ(got->type, value.type);
      if (value.type == GgufType::ARRAY) {
        EXPECT_EQ(got->element_type, value.element_type);
      }
      EXPECT_EQ(got->value, value.value);  // every float above is exact in its type
    }
    ASSERT_EQ(h.tensors.size(), tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
      SCOPED_TRACE(tensors[i].name);
      const GgufTensorInfo& t = h.tensors[i];
      EXPECT_EQ(t.name, tensors[i].name);
      EXPECT_EQ(t.dtype, tensors[i].dtype);
      EXPECT_EQ(t.shape(), tensors[i].shape);
      EXPECT_EQ(t.offset % alignment, 0u);
      TensorView view = file.view(t);
      ASSERT_EQ(view.bytes, tensors[i].bytes.size());
      EXPECT_EQ(std::memcmp(view.data, tensors[i].bytes.data(), view.bytes), 0);
    }
  }
  // Integer accessors convert across widths; a UINT64 above INT64_MAX does not fit.
  write_gguf(dir.path / "meta.gguf", metadata, {});
  GgufFile meta = GgufFile::open(dir.path / "meta.gguf");
  EXPECT_EQ(meta.header.get_int("z.u8"), 255);
  EXPECT_EQ(meta.header.get_int("m.i64"), INT64_MIN);
  EXPECT_EQ(meta.header.get_float("m.f32"), -1.25);
  EXPECT_EQ(meta.header.get_int_array("arr.u8"), (std::vector<int64_t>{0, 7, 255}));
  EXPECT_EQ(meta.header.get_float_array("arr.f32"), (std::vector<double>{0.5, -3.0, double(1e30f)}));
  EXPECT_EQ(meta.header.get_string("m.string"), std::string("h\xc3\xa9llo\0nul", 10));
  EXPECT_EQ(meta.header.get_int_array("arr.empty"), std::vector<int64_t>{});
  const std::string label = (dir.path / "meta.gguf").string();
  expect_error([&] { meta.header.get_int("m.u64"); }, "does not fit in int64", label);
  expect_error([&] { meta.header.get_int_array("arr.u64"); }, "does not fit in int64", label);
  expect_error([&] { meta.header.get_int("m.f32"); }, "has type FLOAT32, wanted an integer", label);
}

TEST(Gguf, WriterRefusesBadInput) {
  TempDir dir;
  const fs::path path = dir.path / "bad.gguf";
  const std::vector<std::byte> bytes(18);
  std::vector<GgufTensorData> q4 = {{"w", DType::Q4_0, {1, 32}, bytes}};
  write_gguf(path, {}, q4);  // the right size for one Q4_0 block
  q4[0].shape = {1, 33};
  expect_error([&] { write_gguf(path, {}, q4); }, "not a multiple of the Q4_0 block size 32");
  q4[0].shape = {2, 32};
  expect_error([&] { write_gguf(path, {}, q4); }, "needs 36 bytes, 18 given");
  std::vector<GgufTensorData> u8 = {{"w", DType::U8, {18}, bytes}};
  expect_error([&] { write_gguf(path, {}, u8); }, "dtype U8 has no GGUF type");
  std::vector<GgufTensorData> twice = {{"w", DType::I8, {18}, bytes}, {"w", DType::I8, {18}, bytes}};
  expect_error([&] { write_gguf(path, {}, twice); }, "tensor 'w' given twice");
  expect_error([&] { write_gguf(path, {{"k", {GgufType::U8, GgufType::U8, 256}}}, {}); }, "'k': number 256 is not a 8-bit unsigned");
  expect_error([&] { write_gguf(path, {{"k", {GgufType::STRING, GgufType::U8, 1}}}, {}); }, "is not a string");
  expect_error([&] { write_gguf(path, {{"k", {GgufType::ARRAY, GgufType::ARRAY, json::array()}}}, {}); }, "nested");
  expect_error([&] { write_gguf(path, {{"k", {GgufType::U8, GgufType::U8, 1}}, {"k", {GgufType::U8, GgufType::U8, 1}}}, {}); },
               "'k' given twice");
  expect_error([&] { write_gguf(path, {}, {}, 48); }, "alignment 48");
  expect_error([&] { write_gguf(path, {{"general.alignment", {GgufType::U32, GgufType::U8, 64}}}, {}, 32); },
               "general.alignment must be a UINT32 equal to the alignment 32");
  write_gguf(path, {{"general.alignment", {GgufType::U32, GgufType::U8, 64}}}, {}, 64);
  EXPECT_EQ(GgufFile::open(path).header.alignment, 64u);
  for (const auto& e : fs::directory_iterator(dir.path))  // failed writes removed their temporary files
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
}

TEST(Gguf, OpenAndMagic) {
  TempDir dir;
  expect_error([&] { GgufFile::open(dir.path / "missing.gguf"); }, "does not exist", "missing.gguf");
  write_all(dir.path / "empty.gguf", "");
  expect_error([&] { GgufFile::open(dir.path / "empty.gguf"); }, "empty file", "empty.gguf");
  write_all(dir.path / "short.gguf", "GGU");
  EXPECT_FALSE(is_gguf_file(dir.path / "short.gguf"));
  EXPECT_FALSE(is_gguf_file(dir.path / "missing.gguf"));
  EXPECT_FALSE(is_gguf_file(dir.path));
  EXPECT_FALSE(is_gguf_file(fs::path(EAGLEVK_ASSETS) / "tiny-llama3" / "model.safetensors"));
  write_all(dir.path / "valid.gguf", valid_image().bytes());
  EXPECT_TRUE(is_gguf_file(dir.path / "valid.gguf"));
  EXPECT_EQ(GgufFile::open(dir.path / "valid.gguf").header.tensors.at(0).shape(), (std::vector<int64_t>{3, 2}));
}

TEST(Gguf, BadFiles) {
  EXPECT_NO_THROW(parse_gguf(as_bytes(valid_image().bytes()), "ok.gguf"));
  auto changed = [](auto&& change) {
    Image img = valid_image();
    change(img);
    return img.bytes();
  };
  expect_bad("", "empty file");
  expect_bad("GGU", "not a GGUF file");
  expect_bad("GGML" + valid_image().bytes().substr(4), "not a GGUF file");
  expect_bad(changed([](Image& i) { i.version = 1; }), "GGUF version 1 is not supported (3 is)");
  expect_bad(changed([](Image& i) { i.version = 2; }), "GGUF version 2 is not supported (3 is)");
  expect_bad(changed([](Image& i) { i.version = 0x03000000; }), "big-endian");

  // Counts that cannot fit in the file are refused before anything is allocated.
  expect_bad(changed([](Image& i) { i.kv_count = uint64_t(1) << 62; }), "kv count 4611686018427387904 cannot fit");
  expect_bad(changed([](Image& i) { i.tensor_count = uint64_t(1) << 62; }), "tensor count 4611686018427387904");
  expect_bad(changed([](Image& i) { i.kvs.push_back(kv("a", 9, Bytes().u32(4).u64(uint64_t(1) << 61).s)); }),
             "array of 2305843009213693952 UINT32 elements cannot fit");
  expect_bad(changed([](Image& i) { i.kvs.push_back(kv("a", 9, Bytes().u32(8).u64(1000).s)); }),
             "array of 1000 STRING elements");
  {  // A count the file could hold, but beyond any real vocabulary.
    Image img = valid_image();
    img.kvs.push_back(kv("a", 9, Bytes().u32(0).u64((1 << 24) + 1).s + std::string((1 << 24) + 1, '\0')));
    expect_bad(img.bytes(), "array of 16777217 elements is longer than the 16777216 eaglevk accepts");
  }
  // String lengths: a key is bounded; a value must fit in what is left.
  expect_bad(changed([](Image& i) { i.kvs.push_back(Bytes().u64(uint64_t(1) << 63).s); }),
             "key has length 9223372036854775808");
  expect_bad(changed([](Image& i) { i.kvs.push_back(kv("a", 8, Bytes().u64(uint64_t(1) << 63).s)); }),
             "needs 9223372036854775808 bytes");
  expect_bad(changed([](Image& i) { i.kvs.push_back(kv(std::string(70000, 'k'), 4, Bytes().u32(1).s)); }),
             "(at most 65535 allowed)");

  // Metadata values.
  expect_bad(changed([](Image& i) { i.kvs.push_back(kv("", 4, Bytes().u32(1).s)); }), "has an empty key");
  expect_bad(changed([](Image& i) { i.kvs.push_back(i.kvs[0]); }), "duplicate metadata key 'general.architecture'");
  expect_bad(changed([](Image& i) { i.kvs.push_back(kv("a", 13, "")); }), "key 'a': unknown value type id 13");
  expect_bad(changed([](Image& i) { i.kvs.push_back(kv("a", 7, "\x02")); }), "BOOL value 2");
  expect_bad(changed([](Image& i) { i.kvs.push_back(kv("a", 9, Bytes().u32(7).u64(2).s + "\x01\x05")); }),
             "BOOL value 5");
  expect_bad(changed([](Image& i) { i.kvs.push_back(kv("a", 9, Bytes().u32(9).u32(4).u64(1).s)); }),
             "key 'a': nested arrays are not supported");

  // Alignment.
  expect_bad(changed([](Image& i) { i.kvs.push_back(kv_u32("general.alignment", 0)); }),
             "general.alignment is 0 (it must be a nonzero power of two)");
  expect_bad(changed([](Image& i) { i.kvs.push_back(kv_u32("general.alignment", 3)); }), "general.alignment is 3");
  expect_bad(changed([](Image& i) { i.kvs.push_back(kv("general.alignment", 10, Bytes().u64(32).s)); }),
             "general.alignment has type UINT64 (it must be UINT32)");
  expect_bad(changed([](Image& i) { i.infos[0] = tensor_info("x", {2, 3}, 0, 4); }),
             "tensor 'x' has data offset 4, not a multiple of the alignment 32");
  {
    Image img = valid_image();  // alignment 64: offset 32 is now misaligned
    img.alignment = 64;
    img.kvs.push_back(kv_u32("general.alignment", 64));
    img.infos[0] = tensor_info("x", {2, 3}, 0, 32);
    img.data = std::string(64, '\0');
    expect_bad(img.bytes(), "not a multiple of the alignment 64");
    img.infos[0] = tensor_info("x", {2, 3}, 0, 0);
    EXPECT_EQ(parse_gguf(as_bytes(img.bytes()), "a64.gguf").data_offset % 64, 0u);
  }

  // Tensor infos.
  expect_bad(changed([](Image& i) { i.infos[0] = tensor_info("x", {}, 0, 0); }), "tensor 'x' has n_dims = 0");
  expect_bad(changed([](Image& i) { i.infos[0] = tensor_info("x", {1, 1, 1, 1, 6}, 0, 0); }), "n_dims = 5");
  expect_bad(changed([](Image& i) { i.infos[0] = tensor_info("x", {2, 0}, 0, 0); }), "tensor 'x' has ne[1] = 0");
  expect_bad(changed([](Image& i) { i.infos[0] = tensor_info("", {6}, 0, 0); }), "has an empty name");
  expect_bad(changed([](Image& i) { i.infos[0] = tensor_info("x", {uint64_t(1) << 32, uint64_t(1) << 32}, 0, 0); }),
             "tensor 'x': element count overflows 64 bits");
  expect_bad(changed([](Image& i) { i.infos[0] = tensor_info("x", {uint64_t(1) << 62, 2}, 0, 0); }),
             "element count overflows 64 bits");
  expect_bad(changed([](Image& i) { i.infos[0] = tensor_info("x", {uint64_t(1) << 62}, 0, 0); }),
             "tensor 'x': byte size overflows 64 bits");  // 2^62 F32 elements are 2^64 bytes
  expect_bad(changed([](Image& i) { i.infos[0] = tensor_info("x", {33, 1}, 2, 0); }),
             "tensor 'x': ne[0] = 33 is not a multiple of the Q4_0 block size 32");
  expect_bad(changed([](Image& i) { i.infos[0] = tensor_info("x", {255}, 12, 0); }), "Q4_K block size 256");
  expect_bad(changed([](Image& i) { i.infos[0] = tensor_info("x", {6}, 99, 0); }), "tensor 'x' has unknown ggml type id 99");
  expect_bad(changed([](Image& i) { i.infos[0] = tensor_info("blk.0.attn_q.weight", {256}, 35, 0); }),
             "tensor 'blk.0.attn_q.weight' has ggml type TQ2_0, which eaglevk does not support (supported: F32, F16,");
  expect_bad(changed([](Image& i) { i.infos[0] = tensor_info("x", {128}, 16, 0); }), "IQ2_XXS block size 256");
  expect_bad(changed([](Image& i) { i.infos[0] = tensor_info("x", {48}, 39, 0); }), "MXFP4 block size 32");
  expect_bad(changed([](Image& i) { i.infos[0] = tensor_info("x", {256}, 34, 0); }), "ggml type TQ1_0");
  expect_bad(changed([](Image& i) { i.infos[0] = tensor_info("x", {256}, 40, 0); }), "ggml type NVFP4");
  expect_bad(changed([](Image& i) { i.infos.push_back(tensor_info("x", {2}, 0, 32)); }), "duplicate tensor name 'x'");

  // Tensor data must lie inside the file, without overlap.
  expect_bad(changed([](Image& i) { i.data.resize(23); }), "tensor 'x' data [128, 152) lies past the end of the file (size 151)");
  expect_bad(changed([](Image& i) { i.infos[0] = tensor_info("x", {2, 3}, 0, uint64_t(-32)); }), "lies past the end");
  expect_bad(changed([](Image& i) { i.infos[0] = tensor_info("x", {uint64_t(1) << 40}, 0, 0); }), "lies past the end");
  expect_bad(changed([](Image& i) {
               i.infos.push_back(tensor_info("y", {16}, 0, 0));
               i.data.resize(64);
             }),
             "tensors 'x' and 'y' have overlapping data");
}

// Every prefix of a valid file, up to the end of its last tensor, is refused cleanly (the
// padding after the last tensor is optional, as in llama.cpp).
TEST(Gguf, EveryTruncationIsAnError) {
  TempDir dir;
  std::vector<std::byte> data(32 * 3 + 34);
  std::vector<GgufTensorData> tensors = {{"a", DType::F32, {3, 8}, std::span(data).first(96)},
                                         {"b", DType::Q8_0, {1, 32}, std::span(data).subspan(96)}};
  auto metadata = every_value_type();
  write_gguf(dir.path / "small.gguf", metadata, tensors);
  const std::string image = read_all(dir.path / "small.gguf");
  const GgufHeader h = parse_gguf(as_bytes(image), "small.gguf");
  const uint64_t end = h.data_offset + h.tensors.back().offset + h.tensors.back().bytes;
  ASSERT_LE(end, image.size());
  for (uint64_t n = 0; n < end; ++n) {
    try {
      parse_gguf(as_bytes(image.substr(0, n)), "cut.gguf");
      ADD_FAILURE() << "prefix of " << n << " bytes parsed";
    } catch (const eaglevk::Error& e) {
      EXPECT_NE(std::string(e.what()).find("cut.gguf"), std::string::npos) << e.what();
    }
  }
  EXPECT_NO_THROW(parse_gguf(as_bytes(image.substr(0, end)), "cut.gguf"));
}

// Seeded random damage to a small written file and to the head of a real one: every result
// is a parse or an eaglevk::Error; anything else (another exception, a crash) fails.
TEST(Gguf, MutationsNeverCrash) {
  TempDir dir;
  std::mt19937_64 rng(20240611);
  std::vector<std::byte> data(96 + 34);
  for (auto& b : data) b = static_cast<std::byte>(rng());
  std::vector<GgufTensorData> tensors = {{"a", DType::F32, {3, 8}, std::span(data).first(96)},
                                         {"b", DType::Q8_0, {1, 32}, std::span(data).subspan(96)}};
  write_gguf(dir.path / "small.gguf", every_value_type(), tensors);
  const std::string bases[] = {read_all(dir.path / "small.gguf"),
                               read_all(kGgufAssets / "tiny-llama3" / "tiny-llama3-q4_k_m.gguf", 64 << 10)};
  const uint64_t interesting[] = {0, 1, 3, 4, 5, 13, 0xffffffffu, uint64_t(1) << 32, uint64_t(1) << 61,
                                  uint64_t(1) << 62, uint64_t(1) << 63, UINT64_MAX};
  int parsed = 0, refused = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    std::string image = bases[iter % 2];
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !image.empty(); ++e) {
      const size_t at = rng() % image.size();
      switch (rng() % 5) {
        case 0: image[at] = static_cast<char>(image[at] ^ (1 << (rng() % 8))); break;
        case 1: {
          const uint64_t v = rng() % 2 ? interesting[rng() % std::size(interesting)] : rng();
          std::memcpy(image.data() + at, &v, std::min<size_t>(8, image.size() - at));
          break;
        }
        case 2: image.resize(at); break;
        case 3: image.insert(at, std::string(1 + rng() % 16, static_cast<char>(rng()))); break;
        case 4: image.erase(at, 1 + rng() % 16); break;
      }
    }
    try {
      GgufHeader h = parse_gguf(as_bytes(image), "mutant.gguf");
      for (const auto& t : h.tensors) EXPECT_LE(h.data_offset + t.offset + t.bytes, image.size()) << t.name;
      ++parsed;
    } catch (const eaglevk::Error&) {
      ++refused;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "iteration " << iter << ": not an eaglevk::Error: " << e.what();
    }
  }
  // Both outcomes happen: the mutations are neither all harmless nor all fatal.
  EXPECT_GT(parsed, 0);
  EXPECT_GT(refused, 0);
  std::cout << "mutations: " << parsed << " parsed, " << refused << " refused\n";
}
