#include "support/synthetic_gguf.h"

#include <cmath>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <eaglevk/error.h>

#include "loader/gguf.h"
#include "loader/safetensors.h"

namespace eaglevk::testing {
namespace {

using loader::GgufType;
using loader::GgufValue;
using nlohmann::json;

struct Shape {
  int64_t hidden, heads, kv_heads, head_dim, mlp;
};
constexpr Shape kFull{4096, 32, 8, 128, 14336};
constexpr Shape kSmall{256, 4, 2, 64, 512};

GgufValue scalar(GgufType type, json value) { return {type, GgufType::U8, std::move(value)}; }
GgufValue array(GgufType element, json value) { return {GgufType::ARRAY, element, std::move(value)}; }

json read_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) fail("{}: cannot be read", path.string());
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    fail("{}: not JSON ({})", path.string(), e.what());
  }
}

// The tokenizer metadata llama.cpp's converter writes for a Llama-3 byte-level BPE tokenizer:
// tokens by id, their types (3 for special added tokens, 1 otherwise), the merges.
void add_tokenizer(std::vector<std::pair<std::string, GgufValue>>& md, const std::filesystem::path& dir,
                   int64_t& vocab) {
  const json tj = read_json(dir / "tokenizer.json");
  std::map<int64_t, std::string> by_id;
  std::map<int64_t, bool> special;
  for (const auto& [token, id] : tj.at("model").at("vocab").items()) by_id[id.get<int64_t>()] = token;
  for (const json& t : tj.value("added_tokens", json::array())) {
    by_id[t.at("id").get<int64_t>()] = t.at("content").get<std::string>();
    special[t.at("id").get<int64_t>()] = t.value("special", false);
  }
  if (by_id.empty() || by_id.begin()->first != 0 || by_id.rbegin()->first + 1 != int64_t(by_id.size()))
    fail("{}: token ids are not 0..n-1", (dir / "tokenizer.json").string());
  json tokens = json::array(), types = json::array(), merges = json::array();
  for (const auto& [id, token] : by_id) {
    tokens.push_back(token);
    types.push_back(special.count(id) && special[id] ? 3 : 1);
  }
  for (const json& m : tj.at("model").at("merges"))
    merges.push_back(m.is_string() ? m.get<std::string>() : m.at(0).get<std::string>() + " " + m.at(1).get<std::string>());
  vocab = int64_t(by_id.size());
  md.push_back({"tokenizer.ggml.model", scalar(GgufType::STRING, "gpt2")});
  md.push_back({"tokenizer.ggml.pre", scalar(GgufType::STRING, "llama-bpe")});
  md.push_back({"tokenizer.ggml.tokens", array(GgufType::STRING, std::move(tokens))});
  md.push_back({"tokenizer.ggml.token_type", array(GgufType::I32, std::move(types))});
  md.push_back({"tokenizer.ggml.merges", array(GgufType::STRING, std::move(merges))});
  md.push_back({"tokenizer.ggml.bos_token_id", scalar(GgufType::U32, 128000)});
  md.push_back({"tokenizer.ggml.eos_token_id", scalar(GgufType::U32, 128009)});
  md.push_back({"tokenizer.ggml.add_bos_token", scalar(GgufType::BOOL, true)});
  if (std::filesystem::exists(dir / "tokenizer_config.json")) {
    const json tc = read_json(dir / "tokenizer_config.json");
    if (tc.contains("chat_template") && tc["chat_template"].is_string())
      md.push_back({"tokenizer.chat_template", scalar(GgufType::STRING, tc["chat_template"])});
  }
}

// Llama-3.1's RoPE frequency factors (factor 8, low 1, high 4, original context 8192), as the
// converter stores them for llama.cpp.
std::vector<float> llama31_rope_factors(int64_t head_dim) {
  std::vector<float> f;
  const double low_wavelen = 8192 / 1.0, high_wavelen = 8192 / 4.0;
  for (int64_t i = 0; i < head_dim; i += 2) {
    const double freq = 1.0 / std::pow(500000.0, double(i) / double(head_dim));
    const double wavelen = 2 * M_PI / freq;
    if (wavelen < high_wavelen) f.push_back(1.0f);
    else if (wavelen > low_wavelen) f.push_back(8.0f);
    else {
      const double s = (8192 / wavelen - 1.0) / (4.0 - 1.0);
      f.push_back(float(1.0 / ((1 - s) / 8.0 + s)));
    }
  }
  return f;
}

// Uniform weights in +-1/sqrt(fan_in), as f16: a pool of 4 M values per fan-in, each tensor a
// run through it from a random start (cheap for 16 GB; the values only need to be plausible).
class WeightPools {
 public:
  explicit WeightPools(uint64_t seed) : rng_(seed) {}
  void write(std::ostream& out, uint64_t elements, int64_t fan_in) {
    std::vector<uint16_t>& pool = pool_for(fan_in);
    uint64_t at = rng_() % pool.size();
    while (elements) {
      const uint64_t n = std::min<uint64_t>(elements, pool.size() - at);
      out.write(reinterpret_cast<const char*>(pool.data() + at), std::streamsize(n * 2));
      elements -= n;
      at = 0;
    }
  }

