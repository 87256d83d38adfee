// GGUF files translated into the Hugging Face shape the model loaders read (loader/model_files):
// the config and tensor names of llama.cpp's own conversions checked against the safetensors
// checkpoints they were converted from, the eagle3 specifics (absolute d2t, both tap-id key
// spellings, a file without tap ids), the llama4 defaults and the side config.json rules.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <eaglevk/error.h>

#include "loader/gguf.h"
#include "loader/model_files.h"
#include "loader/safetensors.h"
#include "support/loader_test_util.h"

namespace eaglevk::loader {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kAssets = fs::path(EAGLEVK_ASSETS);
const fs::path kLlama3 = kAssets / "gguf" / "tiny-llama3";
const fs::path kLlama4 = kAssets / "gguf" / "tiny-llama4";

struct TempDir {
  fs::path path;
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path = fs::temp_directory_path() / fmt::format("eaglevk_mf_{}_{}", info->name(), ::getpid());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

json read_json(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

bool has_note(const ModelFiles& m, const std::string& words) {
  for (const auto& n : m.notes)
    if (n.find(words) != std::string::npos) return true;
  return false;
}

// A copy of a GGUF file with its metadata changed by `edit` (tensors unchanged).
void rewrite_gguf(const fs::path& from, const fs::path& to,
                  const std::function<void(std::vector<std::pair<std::string, GgufValue>>&)>& edit) {
  GgufFile file = GgufFile::open(from);
  std::vector<std::pair<std::string, GgufValue>> metadata;
  for (const auto& key : file.header.key_order) metadata.emplace_back(key, *file.header.find(key));
  edit(metadata);
  std::vector<GgufTensorData> tensors;
  for (const auto& t : file.header.tensors) {
    TensorView v = file.view(t);
    tensors.push_back({t.name, t.dtype, v.shape, v.span()});
  }
  write_gguf(to, metadata, tensors, file.header.alignment);
}

void erase_key(std::vector<std::pair<std::string, GgufValue>>& m, const std::string& key) {
  std::erase_if(m, [&](const auto& kv) { return kv.first == key; });
}

// The config built from llama.cpp's `llama` GGUF agrees with the config.json it was converted
// from, and every tensor appears under its safetensors name with its safetensors shape.
TEST(ModelFiles, Llama3GgufMatchesItsSafetensorsSource) {
  ModelFiles g = open_model_files(kLlama3 / "tiny-llama3-q4_k_m.gguf");
  ModelFiles s = open_model_files(kAssets / "tiny-llama3");
  EXPECT_EQ(g.format, "gguf");
  EXPECT_EQ(s.format, "safetensors");
  EXPECT_EQ(g.config["architectures"][0], "LlamaForCausalLM");
  for (const char* key : {"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                          "num_key_value_heads", "head_dim", "vocab_size", "bos_token_id"})
    EXPECT_EQ(g.config[key], s.config[key]) << key;
  EXPECT_NEAR(g.config["rms_norm_eps"].get<double>(), s.config["rms_norm_eps"].get<double>(), 1e-12);
  EXPECT_EQ(g.config["rope_theta"].get<double>(), s.config["rope_theta"].get<double>());
  // rope scaling only survives as rope_freqs.weight; the parameters come back from it.
  for (const char* key : {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"})
    EXPECT_EQ(g.config["rope_scaling"][key].get<double>(), s.config["rope_scaling"][key].get<double>()) << key;
  EXPECT_TRUE(has_note(g, "recovered from rope_freqs.weight"));

  size_t matched = 0;
  for (const auto& [name, t] : s.checkpoint.tensors) {
    const TensorView* gt = g.checkpoint.find(name);
    if (name == "lm_head.weight" && !gt) continue;  // tied in one, stored in the other
    ASSERT_NE(gt, nullptr) << name;
    EXPECT_EQ(gt->shape, t.shape) << name;
    const bool qk = name.ends_with("q_proj.weight") || name.ends_with("k_proj.weight");
    EXPECT_EQ(gt->rope_permuted_heads, qk ? (name.ends_with("q_proj.weight") ? 8u : 4u) : 0u) << name;
    ++matched;
  }
  EXPECT_GE(matched, 8u * 9u + 2u);
  // Q4_K_M: Q4_K with Q6_K for some tensors, norms in F32.
  EXPECT_EQ(g.checkpoint.find("model.layers.0.self_attn.q_proj.weight")->dtype, DType::Q4_K);
  EXPECT_EQ(g.checkpoint.find("model.norm.weight")->dtype, DType::F32);
}

// The F16 file's weights are the safetensors' bf16 weights (equal, but for values below f16's
// normal range, which round to its subnormal step of 2^-24: within 3e-8); q and k rows are in
// llama.cpp's order (within each head, the even elements of the rotation pairs first).
constexpr float kF16OfBf16 = 3.0e-8f;
TEST(ModelFiles, F16WeightsAreTheSafetensorsWeightsUpToTheRopePermutation) {
  ModelFiles g = open_model_files(kLlama3 / "tiny-llama3-f16.gguf");
  ModelFiles s = open_model_files(kAssets / "tiny-llama3");
  const TensorView& gv = *g.checkpoint.find("model.layers.3.mlp.down_proj.weight");
  std::vector<float> gd = to_f32(gv), sd = to_f32(*s.checkpoint.find("model.layers.3.mlp.down_proj.weight"));
  ASSERT_EQ(gd.size(), sd.size());
  for (size_t i = 0; i < gd.size(); ++i) ASSERT_NEAR(gd[i], sd[i], kF16OfBf16) << i;

  const TensorView& gq = *g.checkpoint.find("model.layers.3.self_attn.q_proj.weight");
  const TensorView& sq = *s.checkpoint.find("model.layers.3.self_attn.q_proj.weight");
  std::vector<float> a = to_f32(gq), b = to_f32(sq);
  const int64_t cols = sq.shape[1], hd = 32, half = hd / 2;
  ASSERT_EQ(gq.rope_permuted_heads, 8u);
  EXPECT_NE(a, b);  // the rows really are reordered
  for (int64_t h = 0; h < 8; ++h)
    for (int64_t i = 0; i < half; ++i)
      for (int64_t p = 0; p < 2; ++p) {
        const int64_t hf_row = h * hd + p * half + i, gguf_row = h * hd + 2 * i + p;
        for (int64_t c = 0; c < cols; ++c)
          ASSERT_NEAR(a[gguf_row * cols + c], b[hf_row * cols + c], kF16OfBf16)
              << "head " << h << " pair " << i << " part " << p;
      }
}

// eagle3: d2t holds absolute target ids in GGUF and offsets in safetensors; the config says
// where the tap ids came from.
TEST(ModelFiles, Eagle3GgufAbsoluteD2tAndTapIds) {
  ModelFiles g = open_model_files(kLlama3 / "tiny-llama3-eagle3-f32.gguf");
  ModelFiles s = open_model_files(kAssets / "tiny-llama3-eagle3");
  EXPECT_EQ(g.config["architectures"][0], "LlamaForCausalLMEagle3");
  EXPECT_EQ(g.config["eaglevk_source_format"], "gguf");
  EXPECT_EQ(g.config["eagle_aux_hidden_state_layer_ids"], json({2, 4, 5}));
  EXPECT_EQ(g.config["draft_vocab_size"], s.config["draft_vocab_size"]);
  EXPECT_TRUE(has_note(g, "tap layers 2,4,5 from eagle3.target_layers"));
  std::vector<int64_t> gd = to_i64(*g.checkpoint.find("d2t")), sd = to_i64(*s.checkpoint.find("d2t"));
  ASSERT_EQ(gd.size(), sd.size());
  for (size_t i = 0; i < gd.size(); ++i) ASSERT_EQ(gd[i], int64_t(i) + sd[i]) << i;
  // The hidden norm and the fc layer under the original format's names.
  EXPECT_NE(g.checkpoint.find("midlayer.hidden_norm.weight"), nullptr);
  EXPECT_NE(g.checkpoint.find("fc.weight"), nullptr);
  EXPECT_EQ(to_f32(*g.checkpoint.find("fc.weight")), to_f32(*s.checkpoint.find("fc.weight")));
}

TEST(ModelFiles, Eagle3TapIdKeySpellingsAndMissingIds) {
  TempDir dir;
  const fs::path src = kLlama3 / "tiny-llama3-eagle3-q8_0.gguf";
  // The other spelling seen in the wild.
  rewrite_gguf(src, dir.path / "extract.gguf", [](auto& m) {
    GgufValue ids = std::find_if(m.begin(), m.end(), [](auto& kv) { return kv.first == "eagle3.target_layers"; })->second;
    erase_key(m, "eagle3.target_layers");
    ids.value = json({1, 3, 6});
    m.emplace_back("eagle3.extract_layers", ids);
  });
  ModelFiles e = open_model_files(dir.path / "extract.gguf");
  EXPECT_EQ(e.config["eagle_aux_hidden_state_layer_ids"], json({1, 3, 6}));
  EXPECT_TRUE(has_note(e, "from eagle3.extract_layers"));

  rewrite_gguf(src, dir.path / "none.gguf", [](auto& m) { erase_key(m, "eagle3.target_layers"); });
  try {
    open_model_files(dir.path / "none.gguf");
    FAIL() << "an eagle3 file without tap ids loaded";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("must name its tap layers (eagle3.target_layers or eagle3.extract_layers)"),
              std::string::npos)
        << err.what();
  }
}

TEST(ModelFiles, UnsupportedArchitectureAndMissingKeys) {
  TempDir dir;
  const fs::path src = kLlama3 / "tiny-llama3-eagle3-q8_0.gguf";
  rewrite_gguf(src, dir.path / "qwen.gguf", [](auto& m) {
    for (auto& [k, v] : m)
      if (k == "general.architecture") v.value = "qwen2";
  });
  EXPECT_THROW(
      {
        try {
          open_model_files(dir.path / "qwen.gguf");
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("GGUF architecture 'qwen2' is not supported"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
  rewrite_gguf(src, dir.path / "nolen.gguf", [](auto& m) { erase_key(m, "eagle3.embedding_length"); });
  EXPECT_THROW(
      {
        try {
          open_model_files(dir.path / "nolen.gguf");
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("GGUF key 'eagle3.embedding_length' is missing"), std::string::npos)
              << e.what();
          throw;
        }
      },
      Error);
  // Neither a folder nor a GGUF file.
  std::ofstream(dir.path / "junk.bin") << "not a model";
  EXPECT_THROW(open_model_files(dir.path / "junk.bin"), Error);
}

// A vocabulary of more tokens than the model has embedding rows would encode ids the model cannot
// take; fewer tokens is a padded vocabulary and loads.
TEST(ModelFiles, GgufTokensBeyondTheVocabularySizeAreRefused) {
  TempDir dir;
  const fs::path src = kLlama3 / "tiny-llama3-q4_0.gguf";
  auto with_vocab_size = [&](const std::string& name, int64_t n) {
    rewrite_gguf(src, dir.path / name, [n](auto& m) {
      erase_key(m, "llama.vocab_size");
      m.emplace_back("llama.vocab_size", GgufValue{GgufType::U32, GgufType::U8, json(n)});
    });
    return dir.path / name;
  };
  const fs::path small = with_vocab_size("small.gguf", 4000);
  eaglevk::testing::expect_error([&] { open_model_files(small); },
                                 "tokenizer.ggml.tokens has 4096 entries but llama.vocab_size is 4000");
  EXPECT_EQ(open_model_files(with_vocab_size("padded.gguf", 4096)).config["vocab_size"], 4096);
}

// llama4 files lack the chunk size, the temperature-tuning floor and the NoPE schedule: from a
// config.json beside the file when there is one, else the documented defaults, said in notes.
TEST(ModelFiles, Llama4DefaultsAndTheConfigBesideTheFile) {
  TempDir dir;
  fs::copy_file(kLlama4 / "tiny-llama4-q4_k_m.gguf", dir.path / "t.gguf");
  ModelFiles bare = open_model_files(dir.path / "t.gguf");
  EXPECT_EQ(bare.config["architectures"][0], "Llama4ForCausalLM");
  EXPECT_EQ(bare.config["attention_chunk_size"], 8192);
  EXPECT_EQ(bare.config["floor_scale"], 8192);
  EXPECT_TRUE(has_note(bare, "attention_chunk_size = 8192 (documented default"));

  const json side = read_json(kAssets / "tiny-llama4" / "config.json");
  const json& text = side.contains("text_config") ? side["text_config"] : side;
  fs::copy_file(kAssets / "tiny-llama4" / "config.json", dir.path / "config.json");
  ModelFiles with = open_model_files(dir.path / "t.gguf");
  EXPECT_EQ(with.config["attention_chunk_size"], text["attention_chunk_size"]);
  EXPECT_EQ(with.config["floor_scale"], text["floor_scale"]);
  EXPECT_EQ(with.config["no_rope_layers"], text["no_rope_layers"]);
  EXPECT_TRUE(has_note(with, "attention_chunk_size = 64 from the config.json beside the file"));

  // A draft kept in its target's folder does not take the target's config.
  fs::copy_file(kLlama4 / "tiny-llama4-eagle3-q8_0.gguf", dir.path / "d.gguf");
  ModelFiles draft = open_model_files(dir.path / "d.gguf");
  EXPECT_TRUE(has_note(draft, "the config.json beside the file is not used: its num_hidden_layers is 8, the file's 1"));
  EXPECT_TRUE(has_note(draft, "recovered from rope_freqs.weight"));
}

// rope_freqs factors computed from llama3 scaling parameters give those parameters back.
TEST(ModelFiles, RecoversLlama3RopeScaling) {
  const int head_dim = 128;
  const double theta = 500000.0;
  for (auto [factor, low, high, orig] : {std::tuple{8.0, 1.0, 4.0, 8192}, std::tuple{32.0, 1.0, 4.0, 8192}}) {
    std::vector<float> f;
    const double low_wl = orig / low, high_wl = orig / high;
    for (int i = 0; i < head_dim / 2; ++i) {
      const double inv = std::pow(theta, -2.0 * i / head_dim), wl = 2 * M_PI / inv;
      double scaled;
      if (wl < high_wl) scaled = inv;
      else if (wl > low_wl) scaled = inv / factor;
      else {
        const double smooth = (orig / wl - low) / (high - low);
        scaled = (1 - smooth) * inv / factor + smooth * inv;
      }
      f.push_back(float(inv / scaled));
    }
    auto r = recover_llama3_rope_scaling(f, head_dim, theta);
    ASSERT_TRUE(r.has_value()) << factor;
    EXPECT_EQ(r->factor, factor);
    EXPECT_EQ(r->low_freq_factor, low);
    EXPECT_EQ(r->high_freq_factor, high);
    EXPECT_EQ(r->original_max_position_embeddings, orig);
  }
  // Factors no standard parameter set makes.
  std::vector<float> odd(64, 1.0f);
  odd[40] = 3.7f;
  EXPECT_FALSE(recover_llama3_rope_scaling(odd, head_dim, theta).has_value());
}

}  // namespace
}  // namespace eaglevk::loader
