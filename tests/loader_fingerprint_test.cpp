// SHA-256 against FIPS 180-2's vectors and coreutils' sha256sum, and checkpoint fingerprints:
// the same files under another path or another JSON layout keep theirs; a changed weight byte,
// config value, side file, tensor shape or GGUF metadata key changes the part that names it; a
// sampled digest covers the first, middle and last MiB of each file and nothing else.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <eaglevk/error.h>

#include "loader/checkpoint_fingerprint.h"
#include "loader/gguf.h"
#include "loader/safetensors.h"
#include "loader/sha256.h"

namespace eaglevk::loader {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kAssets = fs::path(EAGLEVK_ASSETS);

struct TempDir {
  fs::path path;
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path = fs::temp_directory_path() / fmt::format("eaglevk_fp_{}_{}", info->name(), ::getpid());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  // A writable copy of an asset folder or file.
  fs::path copy(const fs::path& from, const std::string& name) const {
    const fs::path to = path / name;
    fs::copy(from, to, fs::copy_options::recursive);
    if (fs::is_directory(to))
      for (const auto& f : fs::directory_iterator(to)) fs::permissions(f.path(), fs::perms::owner_write, fs::perm_options::add);
    else
      fs::permissions(to, fs::perms::owner_write, fs::perm_options::add);
    return to;
  }
};

void flip_byte(const fs::path& file, uint64_t offset) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(std::streamoff(offset));
  char c = 0;
  f.read(&c, 1);
  c = char(c ^ 0x01);
  f.seekp(std::streamoff(offset));
  f.write(&c, 1);
  ASSERT_TRUE(f.good()) << file;
}

json fp(const fs::path& path, uint64_t whole = kWholeContentBytes) { return fingerprint_json(fingerprint_checkpoint(path, whole)); }

TEST(Sha256, PublishedVectors) {
  // FIPS 180-2, appendix B, and the two-block vector of its 896-bit message.
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrs"
                       "mnopqrstnopqrstu"),
            "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  // One million 'a', fed in pieces of every size from 1 to 130 bytes: the block buffer's
  // partial fills and whole-block runs give the one-shot digest.
  const std::string million(1000000, 'a');
  const std::string want = "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";
  EXPECT_EQ(sha256_hex(million), want);
  Sha256 pieces;
  for (size_t at = 0, n = 1; at < million.size(); at += n, n = n % 130 + 1)
    pieces.update(std::string_view(million).substr(at, n));
  EXPECT_EQ(pieces.hex(), want);
}

// coreutils' sha256sum is an implementation of its own: files of lengths around the padding
// boundaries, and a model file, digest alike.
TEST(Sha256, AgreesWithSha256sum) {
  TempDir dir;
  std::vector<fs::path> files = {kAssets / "tiny-llama3" / "config.json", kAssets / "tiny-llama3-eagle3" / "model.safetensors"};
  for (size_t n : {0, 1, 55, 56, 63, 64, 65, 119, 120, 128, 1000}) {
    files.push_back(dir.path / fmt::format("len{}", n));
    std::string text;
    for (size_t i = 0; i < n; ++i) text += char('a' + i % 26);
    std::ofstream(files.back(), std::ios::binary) << text;
  }
  for (const fs::path& file : files) {
    FILE* pipe = ::popen(fmt::format("sha256sum '{}'", file.string()).c_str(), "r");
    ASSERT_NE(pipe, nullptr);
    char out[65] = {};
    ASSERT_EQ(std::fread(out, 1, 64, pipe), 64u) << file;
    ::pclose(pipe);
    uint64_t size = 0;
    EXPECT_EQ(sha256_file(file, &size), std::string(out)) << file;
    EXPECT_EQ(size, fs::file_size(file));
  }
  EXPECT_THROW(sha256_file(dir.path / "absent"), Error);
}

TEST(Fingerprint, SameFilesUnderAnotherPathOrLayoutAgree) {
  TempDir dir;
  const fs::path asset = kAssets / "tiny-llama3-eagle3";
  const fs::path copy = dir.copy(asset, "draft");
  const json a = fp(asset);
  EXPECT_EQ(a["format"], "safetensors");
  EXPECT_EQ(a["content_scope"], "whole");
  EXPECT_EQ(a["weight_bytes"].get<uint64_t>(), fs::file_size(asset / "model.safetensors"));
  EXPECT_EQ(a["tensor_count"].get<uint64_t>(), Checkpoint::open(asset).size());
  EXPECT_EQ(fp(copy), a);
  EXPECT_EQ(fp(fs::relative(copy)), a) << "a relative path names the same files";
  // config.json with other indentation and keys in reverse order.
  const json config = json::parse(std::ifstream(copy / "config.json"));
  nlohmann::ordered_json reversed;
  std::vector<std::string> keys;
  for (const auto& [key, value] : config.items()) keys.push_back(key);
  for (auto k = keys.rbegin(); k != keys.rend(); ++k) reversed[*k] = config[*k];
  std::ofstream(copy / "config.json", std::ios::trunc) << reversed.dump(7);
  EXPECT_EQ(fp(copy), a);
  EXPECT_EQ(fingerprint_difference(json::parse(a.dump()), a), "") << "a record read back from a file";
}

