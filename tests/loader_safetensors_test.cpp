#include "loader/safetensors.h"
#include "support/loader_test_util.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <eaglevk/error.h>

namespace fs = std::filesystem;
using namespace eaglevk::loader;
using eaglevk::testing::expect_error;
using nlohmann::json;

namespace {

const fs::path kAssets = EAGLEVK_ASSETS;
const fs::path kTiny = kAssets / "tiny-llama3" / "model.safetensors";

// A fresh directory per test, removed afterwards.
struct TempDir {
  fs::path path;
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path = fs::temp_directory_path() / fmt::format("eaglevk_st_{}_{}_{}", info->test_suite_name(), info->name(), ::getpid());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::string read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_all(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Independent of the library's writer: u64 LE length, header text, data.
std::string make_file(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

// bf16 decoded by hand from its fields, in double, to check the library against.
double bf16_reference(uint16_t bits) {
  const int sign = bits >> 15, exponent = (bits >> 7) & 0xff, mantissa = bits & 0x7f;
  if (exponent == 255)
    return mantissa ? std::numeric_limits<double>::quiet_NaN() : (sign ? -1 : 1) * std::numeric_limits<double>::infinity();
  double magnitude = exponent == 0 ? std::ldexp(mantissa, -133) : std::ldexp(128 + mantissa, exponent - 134);
  return sign ? -magnitude : magnitude;
}

}  // namespace

TEST(Safetensors, DTypes) {
  EXPECT_EQ(dtype_size(DType::BF16), 2u);
  EXPECT_EQ(dtype_size(DType::I64), 8u);
  EXPECT_EQ(dtype_size(DType::BOOL), 1u);
  EXPECT_EQ(dtype_name(DType::F16), "F16");
  for (auto d : {DType::F32, DType::F16, DType::BF16, DType::I64, DType::I32, DType::I16, DType::I8, DType::U8,
                 DType::BOOL, DType::F64, DType::F8_E4M3, DType::F8_E5M2})
    EXPECT_EQ(parse_dtype(dtype_name(d)), d);
  EXPECT_EQ(dtype_size(DType::F8_E4M3), 1u);
  // Block types never appear in a safetensors header, eaglevk's FP8 blocks included.
  EXPECT_FALSE(parse_dtype("Q4_K").has_value());
  EXPECT_FALSE(parse_dtype("FP8_B32").has_value());
  EXPECT_FALSE(parse_dtype("F8_E8M0").has_value());
}

TEST(Safetensors, OpensTinyLlama) {
  Checkpoint ckpt = Checkpoint::open(kTiny);
  EXPECT_EQ(ckpt.size(), 75u);  // 8 layers × 9 + embed + norm + lm_head
  EXPECT_EQ(ckpt.metadata.at("format"), "pt");

  const TensorView& embed = ckpt.get("model.embed_tokens.weight");
  EXPECT_EQ(embed.dtype, DType::BF16);
  EXPECT_EQ(embed.shape, (std::vector<int64_t>{4096, 256}));
  EXPECT_EQ(embed.numel(), 4096 * 256);
  EXPECT_EQ(embed.bytes, 4096u * 256 * 2);
  EXPECT_EQ(ckpt.get("model.layers.0.mlp.down_proj.weight").shape, (std::vector<int64_t>{256, 768}));
  EXPECT_EQ(ckpt.get("model.layers.7.self_attn.k_proj.weight").shape, (std::vector<int64_t>{128, 256}));
  EXPECT_EQ(ckpt.get("model.norm.weight").shape, (std::vector<int64_t>{256}));
  EXPECT_EQ(ckpt.find("model.layers.8.mlp.up_proj.weight"), nullptr);

  auto names = ckpt.names();
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  EXPECT_EQ(names.front(), "lm_head.weight");

  // The view points at the same bytes the file holds at 8 + header + offset.
  const std::string raw = read_all(kTiny);
  uint64_t header_len;
  std::memcpy(&header_len, raw.data(), 8);
  json header = json::parse(raw.substr(8, header_len));
  uint64_t begin = header["model.embed_tokens.weight"]["data_offsets"][0];
  EXPECT_EQ(std::memcmp(embed.data, raw.data() + 8 + header_len + begin, embed.bytes), 0);

  // bf16 -> f32 spot check against a hand decode of the raw bits.
  std::vector<float> values = to_f32(embed);
  for (size_t i : {size_t(0), size_t(1), size_t(777), size_t(4096 * 256 - 1)}) {
    uint16_t bits;
    std::memcpy(&bits, raw.data() + 8 + header_len + begin + 2 * i, 2);
    EXPECT_EQ(static_cast<double>(values[i]), bf16_reference(bits)) << "element " << i;
  }
  // Moving the checkpoint keeps the views valid (the mappings do not move).
  Checkpoint moved = std::move(ckpt);
  EXPECT_EQ(to_f32(moved.get("model.embed_tokens.weight")), values);
}

TEST(Safetensors, OpensDirectory) {
  Checkpoint ckpt = Checkpoint::open(kAssets / "tiny-llama3");
  EXPECT_EQ(ckpt.size(), 75u);
}

TEST(Safetensors, EagleDraftIntTensors) {
  Checkpoint ckpt = Checkpoint::open(kAssets / "tiny-llama3-eagle3");
  const TensorView& d2t = ckpt.get("d2t");
  EXPECT_EQ(d2t.dtype, DType::I64);
  std::vector<int64_t> offsets = to_i64(d2t);
  std::vector<int32_t> offsets32 = to_i32(d2t);
  ASSERT_EQ(offsets.size(), 1024u);
  for (size_t i = 0; i < offsets.size(); ++i) EXPECT_EQ(offsets32[i], offsets[i]);

  std::vector<bool> t2d = to_bool(ckpt.get("t2d"));
  ASSERT_EQ(t2d.size(), 4096u);
  EXPECT_EQ(std::count(t2d.begin(), t2d.end(), true), 1024);
  // d2t holds target-minus-draft offsets: every draft id maps onto a target id t2d marks.
  for (size_t i = 0; i < offsets.size(); ++i) EXPECT_TRUE(t2d.at(i + offsets[i])) << "draft id " << i;

  expect_error([&] { to_f32(d2t); }, "d2t");
  expect_error([&] { to_bool(d2t); }, "bool");
}

TEST(Safetensors, ShardedMatchesSingleFile) {
  TempDir tmp;
  Checkpoint single = Checkpoint::open(kTiny);
  const auto names = single.names();

  // Split the tensors alternately into two shards, written by hand.
  json weight_map = json::object();
  for (int shard = 0; shard < 2; ++shard) {
    const std::string file = fmt::format("model-0000{}-of-00002.safetensors", shard + 1);
    json header = json::object();
    std::string data;
    for (size_t i = shard; i < names.size(); i += 2) {
      const TensorView& t = single.get(names[i]);
      header[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {data.size(), data.size() + t.bytes}}};
      data.append(reinterpret_cast<const char*>(t.data), t.bytes);
      weight_map[t.name] = file;
    }
    write_all(tmp.path / file, make_file(header.dump(), data));
  }
  write_all(tmp.path / "model.safetensors.index.json",
            json{{"metadata", {{"total_size", 123}}}, {"weight_map", weight_map}}.dump());

  for (const fs::path& where : {tmp.path, tmp.path / "model.safetensors.index.json"}) {
    Checkpoint sharded = Checkpoint::open(where);
    EXPECT_EQ(sharded.files.size(), 2u);
    EXPECT_EQ(sharded.names(), names);
    EXPECT_EQ(sharded.metadata.at("total_size"), "123");
    for (const auto& name : names) {
      const TensorView& a = single.get(name);
      const TensorView& b = sharded.get(name);
      EXPECT_EQ(a.dtype, b.dtype);
      EXPECT_EQ(a.shape, b.shape);
      ASSERT_EQ(a.bytes, b.bytes);
      EXPECT_EQ(std::memcmp(a.data, b.data, a.bytes), 0) << name;
    }
    EXPECT_NE(sharded.get("model.norm.weight").file.find("-of-00002"), std::string::npos);
  }

  // An index naming a shard that is not there.
  weight_map["model.norm.weight"] = "model-00003-of-00002.safetensors";
  write_all(tmp.path / "model.safetensors.index.json", json{{"weight_map", weight_map}}.dump());
  expect_error([&] { Checkpoint::open(tmp.path); }, "shard");
  // An index mapping a tensor to a shard that does not hold it.
  weight_map["model.norm.weight"] = "model-00001-of-00002.safetensors";
  weight_map["model.layers.0.extra.weight"] = "model-00002-of-00002.safetensors";
  write_all(tmp.path / "model.safetensors.index.json", json{{"weight_map", weight_map}}.dump());
  expect_error([&] { Checkpoint::open(tmp.path); }, "does not contain");
  weight_map.erase("model.layers.0.extra.weight");
  // Shards outside the folder: the index may name only files beside it.
  for (const char* outside : {"../model-00001-of-00002.safetensors", "/etc/passwd",
                              "sub/../../model-00001-of-00002.safetensors", ""}) {
    json escaping = weight_map;
    escaping["model.norm.weight"] = outside;
    write_all(tmp.path / "model.safetensors.index.json", json{{"weight_map", escaping}}.dump());
    expect_error([&] { Checkpoint::open(tmp.path); }, "invalid shard path");
  }
  // A tensor that two shards both hold: which copy is meant is unknowable.
  {
    const TensorView& norm = single.get("model.norm.weight");
    json header = {{norm.name, {{"dtype", dtype_name(norm.dtype)}, {"shape", norm.shape}, {"data_offsets", {0, norm.bytes}}}}};
    write_all(tmp.path / "model-00003-of-00003.safetensors",
              make_file(header.dump(), std::string(reinterpret_cast<const char*>(norm.data), norm.bytes)));
    json twice = weight_map;
    twice["model.extra_holder"] = "model-00003-of-00003.safetensors";
    write_all(tmp.path / "model.safetensors.index.json", json{{"weight_map", twice}}.dump());
    expect_error([&] { Checkpoint::open(tmp.path); }, "also appears in");
    fs::remove(tmp.path / "model-00003-of-00003.safetensors");
  }
  // Symbolic links are followed, wherever they point: the Hugging Face cache keeps shards as
  // links from snapshots/<revision>/ into blobs/.
  {
    const fs::path blobs = tmp.path.string() + "_blobs";
    fs::create_directories(blobs);
    fs::rename(tmp.path / "model-00002-of-00002.safetensors", blobs / "blob-2");
    fs::create_symlink(blobs / "blob-2", tmp.path / "model-00002-of-00002.safetensors");
    write_all(tmp.path / "model.safetensors.index.json", json{{"weight_map", weight_map}}.dump());
    EXPECT_EQ(Checkpoint::open(tmp.path).names(), names);
    fs::remove_all(blobs);
  }
  // A malformed index.
  write_all(tmp.path / "model.safetensors.index.json", "{\"weight_map\": ");
  expect_error([&] { Checkpoint::open(tmp.path); }, "JSON");
}

TEST(Safetensors, BrokenFiles) {
  TempDir tmp;
  int counter = 0;
  auto open_bytes = [&](const std::string& bytes) {
    fs::path p = tmp.path / fmt::format("broken{}.safetensors", counter++);
    write_all(p, bytes);
    return Checkpoint::open(p);
  };
  auto entry = [](const char* dtype, std::vector<int64_t> shape, uint64_t begin, uint64_t end) {
    return json{{"dtype", dtype}, {"shape", shape}, {"data_offsets", {begin, end}}};
  };
  const std::string eight(8, 'x');

  expect_error([&] { open_bytes("abc"); }, "truncated");
  expect_error([&] { open_bytes(""); }, "truncated");
  expect_error([&] { open_bytes(make_file("{}", "").substr(0, 8)); }, "header length");
  std::string huge(8, '\xff');
  expect_error([&] { open_bytes(huge + "{}"); }, "header length");
  expect_error([&] { open_bytes(make_file("{\"a\": {", "")); }, "JSON");
  expect_error([&] { open_bytes(make_file("[1, 2]", "")); }, "JSON");
  expect_error([&] { open_bytes(make_file(json{{"w", entry("Q4_K", {2}, 0, 8)}}.dump(), eight)); }, "dtype");
  expect_error([&] { open_bytes(make_file(json{{"w", entry("F32", {3}, 0, 8)}}.dump(), eight)); }, "mismatch");
  expect_error([&] { open_bytes(make_file(json{{"w", entry("F32", {-2}, 0, 8)}}.dump(), eight)); }, "negative");
  expect_error([&] { open_bytes(make_file(json{{"w", entry("F32", {4}, 0, 16)}}.dump(), eight)); }, "past the end");
  expect_error([&] { open_bytes(make_file(json{{"w", entry("F32", {1}, 8, 4)}}.dump(), eight)); }, "begin after end");
  expect_error(
      [&] {
        open_bytes(make_file(json{{"a", entry("F32", {2}, 0, 8)}, {"b", entry("F16", {2}, 6, 10)}}.dump(),
                             eight + eight));
      },
      "overlap");
  expect_error([&] { open_bytes(make_file(json{{"w", {{"dtype", "F32"}, {"shape", {1}}}}}.dump(), eight)); },
               "data_offsets");
  expect_error([&] { open_bytes(make_file(json{{"__metadata__", {{"k", 1}}}}.dump(), "")); }, "metadata");
  // Errors name the file and the tensor.
  expect_error([&] { open_bytes(make_file(json{{"my.tensor", entry("F32", {3}, 0, 8)}}.dump(), eight)); },
               "my.tensor");
  expect_error([&] { open_bytes(make_file(json{{"w", entry("F32", {3}, 0, 8)}}.dump(), eight)); },
               fmt::format("broken{}.safetensors", counter));

  // Valid edge cases: empty header, zero-size tensors sharing an offset.
  EXPECT_EQ(open_bytes(make_file("{}", "")).size(), 0u);
  Checkpoint edge = open_bytes(make_file(
      json{{"e", entry("F32", {0, 4}, 4, 4)}, {"a", entry("F32", {1}, 0, 4)}, {"b", entry("F32", {1}, 4, 8)}}.dump(),
      eight));
  EXPECT_EQ(edge.get("e").numel(), 0);
  EXPECT_TRUE(to_f32(edge.get("e")).empty());

  Checkpoint ckpt = Checkpoint::open(kTiny);
  expect_error([&] { ckpt.get("model.no_such.weight"); }, "not found");
  expect_error([&] { ckpt.get("model.no_such.weight"); }, "model.no_such.weight");
  expect_error([&] { Checkpoint::open(tmp.path / "nope.safetensors"); }, "does not exist");
  expect_error([&] { Checkpoint::open(tmp.path / "nope"); }, "does not exist");
  fs::create_directories(tmp.path / "empty_dir");
  expect_error([&] { Checkpoint::open(tmp.path / "empty_dir"); }, "neither");
}

// The reference reader's rules on data_offsets: taken in order, each tensor starts where the
// one before ends (no hole, no overlap), the first at 0, the last at the end of the data; and a
// name is given once. The headers are written as text: a JSON library would merge a repeated key.
TEST(Safetensors, DataOffsetsMustCoverTheDataExactly) {
  TempDir tmp;
  int counter = 0;
  auto open_bytes = [&](const std::string& header, const std::string& data) {
    fs::path p = tmp.path / fmt::format("cover{}.safetensors", counter++);
    write_all(p, make_file(header, data));
    return Checkpoint::open(p);
  };
  const std::string sixteen(16, 'x');
  const std::string a = R"("a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]})";
  const std::string b = R"("b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]})";
  // The reference's own layout opens, in either order of the entries.
  EXPECT_EQ(open_bytes("{" + a + ", " + b + "}", sixteen).size(), 2u);
  EXPECT_EQ(open_bytes("{" + b + ", " + a + "}", sixteen).size(), 2u);
  // A tensor named twice: the second entry would hide the first's bytes [0, 8).
  const std::string a_again = R"("a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]})";
  expect_error([&] { open_bytes("{" + a + ", " + a_again + "}", sixteen); }, "names tensor 'a' twice");
  // A hole between two tensors, and one before the first.
  const std::string b_late = R"("b": {"dtype": "F32", "shape": [1], "data_offsets": [12, 16]})";
  expect_error([&] { open_bytes("{" + a + ", " + b_late + "}", sixteen); },
               "bytes [8, 12) of the data section belong to no tensor (between 'a' and 'b')");
  expect_error([&] { open_bytes("{" + b_late + "}", sixteen); }, "bytes [0, 12) of the data section belong to no tensor (before 'b')");
  // Bytes after the last tensor (a file padded or cut wrong).
  expect_error([&] { open_bytes("{" + a + "}", sixteen); }, "the tensors end at byte 8 of the 16-byte data section");
  expect_error([&] { open_bytes("{}", sixteen); }, "end at byte 0 of the 16-byte");
  // An overlap names both tensors and their ranges.
  const std::string b_over = R"("b": {"dtype": "F32", "shape": [3], "data_offsets": [4, 16]})";
  expect_error([&] { open_bytes("{" + a + ", " + b_over + "}", sixteen); },
               "tensors 'a' and 'b' have overlapping data_offsets ([0, 8) and [4, 16))");
  // The checks compare the header with the file, so the loader's own writer passes them.
  const std::vector<float> values = {1, 2, 3};
  const std::vector<TensorData> tensors = {{"x", DType::F32, {3}, std::as_bytes(std::span(values))},
                                           {"y", DType::F32, {0}, {}}};
  write_safetensors(tmp.path / "written.safetensors", tensors);
  EXPECT_EQ(Checkpoint::open(tmp.path / "written.safetensors").size(), 2u);
}

