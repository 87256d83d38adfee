// llama.cpp's Llama-4 vision files (mmproj GGUF) translated into the tower a Hugging Face
// checkpoint has: the files under assets/gguf/tiny-llama4-vision were written by llama.cpp's
// convert_hf_to_gguf.py --mmproj from assets/tiny-llama4-vision (assets/gguf/README.md), so
// every tensor must come back as the checkpoint's own (bf16: the same bytes; f16: the same
// values rounded to f16; Q8_0: within a block's rounding), the vision_config as config.json's,
// and a GGUF text model's image token ids and preprocessing as the Hugging Face folder's.
// Then every way such a file can be wrong for the model it is given with.
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "loader/gguf.h"
#include "loader/llama4_image_prompt.h"
#include "loader/mmproj.h"
#include "loader/model_files.h"
#include "loader/quant.h"
#include "support/loader_test_util.h"
#include "support/vision_gguf.h"

namespace eaglevk::loader {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::expect_error;

const fs::path kAssets = fs::path(EAGLEVK_ASSETS);
const fs::path kFolder = kAssets / "tiny-llama4-vision";
const fs::path kMmprojDir = kAssets / "gguf" / "tiny-llama4-vision";
fs::path mmproj(const char* type) { return kMmprojDir / fmt::format("mmproj-tiny-llama4-vision-{}.gguf", type); }

struct TempDir {
  fs::path path;
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path = fs::temp_directory_path() / fmt::format("eaglevk_mmproj_{}_{}", info->name(), ::getpid());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

bool is_tower(const std::string& name) {
  return name.rfind("vision_model.", 0) == 0 || name.rfind("multi_modal_projector.", 0) == 0;
}

std::vector<float> values(const TensorView& t) {
  std::vector<float> out(size_t(t.numel()));
  if (t.dtype == DType::F32 || t.dtype == DType::F16 || t.dtype == DType::BF16)
    to_f32(t, out);
  else
    dequantize(t.dtype, t.data, out);
  return out;
}

// The bf16 file's tensors, with edits: `meta` may change the metadata, `tensor` may rename a
// tensor (return its new name) or drop it (return "").
using MetaEdit = std::function<void(std::vector<std::pair<std::string, GgufValue>>&)>;
using TensorEdit = std::function<std::string(const std::string&)>;
fs::path rewritten(const fs::path& dir, const char* name, MetaEdit meta, TensorEdit tensor = {}) {
  const GgufFile base = GgufFile::open(mmproj("bf16"));
  std::vector<std::pair<std::string, GgufValue>> kv;
  for (const std::string& key : base.header.key_order) kv.emplace_back(key, base.header.metadata.at(key));
  if (meta) meta(kv);
  std::vector<GgufTensorData> tensors;
  for (const GgufTensorInfo& info : base.header.tensors) {
    const std::string renamed = tensor ? tensor(info.name) : info.name;
    if (!renamed.empty())
      tensors.push_back({renamed, info.dtype, info.shape(), {base.data(info), size_t(info.bytes)}});
  }
  const fs::path out = dir / name;
  write_gguf(out, kv, tensors, base.header.alignment);
  return out;
}

void set_key(std::vector<std::pair<std::string, GgufValue>>& kv, const std::string& key, GgufValue v) {
  for (auto& [k, value] : kv)
    if (k == key) {
      value = std::move(v);
      return;
    }
  kv.emplace_back(key, std::move(v));
}

// The tower of `files` equals the folder's own: same names and shapes; values within `tolerance`
// of each block's largest magnitude (0: bit-equal floats).
void expect_same_tower(const ModelFiles& files, double tolerance) {
  const ModelFiles folder = open_model_files(kFolder);
  size_t count = 0;
  for (const auto& [name, want] : folder.checkpoint.tensors) {
    if (!is_tower(name)) continue;
    ++count;
    const TensorView* got = files.checkpoint.find(name);
    ASSERT_NE(got, nullptr) << name;
    ASSERT_EQ(got->shape, want.shape) << name;
    const std::vector<float> a = values(*got), b = values(want);
    ASSERT_EQ(a.size(), b.size()) << name;
    for (size_t i = 0; i < a.size(); i += 32) {
      float amax = 0;
      for (size_t j = i; j < std::min(a.size(), i + 32); ++j) amax = std::max(amax, std::abs(b[j]));
      for (size_t j = i; j < std::min(a.size(), i + 32); ++j) {
        if (tolerance == 0)
          ASSERT_EQ(a[j], b[j]) << name << " element " << j;
        else
          ASSERT_LE(std::abs(a[j] - b[j]), tolerance * amax + 1e-30) << name << " element " << j;
      }
    }
  }
  EXPECT_EQ(count, 42u);
  size_t tower = 0;
  for (const auto& [name, t] : files.checkpoint.tensors) tower += is_tower(name);
  EXPECT_EQ(tower, count);
}

TEST(Mmproj, Bf16FileIsTheCheckpointsOwnTower) {
  ModelFiles files = open_model_files(kFolder);
  const json original = files.config;
  attach_llama4_mmproj(files, mmproj("bf16"));
  EXPECT_EQ(files.mmproj, mmproj("bf16"));
  expect_same_tower(files, 0);
  // Matrices keep their bf16 bytes (the same upload as the folder's).
  const TensorView& q = files.checkpoint.get("vision_model.model.layers.1.self_attn.q_proj.weight");
  const ModelFiles folder = open_model_files(kFolder);
  const TensorView& q0 = folder.checkpoint.get("vision_model.model.layers.1.self_attn.q_proj.weight");
  EXPECT_EQ(q.dtype, DType::BF16);
  EXPECT_EQ(0, std::memcmp(q.data, q0.data, q.bytes));
  // The vision_config is config.json's, field by field.
  const json& v = files.config["vision_config"];
  const json& w = original["vision_config"];
  for (const char* key : {"image_size", "patch_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                          "num_attention_heads", "projector_input_dim", "projector_output_dim", "vision_output_dim",
                          "hidden_act", "multi_modal_projector_bias"})
    EXPECT_EQ(v[key], w[key]) << key;
  for (const char* key : {"norm_eps", "pixel_shuffle_ratio", "rope_theta"})
    EXPECT_FLOAT_EQ(v[key].get<float>(), w[key].get<float>()) << key;
  for (const char* key : {"boi_token_index", "eoi_token_index", "image_token_index"})
    EXPECT_EQ(files.config[key], original[key]) << key;
  // preprocessor_config.json is beside the folder: it stays the preprocessing.
  EXPECT_FALSE(files.preprocessor_config.has_value());
  bool noted = false;
  for (const std::string& n : files.notes) noted |= n.find("replaces the checkpoint's own (42 tensors)") != std::string::npos;
  EXPECT_TRUE(noted);
}

TEST(Mmproj, F16AndQ8_0FilesHoldTheSameWeightsRounded) {
  ModelFiles f16 = open_model_files(kFolder);
  attach_llama4_mmproj(f16, mmproj("f16"));
  // bf16 values are f16 values unless below 2^-17 (f16's subnormal step is 2^-24).
  expect_same_tower(f16, 1.0 / 4096);
  ModelFiles q8 = open_model_files(kFolder);
  attach_llama4_mmproj(q8, mmproj("q8_0"));
  // Q8_0: d = amax / 127 stored as f16, each value within d / 2 of it.
  expect_same_tower(q8, 0.51 / 127 + 1.0 / 2048);
  EXPECT_EQ(q8.checkpoint.get("vision_model.model.layers.0.mlp.fc1.weight").dtype, DType::Q8_0);
}

TEST(Mmproj, GgufTextModelTakesItsImageTokensFromItsVocabulary) {
  TempDir dir;
  const fs::path text = testing::write_tiny_llama4_vision_gguf(dir.path);
  ModelFiles files = open_model_files(text);
  // The builder's premise: the converter's f16 rows of the shared vocabulary are the vision
  // checkpoint's rows rounded to f16.
  {
    const ModelFiles folder = open_model_files(kFolder);
    const std::vector<float> a = values(files.checkpoint.get("model.embed_tokens.weight"));
    const std::vector<float> b = values(folder.checkpoint.get("language_model.model.embed_tokens.weight"));
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], f16_to_f32(f32_to_f16(b[i]))) << i;
  }
  EXPECT_FALSE(files.config.contains("vision_config"));
  attach_llama4_mmproj(files, mmproj("f16"));
  EXPECT_EQ(files.config["boi_token_index"], 4096);
  EXPECT_EQ(files.config["eoi_token_index"], 4097);
  EXPECT_EQ(files.config["image_token_index"], 4099);
  ASSERT_TRUE(files.preprocessor_config.has_value());
  // The file's preprocessing is the Hugging Face processor's for this model.
  const Llama4ImageConfig from_gguf = load_llama4_image_config(files);
  const Llama4ImageConfig from_folder = load_llama4_image_config(kFolder);
  EXPECT_EQ(from_gguf.tile, from_folder.tile);
  EXPECT_EQ(from_gguf.max_patches, from_folder.max_patches);
  EXPECT_EQ(from_gguf.resize_to_max_canvas, from_folder.resize_to_max_canvas);
  EXPECT_EQ(from_gguf.rescale, from_folder.rescale);
  for (int c = 0; c < 3; ++c) {
    EXPECT_EQ(from_gguf.mean[c], from_folder.mean[c]);
    EXPECT_EQ(from_gguf.std[c], from_folder.std[c]);
  }
  const Llama4ImageTokens a = load_llama4_image_tokens(files, load_tokenizer(files));
  const ModelFiles folder = open_model_files(kFolder);
  const Llama4ImageTokens b = load_llama4_image_tokens(kFolder, load_tokenizer(folder));
  EXPECT_EQ(a.tokens_per_tile, b.tokens_per_tile);
  EXPECT_EQ(a.ids.image_start, b.ids.image_start);
  EXPECT_EQ(a.ids.image_end, b.ids.image_end);
  EXPECT_EQ(a.ids.image, b.ids.image);
  EXPECT_EQ(a.ids.patch, b.ids.patch);
  EXPECT_EQ(a.ids.tile_x_sep, b.ids.tile_x_sep);
  EXPECT_EQ(a.ids.tile_y_sep, b.ids.tile_y_sep);
}