TEST(Fingerprint, EachChangeNamesItsPart) {
  TempDir dir;
  const fs::path asset = kAssets / "tiny-llama3";
  const json a = fp(asset);
  ASSERT_TRUE(a["files"].contains("tokenizer_config.json")) << a.dump();

  const fs::path weights = dir.copy(asset, "weights");
  flip_byte(weights / "model.safetensors", fs::file_size(weights / "model.safetensors") - 1);
  const json w = fp(weights);
  EXPECT_EQ(w["tensors"], a["tensors"]);
  EXPECT_EQ(w["config"], a["config"]);
  EXPECT_NE(w["content"], a["content"]);
  EXPECT_NE(w["sha256"], a["sha256"]);
  EXPECT_EQ(fingerprint_difference(a, w), fmt::format("its weights differ (sha256 {}... there, {}... here)",
                                                      a["content"].get<std::string>().substr(0, 12),
                                                      w["content"].get<std::string>().substr(0, 12)));

  const fs::path config = dir.copy(asset, "config");
  json c = json::parse(std::ifstream(config / "config.json"));
  c["rms_norm_eps"] = c["rms_norm_eps"].get<double>() * 2;
  std::ofstream(config / "config.json", std::ios::trunc) << c.dump();
  EXPECT_EQ(fingerprint_difference(a, fp(config)), "its config.json differs");

  const fs::path side = dir.copy(asset, "side");
  std::ofstream(side / "tokenizer_config.json", std::ios::app) << "\n";
  EXPECT_EQ(fingerprint_difference(a, fp(side)), "its tokenizer_config.json differs");
  fs::copy_file(asset / "tokenizer_config.json", side / "tokenizer_config.json", fs::copy_options::overwrite_existing);
  EXPECT_EQ(fp(side), a);
  fs::remove(side / "generation_config.json");
  EXPECT_EQ(fingerprint_difference(a, fp(side)), "its generation_config.json is there but not here");
  EXPECT_EQ(fingerprint_difference(fp(side), a), "its generation_config.json is here but not there");

  EXPECT_EQ(fingerprint_difference(json::object(), a), "its recorded fingerprint has no 'sha256'");
}

// Two checkpoints with the same bytes in tensors of another shape.
TEST(Fingerprint, TensorShapesCount) {
  TempDir dir;
  const std::vector<float> values = {1, 2, 3, 4, 5, 6};
  const auto bytes = std::as_bytes(std::span(values));
  for (const auto& [name, shape] : {std::pair{"a", std::vector<int64_t>{2, 3}}, std::pair{"b", std::vector<int64_t>{3, 2}}}) {
    fs::create_directories(dir.path / name);
    std::ofstream(dir.path / name / "config.json") << "{}";
    const TensorData t{"w", DType::F32, shape, bytes};
    write_safetensors(dir.path / name / "model.safetensors", std::span(&t, 1));
  }
  EXPECT_EQ(fingerprint_difference(fp(dir.path / "a"), fp(dir.path / "b")),
            "its tensors differ in names, types or shapes (1 tensors there, 1 here)");
}