TEST(Safetensors, HalfConversions) {
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(f16_to_f32(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_EQ(f16_to_f32(0x0400), std::ldexp(1.0f, -14));
  EXPECT_TRUE(std::signbit(f16_to_f32(0x8000)));
  EXPECT_EQ(f16_to_f32(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(f16_to_f32(0xfc00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7e00)));
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7c01)));

  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(bf16_to_f32(0x0001), std::ldexp(1.0f, -133));  // bf16 subnormal
  EXPECT_EQ(bf16_to_f32(0xff80), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(bf16_to_f32(0x7fc0)));

  // Every finite or infinite half and bfloat16 round-trips exactly; nan stays nan.
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const auto h = static_cast<uint16_t>(bits);
    const float f16 = f16_to_f32(h), bf16 = bf16_to_f32(h);
    if (std::isnan(f16)) {
      EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(f16))));
    } else {
      EXPECT_EQ(f32_to_f16(f16), h) << bits;
    }
    if (std::isnan(bf16)) {
      EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(bf16))));
    } else {
      EXPECT_EQ(static_cast<double>(bf16), bf16_reference(h)) << bits;
      EXPECT_EQ(f32_to_bf16(bf16), h) << bits;
    }
  }
  // Round to nearest even, overflow and underflow.
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);   // tie -> even (down)
  EXPECT_EQ(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);  // tie -> even (up)
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);           // tie to even zero
  EXPECT_EQ(f32_to_f16(std::ldexp(3.0f, -26)), 0x0001);
  EXPECT_EQ(f32_to_f16(-std::ldexp(1023.5f, -24)), 0x8400);      // rounds up into the normals
  EXPECT_EQ(f32_to_bf16(3.4e38f), 0x7f80);
}

