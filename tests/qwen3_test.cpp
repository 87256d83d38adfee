// Qwen3 dense (Qwen3ForCausalLM, GGUF `qwen3`), the third target family: tiny random-weight
// checkpoints written at test time (support/synthetic.h; head_dim 64 apart from hidden / heads,
// per-head q/k norms; one with its own lm_head, one tied to embed_tokens) against the plain C++
// float reference (support/reference_llama.h, written apart from the engine): the last-position
// logits of several prompts within the golden tests' tolerance, and greedy decoding step by step.
// The same weights as a `qwen3` GGUF file written with loader::write_gguf (llama.cpp's names,
// stated here apart from the loader's table) give the same bits. An EAGLE-3 head (a Llama layer,
// as published Qwen3 heads are) over the Qwen3 target is lossless, chained and as a tree, in the
// library and from the CLI (with tiny-llama3's tokenizer.json beside the weights: Qwen's own,
// with its NFC normalizer, is refused by name). A qwen3 GGUF file carrying tiny-llama3's
// vocabulary under the `qwen2` pre-tokenizer runs from the CLI.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <eaglevk/error.h>

#include "loader/gguf.h"
#include "loader/model_files.h"
#include "models/eagle3.h"
#include "models/target.h"
#include "runtime/engine/generate.h"
#include "runtime/engine/decoder.h"
#include "support/decoding.h"
#include "support/target_runner.h"
#include "support/golden.h"
#include "support/gpu_fixture.h"
#include "support/process.h"
#include "support/real_dims.h"
#include "support/reference_llama.h"
#include "support/synthetic.h"

