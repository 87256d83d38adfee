#include "loader/hf_config.h"
#include "support/loader_test_util.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <numbers>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <eaglevk/error.h>

namespace fs = std::filesystem;
using namespace eaglevk::loader;
using eaglevk::testing::expect_error;
using nlohmann::json;

namespace {

const fs::path kAssets = EAGLEVK_ASSETS;

struct TempDir {
  fs::path path;
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path = fs::temp_directory_path() / fmt::format("eaglevk_cfg_{}_{}_{}", info->test_suite_name(), info->name(), ::getpid());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream out(path / name, std::ios::binary);
    out << text;
  }
};

json tiny_config() {
  std::ifstream in(kAssets / "tiny-llama3" / "config.json");
  return json::parse(in);
}

// A config.json with `edit` applied, written to `tmp`, then loaded.
template <typename Edit>
LlamaConfig load_edited(const TempDir& tmp, Edit&& edit) {
  json config = tiny_config();
  edit(config);
  tmp.write("config.json", config.dump());
  return load_llama_config(tmp.path);
}

// transformers' llama3 rope, in double, written from the formula rather than the library.
std::vector<double> reference_inv_freq(int head_dim, double theta, double factor, double low, double high, double orig) {
  std::vector<double> out;
  for (int j = 0; j < head_dim / 2; ++j) {
    double inv = 1.0 / std::pow(theta, 2.0 * j / head_dim);
    double wavelen = 2 * std::numbers::pi / inv;
    if (wavelen < orig / high) {
      out.push_back(inv);
    } else if (wavelen > orig / low) {
      out.push_back(inv / factor);
    } else {
      double smooth = (orig / wavelen - low) / (high - low);
      out.push_back((1 - smooth) * inv / factor + smooth * inv);
    }
  }
  return out;
}

}  // namespace

TEST(HfConfig, TinyLlama3) {
  LlamaConfig c = load_llama_config(kAssets / "tiny-llama3");
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_EQ(c.hidden_size, 256);
  EXPECT_EQ(c.intermediate_size, 768);
  EXPECT_EQ(c.num_hidden_layers, 8);
  EXPECT_EQ(c.num_attention_heads, 8);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.vocab_size, 4096);
  EXPECT_EQ(c.max_position_embeddings, 2048);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-5f);
  EXPECT_EQ(c.rope_theta, 500000.0f);
  ASSERT_TRUE(c.rope_scaling.has_value());
  EXPECT_EQ(c.rope_scaling->type, "llama3");
  EXPECT_EQ(c.rope_scaling->factor, 8.0f);
  EXPECT_EQ(c.rope_scaling->low_freq_factor, 1.0f);
  EXPECT_EQ(c.rope_scaling->high_freq_factor, 4.0f);
  EXPECT_EQ(c.rope_scaling->original_max_position_embeddings, 8192);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int>{4092, 4095}));
  EXPECT_EQ(c.bos_token_id, 4091);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.mlp_bias);
}

TEST(HfConfig, EagleDraftNeedsItsArchitectureAccepted) {
  const fs::path dir = kAssets / "tiny-llama3-eagle3";
  expect_error([&] { load_llama_config(dir); }, "LlamaForCausalLMEagle3");
  LlamaConfig c = load_llama_config(dir, {"LlamaForCausalLMEagle3"});
  EXPECT_EQ(c.num_hidden_layers, 1);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int>{4095}));  // no generation_config.json there
}

TEST(HfConfig, DefaultsAndVariants) {
  TempDir tmp;
  LlamaConfig c = load_edited(tmp, [](json& j) {
    for (const char* key : {"head_dim", "num_key_value_heads", "rope_theta", "tie_word_embeddings", "bos_token_id"})
      j.erase(key);
    j["rope_scaling"] = nullptr;
    j["eos_token_id"] = 7;
  });
  EXPECT_EQ(c.head_dim, 32);  // 256 / 8
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.rope_theta, 10000.0f);
  EXPECT_FALSE(c.rope_scaling.has_value());
  EXPECT_EQ(c.bos_token_id, -1);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int>{7}));

  // generation_config.json: its bos wins; its eos ids come first, config's extras are kept.
  tmp.write("generation_config.json", R"({"bos_token_id": 1, "eos_token_id": [9, 7]})");
  c = load_llama_config(tmp.path);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int>{9, 7}));
  tmp.write("generation_config.json", R"({"eos_token_id": 3})");
  c = load_llama_config(tmp.path);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int>{3, 7}));
  fs::remove(tmp.path / "generation_config.json");

  c = load_edited(tmp, [](json& j) { j["rope_scaling"] = {{"rope_type", "default"}}; });
  EXPECT_FALSE(c.rope_scaling.has_value());
  c = load_edited(tmp, [](json& j) { j.erase("rope_scaling"); });
  EXPECT_FALSE(c.rope_scaling.has_value());
  // Legacy "type" spelling and integral floats for int fields.
  c = load_edited(tmp, [](json& j) {
    j["rope_scaling"].erase("rope_type");
    j["rope_scaling"]["type"] = "llama3";
    j["rope_scaling"]["original_max_position_embeddings"] = 8192.0;
  });
  EXPECT_EQ(c.rope_scaling->original_max_position_embeddings, 8192);
  c = load_edited(tmp, [](json& j) { j["tie_word_embeddings"] = true; j["attention_bias"] = true; });
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_TRUE(c.attention_bias);
}

