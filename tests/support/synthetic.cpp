#include "support/synthetic.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <eaglevk/error.h>

#include "loader/safetensors.h"

namespace eaglevk::testing {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct Dims {
  int64_t hidden, heads, kv_heads, head_dim, mlp, vocab;
};
constexpr Dims k8B{4096, 32, 8, 128, 14336, 128256};
constexpr Dims kScout{5120, 40, 8, 128, 8192, 202048};
constexpr int64_t kScoutExperts = 16, kScoutDenseMlp = 16384, kScoutDraftMlp = 16384;
constexpr int64_t k8BDraftVocab = 32000;
// head_dim 64 with hidden 128 and 4 heads: Qwen3 gives head_dim apart from hidden / heads.
// Vocabulary 4096: tiny-llama3's tokenizer fits it (tests drive the CLI with it).
constexpr Dims kQwen3Tiny{128, 4, 2, 64, 256, 4096};

struct KindName {
  SynthKind kind;
  const char* name;
};
constexpr KindName kKinds[] = {{SynthKind::Llama3_8B, "llama3-8b"},
                               {SynthKind::Llama4_Scout, "llama4-scout"},
                               {SynthKind::Eagle3_8B, "eagle3-8b"},
                               {SynthKind::Eagle3_Scout, "eagle3-scout"},
                               {SynthKind::Qwen3_Tiny, "qwen3-tiny"},
                               {SynthKind::Eagle3_Qwen3_Tiny, "eagle3-qwen3-tiny"}};

json llama3_rope_scaling(double factor) {
  return {{"factor", factor},
          {"high_freq_factor", 4.0},
          {"low_freq_factor", 1.0},
          {"original_max_position_embeddings", 8192},
          {"rope_type", "llama3"}};
}

// The fields a Llama layer config shares between the 8B, the heads and Scout's speculator.
json llama_layer_config(const Dims& d, int64_t layers, int64_t mlp, int64_t max_positions) {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"attention_bias", false},
          {"bos_token_id", 128000},
          {"eos_token_id", {128001, 128008, 128009}},
          {"head_dim", d.head_dim},
          {"hidden_act", "silu"},
          {"hidden_size", d.hidden},
          {"intermediate_size", mlp},
          {"max_position_embeddings", max_positions},
          {"mlp_bias", false},
          {"model_type", "llama"},
          {"num_attention_heads", d.heads},
          {"num_hidden_layers", layers},
          {"num_key_value_heads", d.kv_heads},
          {"rms_norm_eps", 1e-5},
          {"rope_scaling", llama3_rope_scaling(8.0)},
          {"rope_theta", 500000.0},
          {"tie_word_embeddings", false},
          {"torch_dtype", "bfloat16"},
          {"vocab_size", d.vocab}};
}

// Qwen3's config.json fields (Qwen3-8B's, at the tiny sizes; ids inside the tiny vocabulary).
json qwen3_config(const Dims& d, int64_t layers, bool tied) {
  return {{"architectures", {"Qwen3ForCausalLM"}},
          {"attention_bias", false},
          {"attention_dropout", 0.0},
          {"bos_token_id", d.vocab - 3},
          {"eos_token_id", d.vocab - 1},
          {"head_dim", d.head_dim},
          {"hidden_act", "silu"},
          {"hidden_size", d.hidden},
          {"intermediate_size", d.mlp},
          {"max_position_embeddings", 40960},
          {"max_window_layers", layers},
          {"model_type", "qwen3"},
          {"num_attention_heads", d.heads},
          {"num_hidden_layers", layers},
          {"num_key_value_heads", d.kv_heads},
          {"rms_norm_eps", 1e-6},
          {"rope_scaling", nullptr},
          {"rope_theta", 1000000.0},
          {"sliding_window", nullptr},
          {"tie_word_embeddings", tied},
          {"torch_dtype", "bfloat16"},
          {"use_sliding_window", false},
          {"vocab_size", d.vocab}};
}

bool scout_moe_layer(int64_t l, int64_t step) { return (l + 1) % step == 0; }
bool scout_rope_layer(int64_t l) { return (l + 1) % 4 != 0; }  // every 4th layer is NoPE