namespace eaglevk::testing {
namespace {

namespace fs = std::filesystem;

// The golden tests' tolerance on logits (eaglevk keeps the KV cache in f16 as the reference
// does; the rest differs by summation order).
constexpr double kLogitTolerance = 2e-3;
constexpr int32_t kVocab = 4096, kBos = kVocab - 3;
constexpr uint32_t kLayers = 4;

// llama.cpp's GGUF names for a Qwen3 block, HF suffix -> GGUF suffix.
const std::map<std::string, std::string> kGgufBlockNames = {
    {"input_layernorm.weight", "attn_norm.weight"},         {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},           {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},      {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},      {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},            {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
};

std::string gguf_name(const std::string& hf) {
  if (hf == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf == "model.norm.weight") return "output_norm.weight";
  if (hf == "lm_head.weight") return "output.weight";
  const std::string prefix = "model.layers.";
  const size_t dot = hf.find('.', prefix.size());
  return "blk." + hf.substr(prefix.size(), dot - prefix.size()) + "." + kGgufBlockNames.at(hf.substr(dot + 1));
}

loader::GgufValue u32(int64_t v) { return {loader::GgufType::U32, loader::GgufType::U8, v}; }
loader::GgufValue f32(double v) { return {loader::GgufType::F32, loader::GgufType::U8, v}; }

// The checkpoint's tensors under llama.cpp's names with the metadata its converter writes for
// Qwen3 (no vocab_size key; without `tokenizer_from`, no tokenizer: the vocabulary comes from
// token_embd's rows). With it, that GGUF file's tokenizer.ggml.* keys, its pre-tokenizer named
// `qwen2` as Qwen's files name theirs.
void write_qwen3_gguf(const fs::path& dir, const fs::path& file, const fs::path& tokenizer_from = {}) {
  const nlohmann::json c = loader::json_field::read_file(dir / "config.json");
  const loader::Checkpoint ckpt = loader::Checkpoint::open(dir);
  std::vector<std::pair<std::string, loader::GgufValue>> meta = {
      {"general.architecture", {loader::GgufType::STRING, loader::GgufType::U8, "qwen3"}},
      {"qwen3.block_count", u32(c["num_hidden_layers"])},
      {"qwen3.context_length", u32(c["max_position_embeddings"])},
      {"qwen3.embedding_length", u32(c["hidden_size"])},
      {"qwen3.feed_forward_length", u32(c["intermediate_size"])},
      {"qwen3.attention.head_count", u32(c["num_attention_heads"])},
      {"qwen3.attention.head_count_kv", u32(c["num_key_value_heads"])},
      {"qwen3.attention.key_length", u32(c["head_dim"])},
      {"qwen3.attention.value_length", u32(c["head_dim"])},
      {"qwen3.attention.layer_norm_rms_epsilon", f32(c["rms_norm_eps"])},
      {"qwen3.rope.freq_base", f32(c["rope_theta"])},
      {"tokenizer.ggml.bos_token_id", u32(c["bos_token_id"])},
      {"tokenizer.ggml.eos_token_id", u32(c["eos_token_id"])},
  };
  if (!tokenizer_from.empty()) {
    const loader::GgufFile source = loader::GgufFile::open(tokenizer_from);
    std::erase_if(meta, [](const auto& kv) { return kv.first.rfind("tokenizer.", 0) == 0; });
    for (const std::string& key : source.header.key_order)
      if (key.rfind("tokenizer.ggml.", 0) == 0) meta.emplace_back(key, source.header.metadata.at(key));
    for (auto& [key, value] : meta)
      if (key == "tokenizer.ggml.pre") value.value = "qwen2";
  }
  std::vector<loader::GgufTensorData> tensors;
  for (const std::string& name : ckpt.names()) {
    const loader::TensorView& t = ckpt.get(name);
    tensors.push_back({gguf_name(name), t.dtype, t.shape, t.span()});
  }
  loader::write_gguf(file, meta, tensors);
}

// The checkpoints, written once per process and removed at exit.
struct Checkpoints {
  fs::path root, untied, tied, draft, gguf, tied_gguf, tokenizer_gguf;
  Checkpoints() {
    root = fs::temp_directory_path() / fmt::format("eaglevk-qwen3-{}", ::getpid());
    fs::remove_all(root);
    untied = root / "qwen3-tiny";
    tied = root / "qwen3-tiny-tied";
    draft = root / "qwen3-tiny-eagle3";
    gguf = root / "gguf" / "qwen3-tiny.gguf";
    tied_gguf = root / "gguf-tied" / "qwen3-tiny-tied.gguf";
    tokenizer_gguf = root / "gguf-tokenizer" / "qwen3-tiny.gguf";
    SynthOptions o;
    o.layers = kLayers;
    o.tokenizer_dir = asset("tiny-llama3");  // for the CLI: Qwen's own tokenizer is not supported
    write_synthetic_checkpoint(SynthKind::Qwen3_Tiny, untied, o);
    o.tokenizer_dir.clear();
    o.tie_embeddings = true;
    o.seed = 2;
    write_synthetic_checkpoint(SynthKind::Qwen3_Tiny, tied, o);
    SynthOptions d;
    d.aux_layers = {1, 2, 3};
    d.seed = 3;
    write_synthetic_checkpoint(SynthKind::Eagle3_Qwen3_Tiny, draft, d);
    fs::create_directories(gguf.parent_path());
    fs::create_directories(tied_gguf.parent_path());
    write_qwen3_gguf(untied, gguf);
    write_qwen3_gguf(tied, tied_gguf);
    fs::create_directories(tokenizer_gguf.parent_path());
    write_qwen3_gguf(untied, tokenizer_gguf, asset("gguf/tiny-llama3/tiny-llama3-f16.gguf"));
  }
  ~Checkpoints() { fs::remove_all(root); }
};

const Checkpoints& checkpoints() {
  static Checkpoints c;
  return c;
}

const models::TargetModel& target(bool tied) {
  static models::TargetModel untied = models::load_target(gpu().ctx, checkpoints().untied);
  static models::TargetModel tied_model = models::load_target(gpu().ctx, checkpoints().tied);
  return tied ? tied_model : untied;
}

const fs::path& folder(bool tied) { return tied ? checkpoints().tied : checkpoints().untied; }

uint64_t synthetic_parameters(bool tied) {
  SynthOptions o;
  o.layers = kLayers;
  o.tie_embeddings = tied;
  uint64_t n = 0;
  for (const SynthTensor& t : synthetic_tensors(SynthKind::Qwen3_Tiny, o)) n += t.bytes() / 2;  // all BF16
  return n;
}

TEST_F(GpuTest, Qwen3ConfigAndWeights) {
  for (bool tied : {false, true}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    const models::TargetModel& m = target(tied);
    const auto* qwen = std::get_if<models::Qwen3Model>(&m.family);
    ASSERT_NE(qwen, nullptr);
    EXPECT_EQ(m.architecture(), "Qwen3ForCausalLM");
    EXPECT_EQ(m.config().head_dim, 64);  // not hidden / heads = 32
    EXPECT_EQ(m.config().rope_theta, 1e6f);
    EXPECT_EQ(qwen->layers.size(), kLayers);
    EXPECT_EQ(qwen->layers[0].llama.qkv.rows, 4u * 64 + 2 * 2 * 64);
    EXPECT_EQ(m.parameters(), synthetic_parameters(tied));
    EXPECT_EQ(qwen->lm_head.buffer ? false : true, tied);
    if (tied) {
      EXPECT_EQ(m.lm_head().data.buffer, m.embed().data.buffer);
    }
  }
}

class Qwen3Reference : public GpuTest, public ::testing::WithParamInterface<bool> {};

TEST_P(Qwen3Reference, LastLogitsMatchTheFloatReference) {
  const bool tied = GetParam();
  TargetRunner runner(gpu(), target(tied), 128, 16);
  for (uint32_t n : {1u, 6u, 23u}) {  // one pass, and prefills of one and two passes of 16 rows
    SCOPED_TRACE(fmt::format("{} tokens", n));
    const std::vector<int32_t> ids = random_prompt(n, 100 + n, kBos, kVocab);
    const std::vector<float> got = last_logits(runner, ids, 16);
    const std::vector<double> want = ref_llama3_last_logits(folder(tied), ids);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_TRUE(all_close(got, want, kLogitTolerance, 0));
    EXPECT_EQ(argmax(got), argmax(std::vector<float>(want.begin(), want.end())));
  }
}

// Each greedy token is the reference's argmax after the prompt and the tokens before it, unless
// the reference's top two lie within the tolerance (then either is right, and the rest of the
// sequence follows the engine's choice, which the reference is then run on).
TEST_P(Qwen3Reference, GreedyDecodingFollowsTheFloatReference) {
  const bool tied = GetParam();
  engine::Decoder runner = plain_decoder(target(tied), 128, 16);
  std::vector<int32_t> ids = random_prompt(7, 5, kBos, kVocab);
  engine::GenerationOptions o;
  o.n_predict = 12;
  o.ignore_eos = true;
  const std::vector<int32_t> tokens = testing::generate(runner, ids, o).tokens;
  ASSERT_EQ(tokens.size(), 12u);
  size_t decided = 0;  // steps whose top two the reference tells apart
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::vector<double> want = ref_llama3_last_logits(folder(tied), ids);
    std::vector<double> sorted = want;
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
    const int32_t best = int32_t(std::max_element(want.begin(), want.end()) - want.begin());
    if (sorted[0] - sorted[1] > 2 * kLogitTolerance) {
      EXPECT_EQ(tokens[i], best) << "step " << i;
      ++decided;
    }
    ids.push_back(tokens[i]);
  }
  // Near-ties everywhere would leave nothing compared.
  EXPECT_GE(decided, tokens.size() / 2);
}

INSTANTIATE_TEST_SUITE_P(Qwen3, Qwen3Reference, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "tied" : "untied"; });

// The GGUF file holds the same bf16 bytes: the device gets the same weights, the logits the
// same bits; the config comes from qwen3.* keys (tied where the file has no output.weight).
TEST_F(GpuTest, Qwen3GgufLoadsAndMatchesTheFolderBitForBit) {
  for (bool tied : {false, true}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    const fs::path& file = tied ? checkpoints().tied_gguf : checkpoints().gguf;
    const loader::ModelFiles files = loader::open_model_files(file);
    EXPECT_EQ(files.config["architectures"][0], "Qwen3ForCausalLM");
    EXPECT_EQ(files.config["tie_word_embeddings"], tied);
    const models::TargetModel gguf = models::load_target(gpu().ctx, files);
    ASSERT_NE(std::get_if<models::Qwen3Model>(&gguf.family), nullptr);
    EXPECT_EQ(gguf.config().head_dim, 64);
    EXPECT_EQ(gguf.config().vocab_size, kVocab);
    EXPECT_EQ(gguf.parameters(), target(tied).parameters());
    const std::vector<int32_t> ids = random_prompt(9, 17, kBos, kVocab);
    TargetRunner from_gguf(gpu(), gguf, 64, 16), from_folder(gpu(), target(tied), 64, 16);
    EXPECT_TRUE(bitwise_equal(last_logits(from_gguf, ids, 16), last_logits(from_folder, ids, 16)));
  }
}

// An EAGLE-3 head over the Qwen3 target taps three of its layers; speculative decoding, chained
// and as a tree, gives the target's own greedy tokens.
TEST_F(GpuTest, Qwen3Eagle3SpeculativeDecodingIsLossless) {
  const models::TargetModel& t = target(false);
  const models::Eagle3Model draft = models::load_eagle3(gpu().ctx, checkpoints().draft, t.config());
  EXPECT_EQ(draft.aux_layers, (std::vector<uint32_t>{1, 2, 3}));
  const std::vector<int32_t> ids = random_prompt(10, 9, kBos, kVocab);
  engine::GenerationOptions o;
  o.n_predict = 20;
  o.ignore_eos = true;
  engine::Decoder runner = plain_decoder(t, 256, 64);
  const std::vector<int32_t> plain = testing::generate(runner, ids, o).tokens;
  ASSERT_EQ(plain.size(), 20u);
  {
    engine::Decoder spec = chain_decoder(t, draft, 256, 3, 64);
    engine::SpecStats stats;
    EXPECT_EQ(spec.generate(ids, o, stats).tokens, plain);
    EXPECT_GT(stats.num_drafts, 0u);
  }
  {
    engine::Decoder tree = tree_decoder(t, draft, 256, engine::TreeParams{3, 2, 5}, 64);
    engine::SpecStats stats;
    EXPECT_EQ(tree.generate(ids, o, stats).tokens, plain);
    EXPECT_GT(stats.num_drafts, 0u);
  }
}

// The CLI (memory planning from the family row, the API's load) runs the Qwen3 target alone and
// with its head: the same tokens, which are the library's greedy tokens for the prompt's ids.
TEST_F(GpuTest, Qwen3FromTheCliWithAndWithoutTheDraft) {
  const std::string base = fmt::format("run -m {} -p 'The modules described in this chapter' -n 12 --ignore-eos --json",
                                       checkpoints().untied.string());
  const CliResult plain = run_cli_apart(base), spec = run_cli_apart(base + " -d " + checkpoints().draft.string());
  ASSERT_EQ(plain.code, 0) << plain.err;
  ASSERT_EQ(spec.code, 0) << spec.err;
  const nlohmann::json p = nlohmann::json::parse(plain.out), s = nlohmann::json::parse(spec.out);
  EXPECT_EQ(s.at("tokens"), p.at("tokens"));
  EXPECT_GT(s.at("stats").at("num_drafts").get<int>(), 0);
  engine::Decoder runner = plain_decoder(target(false), 256, 64);
  engine::GenerationOptions o;
  o.n_predict = 12;
  o.ignore_eos = true;
  EXPECT_EQ(p.at("tokens").get<std::vector<int32_t>>(),
            testing::generate(runner, p.at("prompt_tokens").get<std::vector<int32_t>>(), o).tokens);
}

// A qwen3 GGUF file with its tokenizer (pre-tokenizer `qwen2`) runs from the CLI: digits are
// pre-tokens of their own, and the tokens are the library's greedy tokens for the prompt's ids.
TEST_F(GpuTest, Qwen3GgufWithItsTokenizerFromTheCli) {
  const CliResult r = run_cli_apart(fmt::format("run -m {} -p 'In 2026 the modules' -n 8 --ignore-eos --json",
                                                checkpoints().tokenizer_gguf.string()));
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  const std::vector<int32_t> prompt = j.at("prompt_tokens");
  const loader::Tokenizer tokenizer = loader::load_tokenizer(loader::open_model_files(checkpoints().tokenizer_gguf));
  std::vector<int32_t> digits;
  for (const char* d : {"2", "0", "2", "6"}) {
    const std::vector<int32_t> one = tokenizer.encode(d, false);
    digits.insert(digits.end(), one.begin(), one.end());
  }
  EXPECT_NE(std::search(prompt.begin(), prompt.end(), digits.begin(), digits.end()), prompt.end());
  engine::Decoder runner = plain_decoder(target(false), 256, 64);
  engine::GenerationOptions o;
  o.n_predict = 8;
  o.ignore_eos = true;
  EXPECT_EQ(j.at("tokens").get<std::vector<int32_t>>(), testing::generate(runner, prompt, o).tokens);
}

// Every family row's GGUF architecture is the one the loader's GGUF table opens as one of the
// row's Hugging Face architectures (the two tables live in models/ and loader/).
TEST(FamilyTable, GgufArchitecturesOpenAsTheirRowsArchitectures) {
  const std::map<std::string, fs::path> files = {
      {"llama3", asset("gguf/tiny-llama3/tiny-llama3-q8_0.gguf")},
      {"llama4", asset("gguf/tiny-llama4/tiny-llama4-q4_k_m.gguf")},
      {"qwen3", checkpoints().gguf}};
  ASSERT_EQ(models::target_families().size(), files.size());
  for (const models::TargetFamily& row : models::target_families()) {
    SCOPED_TRACE(row.name);
    const loader::ModelFiles f = loader::open_model_files(files.at(row.name));
    EXPECT_EQ(f.gguf->get_string("general.architecture"), row.gguf_architecture);
    EXPECT_EQ(&models::target_family(f), &row);
  }
}

// Sliding-window attention is refused, not run as full attention; read without a GPU.
TEST(Qwen3Config, SlidingWindowIsRefused) {
  const fs::path dir = checkpoints().root / "sliding";
  fs::create_directories(dir);
  nlohmann::json c = loader::json_field::read_file(checkpoints().untied / "config.json");
  c["use_sliding_window"] = true;
  std::ofstream(dir / "config.json") << c.dump();
  for (const char* f : {"model.safetensors.index.json", "model-00001-of-00001.safetensors"})
    fs::copy_file(checkpoints().untied / f, dir / f);
  try {
    models::read_target_config(loader::open_model_files(dir));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("use_sliding_window = true is not supported"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace eaglevk::testing