TEST(HfConfig, RopeParametersNesting) {
  TempDir tmp;
  LlamaConfig c = load_edited(tmp, [](json& j) {
    j["rope_parameters"] = j["rope_scaling"];
    j["rope_parameters"]["rope_theta"] = 250000.0;
    j.erase("rope_scaling");
    j.erase("rope_theta");
  });
  EXPECT_EQ(c.rope_theta, 250000.0f);
  ASSERT_TRUE(c.rope_scaling.has_value());
  EXPECT_EQ(c.rope_scaling->factor, 8.0f);
  EXPECT_EQ(c.rope_scaling->original_max_position_embeddings, 8192);

  c = load_edited(tmp, [](json& j) {
    j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000}};
    j.erase("rope_scaling");
    j.erase("rope_theta");
  });
  EXPECT_EQ(c.rope_theta, 10000.0f);
  EXPECT_FALSE(c.rope_scaling.has_value());
}

TEST(HfConfig, Errors) {
  TempDir tmp;
  expect_error([&] { load_llama_config(tmp.path); }, "does not exist");
  tmp.write("config.json", "{\"hidden_size\": ");
  expect_error([&] { load_llama_config(tmp.path); }, "JSON");
  tmp.write("config.json", "[]");
  expect_error([&] { load_llama_config(tmp.path); }, "not a JSON object");

  expect_error([&] { load_edited(tmp, [](json& j) { j.erase("hidden_size"); }); }, "missing required field 'hidden_size'");
  expect_error([&] { load_edited(tmp, [](json& j) { j.erase("vocab_size"); }); }, "config.json");
  expect_error([&] { load_edited(tmp, [](json& j) { j.erase("architectures"); }); }, "architectures");
  expect_error([&] { load_edited(tmp, [](json& j) { j["architectures"] = {"MistralForCausalLM"}; }); },
               "unsupported architecture 'MistralForCausalLM'");
  expect_error([&] { load_edited(tmp, [](json& j) { j["hidden_size"] = "256"; }); }, "must be an integer");
  expect_error([&] { load_edited(tmp, [](json& j) { j["hidden_size"] = 256.5; }); }, "hidden_size");
  expect_error([&] { load_edited(tmp, [](json& j) { j["rms_norm_eps"] = "small"; }); }, "must be a number");
  expect_error([&] { load_edited(tmp, [](json& j) { j["mlp_bias"] = 0; }); }, "true or false");
  expect_error([&] { load_edited(tmp, [](json& j) { j["eos_token_id"] = {1, "x"}; }); }, "eos_token_id");
  expect_error([&] { load_edited(tmp, [](json& j) { j["num_hidden_layers"] = 0; }); }, "must be positive");
  expect_error([&] { load_edited(tmp, [](json& j) { j["vocab_size"] = -5; }); }, "vocab_size");
  expect_error([&] { load_edited(tmp, [](json& j) { j["hidden_size"] = 1LL << 40; }); }, "out of int range");
  expect_error(
      [&] {
        load_edited(tmp, [](json& j) {
          j.erase("head_dim");
          j["num_attention_heads"] = 7;
          j["num_key_value_heads"] = 7;
        });
      },
      "not divisible");
  expect_error([&] { load_edited(tmp, [](json& j) { j["num_key_value_heads"] = 3; }); }, "num_key_value_heads");
  expect_error([&] { load_edited(tmp, [](json& j) { j["head_dim"] = 31; }); }, "head_dim");
  expect_error([&] { load_edited(tmp, [](json& j) { j["rope_scaling"]["rope_type"] = "yarn"; }); },
               "unsupported rope type 'yarn'");
  expect_error([&] { load_edited(tmp, [](json& j) { j["rope_scaling"].erase("rope_type"); }); }, "rope_type");
  expect_error([&] { load_edited(tmp, [](json& j) { j["rope_scaling"].erase("factor"); }); }, "'factor'");
  expect_error([&] { load_edited(tmp, [](json& j) { j["rope_scaling"] = 8; }); }, "rope_scaling");
  expect_error([&] { load_edited(tmp, [](json& j) { j["rope_scaling"]["high_freq_factor"] = 0.5; }); },
               "high_freq_factor");
  expect_error([&] { load_edited(tmp, [](json& j) { j["rope_theta"] = -1; }); }, "rope_theta");
  // The MLP is SwiGLU: an activation other than SiLU is refused by name, not run as SiLU.
  expect_error([&] { load_edited(tmp, [](json& j) { j["hidden_act"] = "gelu"; }); },
               "hidden_act 'gelu' is not supported");
  expect_error([&] { load_edited(tmp, [](json& j) { j["hidden_act"] = "relu"; }); }, "'relu'");
  expect_error([&] { load_edited(tmp, [](json& j) { j["hidden_act"] = 3; }); }, "hidden_act");
  // transformers' two spellings of SiLU, and its default when the field is absent.
  for (const char* act : {"silu", "swish"})
    EXPECT_EQ(load_edited(tmp, [&](json& j) { j["hidden_act"] = act; }).hidden_size, 256) << act;
  EXPECT_EQ(load_edited(tmp, [](json& j) { j.erase("hidden_act"); }).hidden_size, 256);

  // generation_config.json is checked too.
  tmp.write("config.json", tiny_config().dump());
  tmp.write("generation_config.json", R"({"eos_token_id": "end"})");
  expect_error([&] { load_llama_config(tmp.path); }, "generation_config.json");

  expect_error([] { rope_inv_freq(7, 10000, std::nullopt); }, "head_dim");
}