json make_config(SynthKind kind, const SynthOptions& o) {
  const int64_t L = o.layers;
  switch (kind) {
    case SynthKind::Llama3_8B: return llama_layer_config(k8B, L, k8B.mlp, 131072);
    case SynthKind::Llama4_Scout: {
      json moe_layers = json::array(), no_rope = json::array(), types = json::array();
      for (int64_t l = 0; l < L; ++l) {
        if (scout_moe_layer(l, o.moe_step)) moe_layers.push_back(l);
        no_rope.push_back(scout_rope_layer(l) ? 1 : 0);
        types.push_back(scout_rope_layer(l) ? "chunked_attention" : "full_attention");
      }
      json text = {{"attention_bias", false},
                   {"attention_chunk_size", 8192},
                   {"attn_scale", 0.1},
                   {"attn_temperature_tuning", true},
                   {"bos_token_id", 200000},
                   {"eos_token_id", {200001, 200007, 200008}},
                   {"floor_scale", 8192},
                   {"head_dim", kScout.head_dim},
                   {"hidden_act", "silu"},
                   {"hidden_size", kScout.hidden},
                   {"interleave_moe_layer_step", o.moe_step},
                   {"intermediate_size", kScout.mlp},
                   {"intermediate_size_mlp", kScoutDenseMlp},
                   {"layer_types", types},
                   {"max_position_embeddings", 10485760},
                   {"model_type", "llama4_text"},
                   {"moe_layers", moe_layers},
                   {"no_rope_layers", no_rope},
                   {"num_attention_heads", kScout.heads},
                   {"num_experts_per_tok", 1},
                   {"num_hidden_layers", L},
                   {"num_key_value_heads", kScout.kv_heads},
                   {"num_local_experts", kScoutExperts},
                   {"pad_token_id", 200018},
                   {"rms_norm_eps", 1e-5},
                   {"rope_scaling", llama3_rope_scaling(16.0)},
                   {"rope_theta", 500000.0},
                   {"torch_dtype", "bfloat16"},
                   {"use_qk_norm", true},
                   {"vocab_size", kScout.vocab}};
      return {{"architectures", {"Llama4ForConditionalGeneration"}},
              {"model_type", "llama4"},
              {"text_config", text},
              {"tie_word_embeddings", false},
              {"torch_dtype", "bfloat16"}};
    }
    case SynthKind::Eagle3_8B: {
      json c = llama_layer_config(k8B, 1, k8B.mlp, 2048);
      c["architectures"] = {"LlamaForCausalLMEagle3"};
      c["draft_vocab_size"] = k8BDraftVocab;
      if (!o.aux_layers.empty()) c["eagle_aux_hidden_state_layer_ids"] = o.aux_layers;
      return c;
    }
    case SynthKind::Qwen3_Tiny: return qwen3_config(kQwen3Tiny, L, o.tie_embeddings);
    case SynthKind::Eagle3_Qwen3_Tiny: {
      // A Llama layer with the target's rope, as published Qwen3 EAGLE-3 heads are.
      json c = llama_layer_config(kQwen3Tiny, 1, kQwen3Tiny.mlp, 40960);
      c["architectures"] = {"LlamaForCausalLMEagle3"};
      c["bos_token_id"] = kQwen3Tiny.vocab - 3;
      c["eos_token_id"] = kQwen3Tiny.vocab - 1;
      c["rms_norm_eps"] = 1e-6;
      c["rope_scaling"] = nullptr;
      c["rope_theta"] = 1000000.0;
      c["draft_vocab_size"] = kQwen3Tiny.vocab;
      if (!o.aux_layers.empty()) c["eagle_aux_hidden_state_layer_ids"] = o.aux_layers;
      return c;
    }
    case SynthKind::Eagle3_Scout: {
      Dims d = kScout;
      json layer = llama_layer_config(d, 1, kScoutDraftMlp, 131072);
      layer["bos_token_id"] = 200000;
      layer["eos_token_id"] = {200001, 200007, 200008};
      json c = {{"architectures", {"Eagle3Speculator"}},
                {"speculators_model_type", "eagle3"},
                {"speculators_version", "0.1.0"},
                {"draft_vocab_size", kScout.vocab},
                {"norm_before_residual", false},
                {"target_hidden_size", nullptr},
                {"transformer_layer_config", layer},
                {"torch_dtype", "bfloat16"}};
      if (!o.aux_layers.empty()) c["eagle_aux_hidden_state_layer_ids"] = o.aux_layers;
      return c;
    }
  }
  fail("unknown synthetic checkpoint kind");
}

void add(std::vector<SynthTensor>& out, std::string name, std::vector<int64_t> shape, std::string dtype = "BF16") {
  out.push_back({std::move(name), std::move(dtype), std::move(shape)});
}

