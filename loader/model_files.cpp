#include "loader/model_files.h"

#include <algorithm>
#include <cmath>
#include <regex>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <eaglevk/error.h>

#include "loader/fp8.h"
#include "loader/gguf_tokenizer.h"
#include "loader/hf_config.h"
#include "loader/input_path.h"
#include "loader/int4.h"
#include "loader/json_excerpt.h"
#include "loader/quantization_config.h"

namespace eaglevk::loader {
namespace fs = std::filesystem;
using nlohmann::json;

std::string ModelFiles::source() const { return format == "gguf" ? path.string() + " (GGUF)" : path.string(); }

std::optional<RecoveredRopeScaling> recover_llama3_rope_scaling(const std::vector<float>& factors, int head_dim,
                                                                double theta) {
  if (factors.empty() || int(factors.size()) * 2 != head_dim) return std::nullopt;
  float top = *std::max_element(factors.begin(), factors.end());
  if (top <= 1.0f) return std::nullopt;
  double factor = std::abs(top - std::round(top)) < 1e-4 ? std::round(top) : double(top);
  // The converter's own formula (convert_hf_to_gguf.py, LlamaModel), tried over the parameter
  // sets real checkpoints use, the standard Llama-3.1 set first.
  for (int orig : {8192, 4096, 2048, 16384, 32768, 65536, 131072, 1024, 512, 256, 128, 64, 32})
    for (double low : {1.0, 2.0, 4.0})
      for (double high : {4.0, 1.0, 2.0, 8.0, 16.0, 32.0}) {
        if (high <= low) continue;  // the config reader refuses equal factors (a zero division)
        bool ok = true;
        for (size_t j = 0; j < factors.size() && ok; ++j) {
          double freq = 1.0 / std::pow(theta, double(float(2 * j) / float(head_dim)));
          double wavelen = 2 * M_PI / freq, expect;
          if (wavelen < orig / high)
            expect = 1;
          else if (wavelen > orig / low)
            expect = factor;
          else {
            double smooth = (orig / wavelen - low) / (high - low);
            expect = 1 / ((1 - smooth) / factor + smooth);
          }
          ok = std::abs(expect - factors[j]) <= 1e-5 * std::max(1.0, std::abs(expect));
        }
        if (ok) return RecoveredRopeScaling{factor, low, high, orig};
      }
  return std::nullopt;
}

namespace {

// ---- GGUF name tables ----------------------------------------------------------------

// GGUF block tensor suffix -> Hugging Face suffix under model.layers.N. (the common part).
struct NameRule {
  const char* gguf;
  const char* hf;
};
constexpr NameRule kLlamaBlock[] = {
    {"attn_norm.weight", "input_layernorm.weight"},   {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_k.weight", "self_attn.k_proj.weight"},     {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_output.weight", "self_attn.o_proj.weight"}, {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},       {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
};
// Llama-4 names the MLP `feed_forward`. The GGUF expert tensors are [E, out, in] per matrix
// (the converter splits HF's fused, transposed gate_up_proj): they get names of their own,
// `experts.{gate,up,down}_proj.weight`, which HF's fused layout never uses.
constexpr NameRule kLlama4Block[] = {
    {"attn_norm.weight", "input_layernorm.weight"},
    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_k.weight", "self_attn.k_proj.weight"},
    {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_output.weight", "self_attn.o_proj.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"ffn_gate.weight", "feed_forward.gate_proj.weight"},
    {"ffn_up.weight", "feed_forward.up_proj.weight"},
    {"ffn_down.weight", "feed_forward.down_proj.weight"},
    {"ffn_gate_inp.weight", "feed_forward.router.weight"},
    {"ffn_gate_shexp.weight", "feed_forward.shared_expert.gate_proj.weight"},
    {"ffn_up_shexp.weight", "feed_forward.shared_expert.up_proj.weight"},
    {"ffn_down_shexp.weight", "feed_forward.shared_expert.down_proj.weight"},
    {"ffn_gate_exps.weight", "feed_forward.experts.gate_proj.weight"},
    {"ffn_up_exps.weight", "feed_forward.experts.up_proj.weight"},
    {"ffn_down_exps.weight", "feed_forward.experts.down_proj.weight"},
};
// Qwen3: Llama's names plus the per-head q and k norms.
constexpr NameRule kQwen3Block[] = {
    {"attn_norm.weight", "input_layernorm.weight"},    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_k.weight", "self_attn.k_proj.weight"},      {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_q_norm.weight", "self_attn.q_norm.weight"}, {"attn_k_norm.weight", "self_attn.k_norm.weight"},
    {"attn_output.weight", "self_attn.o_proj.weight"}, {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},       {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
};
// The EAGLE-3 head in the original layout's names (`midlayer.`), which models/eagle3.cpp reads.
constexpr NameRule kEagle3Block[] = {
    {"attn_norm.weight", "input_layernorm.weight"},   {"attn_norm_2.weight", "hidden_norm.weight"},
    {"hidden_norm.weight", "hidden_norm.weight"},     {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_k.weight", "self_attn.k_proj.weight"},     {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_output.weight", "self_attn.o_proj.weight"}, {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},       {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
};

// One row per GGUF architecture: the GGUF half of a target family (models/family.h), which
// the loader keeps because it translates GGUF into Hugging Face's names and config.
struct Arch {
  std::string name;  // general.architecture
  const char* hf_architecture;  // the config's architectures[0]
  std::span<const NameRule> block;
  std::string block_prefix;                          // HF prefix of block N, with {} for N
  std::vector<std::pair<std::string, std::string>> globals;  // whole-model tensors
  bool rope_permuted;                                 // q/k rows reordered by the converter
};

Arch arch_table(const std::string& name, const std::string& label) {
  const std::vector<std::pair<std::string, std::string>> model_globals = {
      {"token_embd.weight", "model.embed_tokens.weight"},
      {"output_norm.weight", "model.norm.weight"},
      {"output.weight", "lm_head.weight"}};
  if (name == "llama")
    return {name, "LlamaForCausalLM", kLlamaBlock, "model.layers.{}.", model_globals, true};
  if (name == "llama4")
    return {name, "Llama4ForCausalLM", kLlama4Block, "model.layers.{}.", model_globals, false};
  // llama.cpp's converter permutes q/k rows for `llama` only; Qwen's rotate-half rope is its NEOX one.
  if (name == "qwen3") return {name, "Qwen3ForCausalLM", kQwen3Block, "model.layers.{}.", model_globals, false};
  if (name == "eagle3")
    return {name, "LlamaForCausalLMEagle3", kEagle3Block, "midlayer.",
            {{"token_embd.weight", "embed_tokens.weight"},
             {"output_norm.weight", "norm.weight"},
             {"output.weight", "lm_head.weight"},
             {"fc.weight", "fc.weight"},
             {"d2t", "d2t"}},
            true};
  if (name == "clip")
    fail("{}: this is a vision (mmproj) file, not a model: it goes beside its Llama-4 text model, as the vision "
         "file", label);
  fail("{}: GGUF architecture '{}' is not supported (llama, llama4, qwen3, eagle3)", label, name);
}

// ---- metadata readers that name the key and the file ------------------------------------

int64_t need_int(const GgufHeader& h, const std::string& key) {
  auto v = h.get_int(key);
  if (!v) fail("{}: GGUF key '{}' is missing", h.label, key);
  return *v;
}
double need_float(const GgufHeader& h, const std::string& key) {
  auto v = h.get_float(key);
  if (!v) fail("{}: GGUF key '{}' is missing", h.label, key);
  return *v;
}

std::optional<json> side_config(const fs::path& folder) {
  fs::path p = folder / "config.json";
  if (!fs::exists(p)) return std::nullopt;
  json j = json_field::read_file(p);
  // Moved, not copied: copying recurses once per level of a (possibly hostile) nesting.
  if (j.contains("text_config") && j["text_config"].is_object()) return std::move(j["text_config"]);
  return j;
}

// Fields every Llama-like config shares, from `<arch>.*` keys.
json llama_like_config(const GgufHeader& h, const std::string& a, const Checkpoint& ckpt,
                       const std::string& embed_name) {
  json c;
  const int64_t H = need_int(h, a + ".embedding_length");
  const int64_t nh = need_int(h, a + ".attention.head_count");
  if (nh <= 0 || H <= 0) fail("{}: {}.embedding_length and .attention.head_count must be positive", h.label, a);
  c["hidden_size"] = H;
  c["intermediate_size"] = need_int(h, a + ".feed_forward_length");
  c["num_hidden_layers"] = need_int(h, a + ".block_count");
  c["num_attention_heads"] = nh;
  c["num_key_value_heads"] = h.get_int(a + ".attention.head_count_kv").value_or(nh);
  c["head_dim"] = h.get_int(a + ".attention.key_length").value_or(H / nh);
  if (auto v = h.get_int(a + ".attention.value_length"); v && *v != c["head_dim"].get<int64_t>())
    fail("{}: key_length {} differs from value_length {}; eaglevk needs them equal", h.label,
         c["head_dim"].get<int64_t>(), *v);
  c["max_position_embeddings"] = h.get_int(a + ".context_length").value_or(2048);
  c["rms_norm_eps"] = need_float(h, a + ".attention.layer_norm_rms_epsilon");
  c["rope_theta"] = h.get_float(a + ".rope.freq_base").value_or(10000.0);
  int64_t vocab = 0;
  const std::optional<std::vector<std::string>> tokens = h.get_string_array("tokenizer.ggml.tokens");
  if (auto v = h.get_int(a + ".vocab_size")) {
    vocab = *v;
    // Fewer tokens than rows is a padded vocabulary; more would encode ids with no embedding.
    if (tokens && int64_t(tokens->size()) > vocab)
      fail("{}: tokenizer.ggml.tokens has {} entries but {}.vocab_size is {}", h.label, tokens->size(), a, vocab);
  } else if (tokens) {
    vocab = int64_t(tokens->size());
  } else if (const TensorView* e = ckpt.find(embed_name)) {
    vocab = e->shape[0];
  }
  if (vocab <= 0) fail("{}: the vocabulary size is not given ({}.vocab_size, tokenizer.ggml.tokens)", h.label, a);
  c["vocab_size"] = vocab;
  if (auto bos = h.get_int("tokenizer.ggml.bos_token_id")) c["bos_token_id"] = *bos;
  json eos = json::array();
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"})
    if (auto id = h.get_int(key); id && std::find(eos.begin(), eos.end(), json(*id)) == eos.end()) eos.push_back(*id);
  c["eos_token_id"] = eos;
  c["attention_bias"] = false;
  c["mlp_bias"] = false;
  return c;
}

// rope_scaling from a side config, else recovered from rope_freqs.weight.
void set_rope_scaling(json& c, const Checkpoint& ckpt, std::optional<json>& side, const std::string& label,
                      std::vector<std::string>& notes) {
  if (side && side->contains("rope_scaling")) {
    c["rope_scaling"] = std::move((*side)["rope_scaling"]);
    notes.push_back("rope_scaling from the config.json beside the file");
    return;
  }
  const TensorView* f = ckpt.find("rope_freqs.weight");
  if (!f) return;
  std::vector<float> factors = to_f32(*f);
  int hd = c["head_dim"].get<int>();
  auto r = recover_llama3_rope_scaling(factors, hd, c["rope_theta"].get<double>());
  if (!r) {
    if (std::all_of(factors.begin(), factors.end(), [](float v) { return v == 1.0f; })) return;
    fail("{}: rope_freqs.weight does not match llama3 rope scaling with any standard parameters; put the model's "
         "config.json beside the file",
         label);
  }
  c["rope_scaling"] = {{"rope_type", "llama3"},
                       {"factor", r->factor},
                       {"low_freq_factor", r->low_freq_factor},
                       {"high_freq_factor", r->high_freq_factor},
                       {"original_max_position_embeddings", r->original_max_position_embeddings}};
  notes.push_back(fmt::format("rope_scaling llama3 (factor {}, low {}, high {}, original context {}) recovered from "
                              "rope_freqs.weight",
                              r->factor, r->low_freq_factor, r->high_freq_factor, r->original_max_position_embeddings));
}

// Llama-4 fields the GGUF file does not carry. Values are moved out of `side`: copying one
// recurses once per level of its nesting, which a hostile file makes 100,000 deep.
void set_llama4_fields(json& c, const GgufHeader& h, std::optional<json>& side, int64_t experts,
                       std::vector<std::string>& notes) {
  c["intermediate_size_mlp"] = c["intermediate_size"];
  c["intermediate_size"] = need_int(h, "llama4.expert_feed_forward_length");
  c["num_local_experts"] = experts;
  c["num_experts_per_tok"] = h.get_int("llama4.expert_used_count").value_or(1);
  c["interleave_moe_layer_step"] = h.get_int("llama4.interleave_moe_layer_step").value_or(1);
  auto take = [&](const char* key, json fallback, const std::string& why) {
    if (side && side->contains(key) && !(*side)[key].is_null()) {
      c[key] = std::move((*side)[key]);
      notes.push_back(fmt::format("{} = {} from the config.json beside the file", key, json_text(c[key])));
    } else if (!fallback.is_null()) {
      c[key] = fallback;
      notes.push_back(fmt::format("{} = {} ({})", key, json_text(fallback), why));
    }
  };
  const std::string dflt = side ? "documented default: neither the GGUF file nor the config.json beside it has it"
                                : "documented default: the GGUF file does not carry it and no config.json is beside it";
  // A converter that knows the sliding window writes it; 0 means no chunking and RoPE everywhere.
  if (auto swa = h.get_int("llama4.attention.sliding_window"); swa && *swa == 0) {
    const int64_t L = c["num_hidden_layers"].get<int64_t>();
    c["no_rope_layers"] = std::vector<int>(L, 1);
    c["layer_types"] = std::vector<std::string>(L, "full_attention");
    notes.push_back("llama4.attention.sliding_window = 0: no chunked attention, RoPE in every layer");
  } else {
    if (auto swa2 = h.get_int("llama4.attention.sliding_window")) c["attention_chunk_size"] = *swa2;
    take("attention_chunk_size", c.contains("attention_chunk_size") ? json(nullptr) : json(8192), dflt);
    take("no_rope_layers", json(nullptr), "");
    take("layer_types", json(nullptr), "");
    if (!c.contains("no_rope_layers")) notes.push_back("NoPE schedule: every 4th layer (documented default interval 4)");
  }
  take("floor_scale", json(8192), dflt);
  take("attn_scale", json(0.1), dflt);
  take("attn_temperature_tuning", json(true), dflt);
  // llama.cpp turns QK norm off only for the 128-expert (Maverick) shape.
  take("use_qk_norm", json(experts != 128), dflt);
  if (side && side->contains("moe_layers")) c["moe_layers"] = std::move((*side)["moe_layers"]);
}

void set_eagle3_fields(json& c, const GgufHeader& h, const Checkpoint& ckpt, std::vector<std::string>& notes) {
  c["architectures"] = {"LlamaForCausalLMEagle3"};
  c["eaglevk_source_format"] = "gguf";
  std::optional<std::vector<int64_t>> ids = h.get_int_array("eagle3.target_layers");
  const char* key = "eagle3.target_layers";
  if (!ids) {
    ids = h.get_int_array("eagle3.extract_layers");
    key = "eagle3.extract_layers";
  }
  if (!ids) fail("{}: an eagle3 GGUF must name its tap layers (eagle3.target_layers or eagle3.extract_layers)", h.label);
  c["eagle_aux_hidden_state_layer_ids"] = *ids;
  notes.push_back(fmt::format("tap layers {} from {} (llama.cpp's convention: the residual stream entering each layer)",
                              fmt::join(*ids, ","), key));
  if (auto v = h.get_int("eagle3.target_hidden_size")) c["target_hidden_size"] = *v;
  c["norm_before_residual"] = h.get_bool("eagle3.norm_before_residual").value_or(false);
  if (h.get_bool("eagle3.norm_before_fc").value_or(false))
    fail("{}: eagle3.norm_before_fc = true is not supported by eaglevk (the head would run wrongly)", h.label);
  if (const TensorView* out = ckpt.find("lm_head.weight")) c["draft_vocab_size"] = out->shape[0];
  else c["draft_vocab_size"] = c["vocab_size"];
}

ModelFiles open_gguf(const fs::path& path) {
  GgufFile file = GgufFile::open(path);
  auto header = std::make_shared<GgufHeader>(std::move(file.header));
  const GgufHeader& h = *header;
  ModelFiles m;
  m.path = path;
  m.folder = path.has_parent_path() ? path.parent_path() : fs::path(".");
  m.format = "gguf";
  m.gguf = header;
  auto arch_name = h.get_string("general.architecture");
  if (!arch_name) fail("{}: GGUF key 'general.architecture' is missing", h.label);
  const Arch arch = arch_table(*arch_name, h.label);

  // Tensors under Hugging Face names.
  Checkpoint& ckpt = m.checkpoint;
  ckpt.path = path;
  const int64_t nh = h.get_int(*arch_name + ".attention.head_count").value_or(0);
  const int64_t nkv = h.get_int(*arch_name + ".attention.head_count_kv").value_or(nh);
  static const std::regex block_re(R"(blk\.(\d+)\.(.+))");
  for (const GgufTensorInfo& info : h.tensors) {
    TensorView v;
    v.name = info.name;
    v.dtype = info.dtype;
    v.shape = info.shape();
    v.data = file.file.data + h.data_offset + info.offset;
    v.bytes = info.bytes;
    v.file = path.string();
    std::string hf;
    std::smatch match;
    if (std::regex_match(info.name, match, block_re)) {
      for (const NameRule& r : arch.block)
        if (match[2] == r.gguf) hf = fmt::format(fmt::runtime(arch.block_prefix), match[1].str()) + r.hf;
      if (arch.name == "eagle3" && match[1] != "0") hf.clear();
      if (arch.rope_permuted && (match[2] == "attn_q.weight" || match[2] == "attn_k.weight"))
        v.rope_permuted_heads = uint32_t(match[2] == "attn_q.weight" ? nh : nkv);
    } else if (info.name == "rope_freqs.weight") {
      hf = info.name;  // read below for the rope scaling, then ignored by the models
    } else {
      for (auto& [g, name] : arch.globals)
        if (info.name == g) hf = name;
    }
    if (hf.empty()) fail("{}: unexpected tensor '{}' for GGUF architecture '{}'", h.label, info.name, arch.name);
    v.name = hf;
    if (!ckpt.tensors.emplace(hf, std::move(v)).second)
      fail("{}: two tensors map to '{}' (is '{}' listed twice?)", h.label, hf, info.name);
  }
  ckpt.files.push_back(std::move(file.file));

  std::optional<json> side = side_config(m.folder);
  const std::string embed_name = arch.name == "eagle3" ? "embed_tokens.weight" : "model.embed_tokens.weight";
  json c = llama_like_config(h, arch.name, ckpt, embed_name);
  // A config.json beside the file fills in what the converter left out only when it describes
  // this model: a draft GGUF kept in its target's folder must not take the target's schedule.
  if (side) {
    for (const char* key : {"hidden_size", "num_hidden_layers"}) {
      if (side->contains(key) && (*side)[key] != c[key]) {
        m.notes.push_back(fmt::format("the config.json beside the file is not used: its {} is {}, the file's {}", key,
                                      json_text((*side)[key]), json_text(c[key])));
        side.reset();
        break;
      }
    }
  }
  set_rope_scaling(c, ckpt, side, h.label, m.notes);
  if (arch.name == "eagle3") {
    set_eagle3_fields(c, h, ckpt, m.notes);
  } else {
    c["architectures"] = {arch.hf_architecture};
    c["tie_word_embeddings"] = ckpt.find("lm_head.weight") == nullptr;
    if (arch.name == "llama4") set_llama4_fields(c, h, side, need_int(h, "llama4.expert_count"), m.notes);
  }
  m.config = std::move(c);
  return m;
}

ModelFiles open_folder(const fs::path& dir) {
  if (!fs::is_directory(dir)) fail("model folder '{}' does not exist", dir.string());
  ModelFiles m;
  m.path = dir;
  m.folder = dir;
  m.format = "safetensors";
  fs::path config = dir / "config.json";
  if (!fs::exists(config)) fail("{}: no config.json (a model folder needs config.json and safetensors)", dir.string());
  m.config = json_field::read_file(config);
  if (fs::exists(dir / "generation_config.json")) m.generation_config = json_field::read_file(dir / "generation_config.json");
  m.checkpoint = Checkpoint::open(dir);
  // FP8 weights get their scales, 4-bit ones their packed parts, here (loader/fp8.h,
  // loader/int4.h); a ModelOpt export may say what it is only in hf_quant_config.json.
  std::optional<json> hf_quant;
  if (fs::exists(dir / "hf_quant_config.json")) hf_quant = json_field::read_file(dir / "hf_quant_config.json");
  const auto scheme = parse_quantization_config(m.config, config.string(), hf_quant ? &*hf_quant : nullptr);
  if (scheme && scheme->int4) {
    attach_int4_weights(m.checkpoint, *scheme, config.string(), m.notes);
    attach_fp8_scales(m.checkpoint, std::nullopt, config.string(), m.notes);  // refuses FP8 tensors beside them
  } else {
    attach_fp8_scales(m.checkpoint, scheme, config.string(), m.notes);
  }
  return m;
}

}  // namespace

Tokenizer load_tokenizer(const ModelFiles& files) {
  if (files.format == "gguf" && files.gguf->find("tokenizer.ggml.tokens")) return tokenizer_from_gguf(*files.gguf);
  if (!fs::exists(files.folder / "tokenizer.json"))
    fail("{} has no tokenizer (no tokenizer.ggml.* keys and no tokenizer.json beside it)", files.source());
  return Tokenizer::load(files.folder);
}

std::optional<ChatTemplate> load_chat_template(const ModelFiles& files, const Tokenizer& tokenizer, std::string* why) {
  try {
    if (files.format == "gguf" && files.gguf->find("tokenizer.chat_template"))
      return chat_template_from_gguf(*files.gguf, tokenizer);
    if (fs::exists(files.folder / "tokenizer_config.json")) return ChatTemplate::load(files.folder);
    if (why)
      *why = fmt::format("{} has no chat template (no tokenizer.chat_template key, no tokenizer_config.json)",
                         files.source());
  } catch (const Error& e) {
    if (why) *why = e.what();  // not one eaglevk renders
  }
  return std::nullopt;
}

ModelFiles open_model_files(const fs::path& path) {
  const PathKind kind = path_kind(path);
  if (kind == PathKind::Folder) return open_folder(path);
  if (kind == PathKind::Missing) fail("'{}' does not exist (give a model folder or a .gguf file)", path.string());
  if (kind != PathKind::File) fail("{}", model_problem(path));  // a FIFO or a device: never read
  if (is_gguf_file(path)) return open_gguf(path);
  fail("'{}' is neither a model folder nor a GGUF file", path.string());
}

}  // namespace eaglevk::loader