TEST(HfConfig, ParseFromJsonNamesSource) {
  json config = tiny_config();
  config.erase("intermediate_size");
  expect_error([&] { parse_llama_config(config, "my-source"); }, "my-source");
  EXPECT_EQ(json_field::required_int(json{{"n", 3}}, "n", "s"), 3);
  EXPECT_EQ(json_field::optional_float(json{{"x", nullptr}}, "x", "s"), std::nullopt);
  EXPECT_EQ(json_field::int_or_int_list(json::object(), "eos", "s"), std::vector<int>{});
  EXPECT_EQ(json_field::optional_string(json{{"t", "a"}}, "t", "s"), "a");
  expect_error([] { json_field::required_bool(json::array(), "b", "src"); }, "expected a JSON object");
}

TEST(HfConfig, RopeInvFreqMatchesReference) {
  RopeScaling llama3{"llama3", 8, 1, 4, 8192};
  for (int head_dim : {32, 64, 128}) {
    for (double theta : {10000.0, 500000.0}) {
      std::vector<float> unscaled = rope_inv_freq(head_dim, static_cast<float>(theta), std::nullopt);
      std::vector<float> scaled = rope_inv_freq(head_dim, static_cast<float>(theta), llama3);
      std::vector<double> ref_unscaled = reference_inv_freq(head_dim, theta, 1, 1, 4, 1e30);
      std::vector<double> ref_scaled = reference_inv_freq(head_dim, theta, 8, 1, 4, 8192);
      ASSERT_EQ(unscaled.size(), size_t(head_dim / 2));
      ASSERT_EQ(scaled.size(), size_t(head_dim / 2));
      for (int j = 0; j < head_dim / 2; ++j) {
        EXPECT_NEAR(unscaled[j], ref_unscaled[j], 1e-6 * ref_unscaled[j]) << head_dim << " " << theta << " " << j;
        EXPECT_NEAR(scaled[j], ref_scaled[j], 1e-6 * ref_scaled[j]) << head_dim << " " << theta << " " << j;
      }
    }
  }
}

TEST(HfConfig, RopeInvFreqHasThreeBands) {
  // hd 128, theta 500000: wavelen = 2π·500000^(j/64) is below 8192/4 for j <= 28, above 8192/1 for
  // j >= 35, and in between (smoothed) for j = 29..34.
  RopeScaling llama3{"llama3", 8, 1, 4, 8192};
  std::vector<float> base = rope_inv_freq(128, 500000, std::nullopt);
  std::vector<float> scaled = rope_inv_freq(128, 500000, llama3);
  for (int j = 0; j < 64; ++j) {
    if (j <= 28) {
      EXPECT_EQ(scaled[j], base[j]) << j;
    } else if (j >= 35) {
      EXPECT_EQ(scaled[j], base[j] / 8.0f) << j;
    } else {
      EXPECT_LT(scaled[j], base[j]) << j;
      EXPECT_GT(scaled[j], base[j] / 8.0f) << j;
    }
  }
  EXPECT_EQ(base[0], 1.0f);
}

// transformers' rule: high_freq_factor must exceed low_freq_factor (the smoothing divides by
// their difference); a config with equal factors is refused by name.
TEST(HfConfig, RopeScalingEqualFactorsAreRefused) {
  TempDir tmp;
  expect_error(
      [&] {
        load_edited(tmp, [](json& j) {
          j["rope_scaling"]["low_freq_factor"] = 2.0;
          j["rope_scaling"]["high_freq_factor"] = 2.0;
        });
      },
      "high_freq_factor 2 must be greater than low_freq_factor 2");
}

// rope_inv_freq itself, given equal factors directly, still never divides by zero.
TEST(HfConfig, RopeInvFreqEqualFactorsHasNoMediumBand) {
  const RopeScaling equal{"llama3", 8, 2, 2, 8192};
  std::vector<float> base = rope_inv_freq(128, 500000, std::nullopt);
  std::vector<float> scaled = rope_inv_freq(128, 500000, equal);
  for (int j = 0; j < 64; ++j) {
    EXPECT_TRUE(std::isfinite(scaled[j])) << j;
    EXPECT_TRUE(scaled[j] == base[j] || scaled[j] == base[j] / 8.0f) << j;
  }
  EXPECT_EQ(scaled[0], base[0]);
  EXPECT_EQ(scaled[63], base[63] / 8.0f);
}