void add_attention(std::vector<SynthTensor>& t, const std::string& p, const Dims& d, int64_t in) {
  add(t, p + "self_attn.q_proj.weight", {d.heads * d.head_dim, in});
  add(t, p + "self_attn.k_proj.weight", {d.kv_heads * d.head_dim, in});
  add(t, p + "self_attn.v_proj.weight", {d.kv_heads * d.head_dim, in});
  add(t, p + "self_attn.o_proj.weight", {d.hidden, d.heads * d.head_dim});
}

void add_mlp(std::vector<SynthTensor>& t, const std::string& p, int64_t hidden, int64_t mlp) {
  add(t, p + "gate_proj.weight", {mlp, hidden});
  add(t, p + "up_proj.weight", {mlp, hidden});
  add(t, p + "down_proj.weight", {hidden, mlp});
}

// 64-bit mixing (splitmix64): a fast, well-spread stream per tensor.
struct SplitMix {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
};

uint64_t name_seed(const std::string& name, uint64_t seed) {
  uint64_t h = 1469598103934665603ull ^ seed;  // FNV-1a
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return h;
}

// The draft vocabulary of the 8B head: a sorted random subset of the target's ids.
std::vector<int64_t> draft_vocab_ids(uint64_t seed) {
  std::vector<int64_t> ids(k8B.vocab);
  std::iota(ids.begin(), ids.end(), 0);
  SplitMix rng{seed};
  for (int64_t i = 0; i < k8BDraftVocab; ++i) std::swap(ids[i], ids[i + int64_t(rng.next() % uint64_t(k8B.vocab - i))]);
  ids.resize(k8BDraftVocab);
  std::sort(ids.begin(), ids.end());
  return ids;
}

class FileWriter {
 public:
  explicit FileWriter(const fs::path& path) : path_(path), f_(std::fopen(path.c_str(), "wb")) {
    if (!f_) fail("{}: cannot open for writing", path.string());
  }
  ~FileWriter() {
    if (f_) std::fclose(f_);
  }
  void write(const void* data, size_t bytes) {
    if (std::fwrite(data, 1, bytes, f_) != bytes) fail("{}: write failed (disk full?)", path_.string());
  }
  // Flushes the file to disk and drops it from the page cache: a test then holds gigabytes of
  // weights as device memory (host memory on lavapipe) and would otherwise hold them a second
  // time as dirty cache, which the kernel must write back under pressure before the load can
  // get pages (a Scout-shaped load took ten minutes that way on a 24 GiB machine).
  void close() {
    if (std::fflush(f_) != 0 || ::fdatasync(::fileno(f_)) != 0) fail("{}: write failed on flush", path_.string());
    ::posix_fadvise(::fileno(f_), 0, 0, POSIX_FADV_DONTNEED);
    if (std::fclose(f_) != 0) fail("{}: write failed on close", path_.string());
    f_ = nullptr;
  }

 private:
  fs::path path_;
  std::FILE* f_;
};

// Streams one tensor's bytes: bf16 weights uniform in +-sqrt(3 / fan_in) (unit output
// variance for unit inputs), norms 1 +- 0.1, d2t/t2d from the draft vocabulary.
void write_tensor_data(FileWriter& out, const SynthTensor& t, uint64_t seed) {
  if (t.dtype == "I64" || t.dtype == "BOOL") {
    std::vector<int64_t> ids = draft_vocab_ids(seed);
    if (t.dtype == "I64") {
      for (size_t i = 0; i < ids.size(); ++i) ids[i] -= int64_t(i);  // d2t: offsets
      out.write(ids.data(), ids.size() * 8);
    } else {
      std::vector<uint8_t> mask(size_t(t.shape[0]), 0);
      for (int64_t id : ids) mask[size_t(id)] = 1;
      out.write(mask.data(), mask.size());
    }
    return;
  }
  const bool norm = t.shape.size() == 1;
  // Fused HF expert tensors are [E, in, out]; everything else is [out, in].
  const bool experts = t.shape.size() == 3;
  const int64_t fan_in = norm ? 1 : experts ? t.shape[1] : t.shape.back();
  const bool embedding = t.name.find("embed_tokens") != std::string::npos;
  const float scale = norm ? 0.1f : embedding ? 1.0f : std::sqrt(3.0f / float(fan_in));
  const float center = norm ? 1.0f : 0.0f;
  // Each value is a function of 16 random bits: a table of all 65,536 values converts once per
  // tensor instead of once per element (the Scout checkpoint has 5.5 billion of them).
  std::vector<uint16_t> value_of(1 << 16);
  for (uint32_t bits = 0; bits < value_of.size(); ++bits) {
    const float u = float(int32_t(bits) - 32768) * (1.0f / 32768.0f);
    value_of[bits] = loader::f32_to_bf16(center + scale * u);
  }
  SplitMix rng{name_seed(t.name, seed)};
  const uint64_t count = t.bytes() / 2;
  std::vector<uint16_t> chunk(1 << 20);
  for (uint64_t done = 0; done < count;) {
    size_t n = size_t(std::min<uint64_t>(chunk.size(), count - done));
    for (size_t i = 0; i < n; i += 4) {
      uint64_t r = rng.next();
      for (size_t j = 0; j < 4 && i + j < n; ++j) chunk[i + j] = value_of[(r >> (16 * j)) & 0xffff];
    }
    out.write(chunk.data(), n * 2);
    done += n;
  }
}

}  // namespace