TEST(Safetensors, WriterRoundTrip) {
  TempDir tmp;
  const std::vector<float> f32 = {1.5f, -2.25f, 0.0f, 1e-30f, 3.0f, 7.0f};
  std::vector<uint16_t> bf16;
  for (float v : f32) bf16.push_back(f32_to_bf16(v));
  const std::vector<int64_t> ids = {-1, 0, 1LL << 40};
  const std::vector<uint8_t> mask = {1, 0, 1, 1};
  auto as_bytes = [](const auto& v) { return std::as_bytes(std::span(v)); };

  const std::vector<TensorData> tensors = {
      {"hidden.f32", DType::F32, {2, 3}, as_bytes(f32)},
      {"hidden.bf16", DType::BF16, {3, 2}, as_bytes(bf16)},
      {"ids", DType::I64, {3}, as_bytes(ids)},
      {"mask", DType::BOOL, {4}, as_bytes(mask)},
      {"empty", DType::F16, {0}, {}},
  };
  const fs::path path = tmp.path / "dump.safetensors";
  write_safetensors(path, tensors, {{"step", "7"}});
  for (const auto& e : fs::directory_iterator(tmp.path))  // the temporary file was renamed into place
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();

  const std::string raw = read_all(path);
  uint64_t header_len;
  std::memcpy(&header_len, raw.data(), 8);
  EXPECT_EQ((8 + header_len) % 8, 0u);

  Checkpoint ckpt = Checkpoint::open(path);
  EXPECT_EQ(ckpt.size(), 5u);
  EXPECT_EQ(ckpt.metadata.at("step"), "7");
  EXPECT_EQ(ckpt.get("hidden.f32").shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(to_f32(ckpt.get("hidden.f32")), f32);
  std::vector<float> from_bf16 = to_f32(ckpt.get("hidden.bf16"));
  for (size_t i = 0; i < f32.size(); ++i) EXPECT_NEAR(from_bf16[i], f32[i], std::abs(f32[i]) / 128);
  EXPECT_EQ(to_i64(ckpt.get("ids")), ids);
  EXPECT_EQ(to_bool(ckpt.get("mask")), (std::vector<bool>{true, false, true, true}));
  EXPECT_EQ(ckpt.get("empty").bytes, 0u);
  expect_error([&] { to_i32(ckpt.get("ids")); }, "int32");

  // Bad writer input is refused before anything is written.
  const fs::path bad = tmp.path / "bad.safetensors";
  const std::vector<TensorData> mismatched = {{"x", DType::F32, {4}, as_bytes(f32)}};
  expect_error([&] { write_safetensors(bad, mismatched); }, "mismatch");
  const std::vector<TensorData> twice = {{"x", DType::F32, {6}, as_bytes(f32)}, {"x", DType::F32, {6}, as_bytes(f32)}};
  expect_error([&] { write_safetensors(bad, twice); }, "twice");
  EXPECT_FALSE(fs::exists(bad));
  expect_error([&] { write_safetensors(tmp.path / "no_dir" / "x.safetensors", tensors); }, "cannot open");
}

TEST(Safetensors, CorruptedBytesNeverCrash) {
  // Every truncation and many single-byte corruptions of a small valid file either open or throw
  // eaglevk::Error; anything else (another exception, a crash) fails the test.
  TempDir tmp;
  const std::vector<float> values = {1, 2, 3, 4};
  const std::vector<int64_t> ids = {5, 6};
  const std::vector<TensorData> tensors = {{"a", DType::F32, {2, 2}, std::as_bytes(std::span(values))},
                                           {"b", DType::I64, {2}, std::as_bytes(std::span(ids))}};
  const fs::path good = tmp.path / "good.safetensors";
  write_safetensors(good, tensors, {{"k", "v"}});
  const std::string original = read_all(good);
  const fs::path path = tmp.path / "mutated.safetensors";
  auto try_open = [&](const std::string& bytes) {
    write_all(path, bytes);
    try {
      Checkpoint ckpt = Checkpoint::open(path);
      for (const auto& name : ckpt.names()) EXPECT_LE(ckpt.get(name).bytes, bytes.size());
    } catch (const eaglevk::Error&) {
    }
  };
  for (size_t n = 0; n < original.size(); ++n) try_open(original.substr(0, n));
  uint32_t state = 12345;
  for (int i = 0; i < 2000; ++i) {
    state = state * 1664525u + 1013904223u;
    std::string bytes = original;
    bytes[(state >> 8) % bytes.size()] = static_cast<char>(state >> 24);
    try_open(bytes);
  }
}

namespace {

// The 8-byte length field followed by a short header; the file itself stays small.
std::string with_length_field(uint64_t length) {
  std::string out(8, '\0');
  std::memcpy(out.data(), &length, 8);
  return out + "{}";
}

}  // namespace

// The safetensors format refuses headers over 100,000,000 bytes; so does the loader, before it
// compares the length with the file size (which used to be the only check), so that the error
// names the limit and a large file with a bogus length is never parsed as JSON.
TEST(Safetensors, HeaderLengthOverTheFormatLimitIsRefused) {
  for (uint64_t length : {uint64_t(1) << 63, ~uint64_t(0), uint64_t(100'000'001), kMaxSafetensorsHeaderBytes + 1}) {
    const std::string bytes = with_length_field(length);
    expect_error([&] { parse_safetensors({reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()}, "x.safetensors"); },
                 "is over the 100000000-byte limit");
  }
  // At the limit, the length is checked against the file as before.
  const std::string at_limit = with_length_field(kMaxSafetensorsHeaderBytes);
  expect_error([&] { parse_safetensors({reinterpret_cast<const std::byte*>(at_limit.data()), at_limit.size()}, "x"); },
               "runs past the end of the file");
}

TEST(Safetensors, IndexParsesWithoutTouchingShards) {
  const SafetensorsIndex index = parse_safetensors_index(
      R"({"metadata": {"total_size": 16, "format": "pt"}, "weight_map": {"a": "m-1.safetensors", "b": "m-2.safetensors"}})",
      "index.json");
  EXPECT_EQ(index.weight_map.size(), 2u);
  EXPECT_EQ(index.metadata.at("total_size"), "16");
  EXPECT_EQ(index.metadata.at("format"), "pt");
  expect_error([&] { parse_safetensors_index(R"({"weight_map": {"a": "../x"}})", "index.json"); }, "invalid shard path");
  expect_error([&] { parse_safetensors_index(R"({"weight_map": {"a": 1}})", "index.json"); }, "is not a string");
  expect_error([&] { parse_safetensors_index("[", "index.json"); }, "malformed JSON");
  expect_error([&] { parse_safetensors_index(std::string(kMaxSafetensorsIndexBytes + 1, ' '), "index.json"); },
               "limit for a safetensors index");
  // A file over the limit is refused before it is read (a sparse file: no disk space used).
  TempDir tmp;
  write_all(tmp.path / "model.safetensors.index.json", "{}");
  fs::resize_file(tmp.path / "model.safetensors.index.json", kMaxSafetensorsIndexBytes + 1);
  expect_error([&] { Checkpoint::open(tmp.path); }, "limit for a safetensors index");
}