 private:
  std::vector<uint16_t>& pool_for(int64_t fan_in) {
    auto& pool = pools_[fan_in];
    if (pool.empty()) {
      std::uniform_real_distribution<float> u(-1.0f, 1.0f);
      const float scale = 1.0f / std::sqrt(float(fan_in));
      pool.resize(1u << 22);
      for (uint16_t& h : pool) h = loader::f32_to_f16(u(rng_) * scale);
    }
    return pool;
  }
  std::mt19937_64 rng_;
  std::map<int64_t, std::vector<uint16_t>> pools_;
};

}  // namespace

uint64_t write_synthetic_llama3_gguf(const std::filesystem::path& path, const SynthGgufOptions& o) {
  const Shape s = o.small ? kSmall : kFull;
  if (o.layers == 0) fail("a GGUF needs at least one layer");
  std::vector<std::pair<std::string, GgufValue>> md;
  md.push_back({"general.architecture", scalar(GgufType::STRING, "llama")});
  md.push_back({"general.name", scalar(GgufType::STRING, o.small ? "Llama-3 small shape, random weights"
                                                                  : "Llama-3.1-8B shape, random weights")});
  md.push_back({"general.file_type", scalar(GgufType::U32, 1)});  // mostly F16
  md.push_back({"llama.block_count", scalar(GgufType::U32, o.layers)});
  md.push_back({"llama.context_length", scalar(GgufType::U32, 131072)});
  md.push_back({"llama.embedding_length", scalar(GgufType::U32, s.hidden)});
  md.push_back({"llama.feed_forward_length", scalar(GgufType::U32, s.mlp)});
  md.push_back({"llama.attention.head_count", scalar(GgufType::U32, s.heads)});
  md.push_back({"llama.attention.head_count_kv", scalar(GgufType::U32, s.kv_heads)});
  md.push_back({"llama.rope.freq_base", scalar(GgufType::F32, 500000.0)});
  md.push_back({"llama.attention.layer_norm_rms_epsilon", scalar(GgufType::F32, 1e-5)});
  md.push_back({"llama.attention.key_length", scalar(GgufType::U32, s.head_dim)});
  md.push_back({"llama.attention.value_length", scalar(GgufType::U32, s.head_dim)});
  md.push_back({"llama.rope.dimension_count", scalar(GgufType::U32, s.head_dim)});
  int64_t vocab = 0;
  add_tokenizer(md, o.tokenizer_dir, vocab);
  md.push_back({"llama.vocab_size", scalar(GgufType::U32, vocab)});

  // Each tensor: name, shape (row-major), fan-in (0: a norm of ones; -1: the rope factors).
  struct Entry {
    std::string name;
    std::vector<int64_t> shape;
    int64_t fan_in;
  };
  std::vector<Entry> entries = {{"rope_freqs.weight", {s.head_dim / 2}, -1},
                                {"token_embd.weight", {vocab, s.hidden}, s.hidden},
                                {"output_norm.weight", {s.hidden}, 0},
                                {"output.weight", {vocab, s.hidden}, s.hidden}};
  for (uint32_t l = 0; l < o.layers; ++l) {
    const std::string p = fmt::format("blk.{}.", l);
    entries.push_back({p + "attn_norm.weight", {s.hidden}, 0});
    entries.push_back({p + "ffn_norm.weight", {s.hidden}, 0});
    entries.push_back({p + "attn_q.weight", {s.heads * s.head_dim, s.hidden}, s.hidden});
    entries.push_back({p + "attn_k.weight", {s.kv_heads * s.head_dim, s.hidden}, s.hidden});
    entries.push_back({p + "attn_v.weight", {s.kv_heads * s.head_dim, s.hidden}, s.hidden});
    entries.push_back({p + "attn_output.weight", {s.hidden, s.heads * s.head_dim}, s.heads * s.head_dim});
    entries.push_back({p + "ffn_gate.weight", {s.mlp, s.hidden}, s.hidden});
    entries.push_back({p + "ffn_up.weight", {s.mlp, s.hidden}, s.hidden});
    entries.push_back({p + "ffn_down.weight", {s.hidden, s.mlp}, s.mlp});
  }
  std::vector<loader::GgufTensorData> tensors;
  uint64_t total = 0;
  for (const Entry& e : entries) {
    uint64_t n = 1;
    for (int64_t d : e.shape) n *= uint64_t(d);
    const bool f32 = e.fan_in <= 0;
    tensors.push_back({e.name, f32 ? loader::DType::F32 : loader::DType::F16, e.shape, {}, n * (f32 ? 4 : 2)});
    total += tensors.back().streamed_bytes;
  }
  const std::vector<float> rope = llama31_rope_factors(s.head_dim);
  WeightPools pools(o.seed);
  loader::write_gguf(path, md, tensors, 32, [&](size_t i, std::ostream& out) {
    const Entry& e = entries[i];
    if (e.fan_in == -1) {
      out.write(reinterpret_cast<const char*>(rope.data()), std::streamsize(rope.size() * 4));
    } else if (e.fan_in == 0) {
      const std::vector<float> ones(size_t(e.shape[0]), 1.0f);
      out.write(reinterpret_cast<const char*>(ones.data()), std::streamsize(ones.size() * 4));
    } else {
      pools.write(out, tensors[i].streamed_bytes / 2, e.fan_in);
    }
  });
  return total;
}

}  // namespace eaglevk::testing