// Above the whole-content limit the digest reads the first, middle and last MiB of each file:
// a byte changed there changes it, one elsewhere does not (the documented limit of sampling).
TEST(Fingerprint, SampledContentCoversTheFirstMiddleAndLastMiB) {
  TempDir dir;
  const fs::path asset = kAssets / "tiny-llama3";
  const uint64_t size = fs::file_size(asset / "model.safetensors");
  ASSERT_GT(size, 12 * kContentSampleBytes);
  const json whole = fp(asset), sampled = fp(asset, 0);
  EXPECT_EQ(sampled["content_scope"], "sampled");
  EXPECT_NE(sampled["content"], whole["content"]);
  const uint64_t mid = size / 2 - kContentSampleBytes / 2;
  // Bytes of tensor data only (a byte of the header would make it another checkpoint, or none).
  uint64_t header = 0;
  std::ifstream(asset / "model.safetensors", std::ios::binary).read(reinterpret_cast<char*>(&header), 8);
  const uint64_t data = 8 + header;
  ASSERT_LT(data + 10, kContentSampleBytes);
  const fs::path copy = dir.copy(asset, "copy");
  struct Case {
    uint64_t offset;
    bool seen;
  };
  for (const Case& k : {Case{data + 10, true}, Case{kContentSampleBytes - 1, true}, Case{kContentSampleBytes, false},
                        Case{4 * kContentSampleBytes, false}, Case{mid - 1, false}, Case{mid, true},
                        Case{mid + kContentSampleBytes - 1, true}, Case{mid + kContentSampleBytes, false},
                        Case{size - kContentSampleBytes - 1, false}, Case{size - kContentSampleBytes, true},
                        Case{size - 1, true}}) {
    flip_byte(copy / "model.safetensors", k.offset);
    EXPECT_EQ(fp(copy, 0)["content"] != sampled["content"], k.seen) << "byte " << k.offset;
    EXPECT_NE(fp(copy)["content"], whole["content"]) << "byte " << k.offset << ": the whole digest sees every byte";
    flip_byte(copy / "model.safetensors", k.offset);
  }
  EXPECT_EQ(fp(copy, 0), sampled);
}

// A GGUF file: its metadata (whatever its layout in the file), its tensor directory, its bytes.
TEST(Fingerprint, GgufMetadataTensorsAndBytes) {
  TempDir dir;
  const fs::path asset = kAssets / "gguf" / "tiny-llama3" / "tiny-llama3-eagle3-q8_0.gguf";
  const json a = fp(asset);
  EXPECT_EQ(a["format"], "gguf");
  const GgufFile g = GgufFile::open(asset);
  EXPECT_EQ(a["tensor_count"].get<uint64_t>(), g.header.tensors.size());
  EXPECT_EQ(a["weight_bytes"].get<uint64_t>(), fs::file_size(asset));

  // Rewritten with the keys in reverse order: the same metadata and tensors, other bytes.
  std::vector<std::pair<std::string, GgufValue>> metadata;
  for (auto k = g.header.key_order.rbegin(); k != g.header.key_order.rend(); ++k)
    if (*k != "general.name") metadata.emplace_back(*k, g.header.metadata.at(*k));
  const std::vector<std::pair<std::string, GgufValue>> unnamed = metadata;
  if (const GgufValue* name = g.header.find("general.name")) metadata.emplace(metadata.begin(), "general.name", *name);
  std::vector<GgufTensorData> tensors;
  for (const GgufTensorInfo& t : g.header.tensors)
    tensors.push_back({t.name, t.dtype, t.shape(), std::span(g.data(t), t.bytes)});
  const fs::path rewritten = dir.path / "rewritten.gguf";
  write_gguf(rewritten, metadata, tensors, g.header.alignment);
  const json r = fp(rewritten);
  EXPECT_EQ(r["config"], a["config"]);
  EXPECT_EQ(r["tensors"], a["tensors"]);

  metadata = unnamed;
  metadata.emplace_back("general.name", GgufValue{GgufType::STRING, GgufType::U8, "another head"});
  const fs::path renamed = dir.path / "renamed.gguf";
  write_gguf(renamed, metadata, tensors, g.header.alignment);
  EXPECT_EQ(fingerprint_difference(a, fp(renamed)), "its GGUF metadata differs");

  const fs::path copy = dir.copy(asset, "copy.gguf");
  EXPECT_EQ(fp(copy), a) << "the folder's side files are the same (none)";
  flip_byte(copy, fs::file_size(copy) - 1);
  EXPECT_NE(fingerprint_difference(a, fp(copy)).find("its weights differ"), std::string::npos);
  // A config.json beside a GGUF file is read by its loader: it counts.
  fs::remove(copy);
  dir.copy(asset, "copy.gguf");
  std::ofstream(dir.path / "config.json") << "{}";
  EXPECT_EQ(fingerprint_difference(a, fp(copy)), "its config.json is here but not there");
}

TEST(Fingerprint, BadPathsAreErrors) {
  TempDir dir;
  std::ofstream(dir.path / "notes.txt") << "hello";
  try {
    fingerprint_checkpoint(dir.path / "absent");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos) << e.what();
  }
  try {
    fingerprint_checkpoint(dir.path / "notes.txt");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("neither a model folder nor a GGUF file"), std::string::npos) << e.what();
  }
  EXPECT_THROW(fingerprint_checkpoint(dir.path), Error) << "a folder without config.json";
}

}  // namespace
}  // namespace eaglevk::loader