bool parse_synth_kind(const std::string& name, SynthKind& kind) {
  for (const auto& k : kKinds)
    if (name == k.name) {
      kind = k.kind;
      return true;
    }
  return false;
}

const char* synth_kind_name(SynthKind kind) {
  for (const auto& k : kKinds)
    if (k.kind == kind) return k.name;
  return "?";
}

uint64_t SynthTensor::bytes() const {
  uint64_t n = 1;
  for (int64_t d : shape) n *= uint64_t(d);
  return n * (dtype == "BF16" ? 2 : dtype == "I64" ? 8 : 1);
}

std::vector<SynthTensor> synthetic_tensors(SynthKind kind, const SynthOptions& o) {
  std::vector<SynthTensor> t;
  switch (kind) {
    case SynthKind::Llama3_8B: {
      const Dims& d = k8B;
      add(t, "model.embed_tokens.weight", {d.vocab, d.hidden});
      for (uint32_t l = 0; l < o.layers; ++l) {
        std::string p = fmt::format("model.layers.{}.", l);
        add(t, p + "input_layernorm.weight", {d.hidden});
        add_attention(t, p, d, d.hidden);
        add(t, p + "post_attention_layernorm.weight", {d.hidden});
        add_mlp(t, p + "mlp.", d.hidden, d.mlp);
      }
      add(t, "model.norm.weight", {d.hidden});
      add(t, "lm_head.weight", {d.vocab, d.hidden});
      break;
    }
    case SynthKind::Llama4_Scout: {
      const Dims& d = kScout;
      const std::string P = "language_model.";
      add(t, P + "model.embed_tokens.weight", {d.vocab, d.hidden});
      for (uint32_t l = 0; l < o.layers; ++l) {
        std::string p = fmt::format("{}model.layers.{}.", P, l);
        add(t, p + "input_layernorm.weight", {d.hidden});
        add_attention(t, p, d, d.hidden);
        add(t, p + "post_attention_layernorm.weight", {d.hidden});
        std::string f = p + "feed_forward.";
        if (scout_moe_layer(l, o.moe_step)) {
          add(t, f + "router.weight", {kScoutExperts, d.hidden});
          add(t, f + "experts.gate_up_proj", {kScoutExperts, d.hidden, 2 * d.mlp});
          add(t, f + "experts.down_proj", {kScoutExperts, d.mlp, d.hidden});
          add_mlp(t, f + "shared_expert.", d.hidden, d.mlp);
        } else {
          add_mlp(t, f, d.hidden, kScoutDenseMlp);
        }
      }
      add(t, P + "model.norm.weight", {d.hidden});
      add(t, P + "lm_head.weight", {d.vocab, d.hidden});
      break;
    }
    case SynthKind::Eagle3_8B: {
      const Dims& d = k8B;
      add(t, "midlayer.input_layernorm.weight", {d.hidden});
      add(t, "midlayer.hidden_norm.weight", {d.hidden});
      add_attention(t, "midlayer.", d, 2 * d.hidden);
      add(t, "midlayer.post_attention_layernorm.weight", {d.hidden});
      add_mlp(t, "midlayer.mlp.", d.hidden, d.mlp);
      add(t, "fc.weight", {d.hidden, 3 * d.hidden});
      add(t, "norm.weight", {d.hidden});
      add(t, "lm_head.weight", {k8BDraftVocab, d.hidden});
      add(t, "d2t", {k8BDraftVocab}, "I64");
      add(t, "t2d", {d.vocab}, "BOOL");
      break;
    }
    case SynthKind::Qwen3_Tiny: {
      const Dims& d = kQwen3Tiny;
      add(t, "model.embed_tokens.weight", {d.vocab, d.hidden});
      for (uint32_t l = 0; l < o.layers; ++l) {
        std::string p = fmt::format("model.layers.{}.", l);
        add(t, p + "input_layernorm.weight", {d.hidden});
        add_attention(t, p, d, d.hidden);
        add(t, p + "self_attn.q_norm.weight", {d.head_dim});
        add(t, p + "self_attn.k_norm.weight", {d.head_dim});
        add(t, p + "post_attention_layernorm.weight", {d.hidden});
        add_mlp(t, p + "mlp.", d.hidden, d.mlp);
      }
      add(t, "model.norm.weight", {d.hidden});
      if (!o.tie_embeddings) add(t, "lm_head.weight", {d.vocab, d.hidden});
      break;
    }
    case SynthKind::Eagle3_Qwen3_Tiny: {
      // No embed_tokens and no d2t: the head reads the target's embeddings and drafts over its
      // whole vocabulary.
      const Dims& d = kQwen3Tiny;
      add(t, "midlayer.input_layernorm.weight", {d.hidden});
      add(t, "midlayer.hidden_norm.weight", {d.hidden});
      add_attention(t, "midlayer.", d, 2 * d.hidden);
      add(t, "midlayer.post_attention_layernorm.weight", {d.hidden});
      add_mlp(t, "midlayer.mlp.", d.hidden, d.mlp);
      add(t, "fc.weight", {d.hidden, 3 * d.hidden});
      add(t, "norm.weight", {d.hidden});
      add(t, "lm_head.weight", {d.vocab, d.hidden});
      break;
    }
    case SynthKind::Eagle3_Scout: {
      // No embed_tokens: the head reads the target's (as EAGLE-3 heads without their own do).
      const Dims& d = kScout;
      add(t, "layers.0.input_layernorm.weight", {d.hidden});
      add(t, "layers.0.hidden_norm.weight", {d.hidden});
      add_attention(t, "layers.0.", d, 2 * d.hidden);
      add(t, "layers.0.post_attention_layernorm.weight", {d.hidden});
      add_mlp(t, "layers.0.mlp.", d.hidden, kScoutDraftMlp);
      add(t, "fc.weight", {d.hidden, 3 * d.hidden});
      add(t, "norm.weight", {d.hidden});
      add(t, "lm_head.weight", {d.vocab, d.hidden});
      break;
    }
  }
  return t;
}