// llama.cpp's converter wrote the pre-MLP norm as v.blk.N.ln2 until gemma4's mapping took the
// same Hugging Face name (the committed files, from de3ff81, say attn_post_norm).
TEST(Mmproj, Ln2IsTheOlderNameOfThePreMlpNorm) {
  TempDir dir;
  auto to_ln2 = [](const std::string& n) {
    const size_t at = n.find("attn_post_norm");
    return at == std::string::npos ? n : n.substr(0, at) + "ln2" + n.substr(at + 14);
  };
  ModelFiles files = open_model_files(kFolder);
  attach_llama4_mmproj(files, rewritten(dir.path, "ln2.gguf", {}, to_ln2));
  expect_same_tower(files, 0);
}

TEST(Mmproj, Refusals) {
  TempDir dir;
  auto attach_to = [](const fs::path& model, const fs::path& file) {
    ModelFiles files = open_model_files(model);
    attach_llama4_mmproj(files, file);
  };
  auto attach = [&](const fs::path& file) { attach_to(kFolder, file); };
  expect_error([&] { attach(dir.path / "none.gguf"); }, "does not exist");
  std::ofstream(dir.path / "junk.gguf") << "{\"not\": \"gguf\"}";
  expect_error([&] { attach(dir.path / "junk.gguf"); }, "not a GGUF file");
  expect_error([&] { attach(kAssets / "gguf/tiny-llama4/tiny-llama4-q4_k_m.gguf"); }, "not 'clip'");
  expect_error([&] { open_model_files(mmproj("f16")); }, "vision (mmproj) file, not a model");
  expect_error(
      [&] {
        attach(rewritten(dir.path, "gemma.gguf", [](auto& kv) {
          set_key(kv, "clip.projector_type", {GgufType::STRING, GgufType::U8, "gemma3"});
        }));
      },
      "'gemma3' vision projector");
  expect_error(
      [&] {
        attach(rewritten(dir.path, "noenc.gguf", [](auto& kv) {
          set_key(kv, "clip.has_vision_encoder", {GgufType::BOOL, GgufType::U8, false});
        }));
      },
      "no vision encoder");
  expect_error(
      [&] {
        attach(rewritten(dir.path, "silu.gguf",
                         [](auto& kv) { set_key(kv, "clip.use_gelu", {GgufType::BOOL, GgufType::U8, false}); }));
      },
      "use_gelu");
  expect_error(
      [&] {
        attach(rewritten(dir.path, "wide.gguf", [](auto& kv) {
          set_key(kv, "clip.vision.projection_dim", {GgufType::U32, GgufType::U8, 512});
        }));
      },
      "projection_dim 512 differs from the text model's hidden size 256");
  expect_error(
      [&] {
        attach(rewritten(dir.path, "nofc.gguf", {},
                         [](const std::string& n) { return n == "mm.model.fc.weight" ? "" : n; }));
      },
      "tensor 'mm.model.fc.weight' is missing");
  expect_error(
      [&] {
        attach(rewritten(dir.path, "nobias.gguf", {},
                         [](const std::string& n) { return n == "v.blk.1.attn_q.bias" ? "" : n; }));
      },
      "tensor 'v.blk.1.attn_q.bias' is missing");
  expect_error(
      [&] {
        attach(rewritten(dir.path, "extra.gguf", {},
                         [](const std::string& n) { return n == "v.blk.1.ln1.weight" ? "v.blk.2.ln1.weight" : n; }));
      },
      "unexpected tensor 'v.blk.2.ln1.weight'");
  expect_error(
      [&] {
        attach(rewritten(dir.path, "both.gguf", {}, [](const std::string& n) {
          return n == "v.blk.0.ln1.bias" ? "v.blk.0.ln2.bias" : n;
        }));
      },
      "two tensors map to 'vision_model.model.layers.0.post_attention_layernorm.bias'");
  // The text model it is given with.
  expect_error([&] { attach_to(kAssets / "tiny-llama3", mmproj("f16")); }, "goes with a Llama-4 text model");
  expect_error([&] { attach_to(kAssets / "gguf/tiny-llama4/tiny-llama4-f16.gguf", mmproj("f16")); },
               "vocabulary has no <|image_start|> token");
}

}  // namespace
}  // namespace eaglevk::loader