uint64_t write_synthetic_checkpoint(SynthKind kind, const fs::path& dir, const SynthOptions& o) {
  if (o.layers == 0) fail("a synthetic checkpoint needs at least one layer");
  fs::create_directories(dir);
  const std::vector<SynthTensor> tensors = synthetic_tensors(kind, o);

  // Group tensors into shards in order; a shard closes once it reaches shard_bytes.
  std::vector<std::vector<const SynthTensor*>> shards(1);
  uint64_t in_shard = 0, total = 0;
  for (const SynthTensor& t : tensors) {
    if (in_shard >= o.shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(&t);
    in_shard += t.bytes();
    total += t.bytes();
  }

  json weight_map = json::object();
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string file = fmt::format("model-{:05}-of-{:05}.safetensors", s + 1, shards.size());
    json header = {{"__metadata__", {{"format", "pt"}}}};
    uint64_t offset = 0;
    for (const SynthTensor* t : shards[s]) {
      header[t->name] = {{"dtype", t->dtype}, {"shape", t->shape}, {"data_offsets", {offset, offset + t->bytes()}}};
      offset += t->bytes();
      weight_map[t->name] = file;
    }
    std::string text = header.dump();
    text.resize((text.size() + 7) / 8 * 8, ' ');
    FileWriter out(dir / file);
    uint64_t length = text.size();
    out.write(&length, 8);
    out.write(text.data(), text.size());
    for (const SynthTensor* t : shards[s]) write_tensor_data(out, *t, o.seed);
    out.close();
  }
  json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  std::ofstream(dir / "model.safetensors.index.json") << index.dump(2);
  std::ofstream(dir / "config.json") << make_config(kind, o).dump(2);
  if (!o.tokenizer_dir.empty())
    for (const char* name : {"tokenizer.json", "tokenizer_config.json"})
      fs::copy_file(o.tokenizer_dir / name, dir / name, fs::copy_options::overwrite_existing);
  return total;
}

}  // namespace eaglevk::testing
