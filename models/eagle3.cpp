#include "models/eagle3.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <eaglevk/error.h>

#include "runtime/vk/uploader.h"

namespace eaglevk::models {

std::vector<uint32_t> default_aux_layers(uint32_t L) { return {2, L / 2, L - 3}; }

Eagle3Config load_eagle3_config(const loader::ModelFiles& files) {
  const std::string source = files.format == "gguf" ? files.source() : (files.folder / "config.json").string();
  return loader::parse_eagle3_config(files.config, source);
}

namespace {

// Original heads name the layer `midlayer.`, speculators `layers.0.`; either may carry a
// `model.` prefix.
std::string find_name(const loader::Checkpoint& ckpt, const std::string& suffix, bool layer) {
  std::vector<std::string> candidates;
  if (layer) {
    for (const char* p : {"midlayer.", "layers.0.", "model.layers.0.", "model.midlayer."}) candidates.push_back(p + suffix);
  } else {
    candidates = {suffix, "model." + suffix};
  }
  for (const std::string& c : candidates)
    if (ckpt.find(c)) return c;
  return "";
}

}  // namespace

Eagle3Model load_eagle3(const vk::Context& ctx, const std::filesystem::path& path, const loader::LlamaConfig& target,
                        const std::vector<uint32_t>& aux_override) {
  const loader::ModelFiles files = loader::open_model_files(path);
  Eagle3Model m;
  m.config = load_eagle3_config(files);
  const Eagle3Config& c = m.config;
  const std::string where = files.source();
  const int64_t H = c.layer.hidden_size, I = c.layer.intermediate_size, hd = c.layer.head_dim;
  const int64_t q_dim = c.layer.num_attention_heads * hd, kv_dim = c.layer.num_key_value_heads * hd;
  const int64_t Ht = c.target_hidden_size, Vd = c.draft_vocab_size, V = target.vocab_size;

  // Compatibility with the target.
  if (Ht != target.hidden_size)
    fail("draft {} expects target hidden size {}, the target has {}", where, Ht, target.hidden_size);
  if (c.target_vocab_size != target.vocab_size)
    fail("draft {} was made for a vocabulary of {}, the target has {}", where, c.target_vocab_size, target.vocab_size);
  const uint32_t L = uint32_t(target.num_hidden_layers);
  m.aux_layers_default = aux_override.empty() && c.aux_layers.empty();
  m.aux_layers = !aux_override.empty() ? aux_override : !c.aux_layers.empty() ? c.aux_layers : default_aux_layers(L);
  // Ids the caller gave are its setting's fault; the config's are the draft's.
  const Setting asked = aux_override.empty() ? Setting::None : Setting::TapLayers;
  if (m.aux_layers.size() != 3)
    fail_setting(asked, "draft {}: {} aux layers given; EAGLE-3 heads take exactly 3", where, m.aux_layers.size());
  std::sort(m.aux_layers.begin(), m.aux_layers.end());
  // Says where the ids came from: a configured id can differ from the tap by the format's rule.
  const std::string rule = !aux_override.empty() ? std::string("the tap layers asked for")
                           : !c.aux_layers.empty() ? c.aux_layers_rule
                                                   : std::string("the family default");
  for (size_t i = 0; i < 3; ++i) {
    if (m.aux_layers[i] > L)
      fail_setting(asked, "aux layer {} is out of range: the target has {} layers (ids 0..{}); the ids come from {}",
                   m.aux_layers[i], L, L, rule);
    if (i && m.aux_layers[i] == m.aux_layers[i - 1]) fail_setting(asked, "aux layer {} is listed twice", m.aux_layers[i]);
  }
  if (m.aux_layers_default && m.aux_layers != default_aux_layers(L)) m.aux_layers_default = false;

  const loader::Checkpoint& ckpt = files.checkpoint;
  TensorUse use{ckpt, {}};
  vk::Uploader up(ctx);
  auto get = [&](const std::string& suffix, bool layer) -> const loader::TensorView& {
    std::string name = find_name(ckpt, suffix, layer);
    if (name.empty()) fail("draft checkpoint {} has no tensor '{}{}'", where, layer ? "midlayer." : "", suffix);
    return use.get(name);
  };
  auto matrix = [&](std::initializer_list<std::pair<const char*, std::pair<int64_t, int64_t>>> parts, bool layer,
                    const std::string& name) {
    std::vector<const loader::TensorView*> blocks;
    for (auto& [suffix, shape] : parts) {
      const loader::TensorView& t = get(suffix, layer);
      expect_shape(t, {shape.first, shape.second});
      blocks.push_back(&t);
    }
    DeviceMatrix dm = upload_matrix(ctx, up, blocks, name);
    for (const loader::TensorView* b : blocks) ckpt.release_pages(*b);  // copied into staging already
    return dm;
  };

  m.fc = matrix({{"fc.weight", {H, 3 * Ht}}}, false, "draft fc");
  m.in_norm = upload_f32_vector(ctx, up, get("input_layernorm.weight", true), H);
  m.hidden_norm = upload_f32_vector(ctx, up, get("hidden_norm.weight", true), H);
  m.qkv = matrix({{"self_attn.q_proj.weight", {q_dim, 2 * H}},
                  {"self_attn.k_proj.weight", {kv_dim, 2 * H}},
                  {"self_attn.v_proj.weight", {kv_dim, 2 * H}}},
                 true, "draft qkv");
  m.o = matrix({{"self_attn.o_proj.weight", {H, q_dim}}}, true, "draft o_proj");
  m.post_norm = upload_f32_vector(ctx, up, get("post_attention_layernorm.weight", true), H);
  m.gate_up = matrix({{"mlp.gate_proj.weight", {I, H}}, {"mlp.up_proj.weight", {I, H}}}, true, "draft gate_up");
  m.down = matrix({{"mlp.down_proj.weight", {H, I}}}, true, "draft down_proj");
  m.final_norm = upload_f32_vector(ctx, up, get("norm.weight", false), H);
  if (!find_name(ckpt, "lm_head.weight", false).empty())
    m.lm_head = matrix({{"lm_head.weight", {Vd, H}}}, false, "draft lm_head");
  else if (c.format != "gguf" || Vd != V || H != target.hidden_size)
    fail("draft {} has no lm_head of its own{}", where,
         c.format == "gguf" ? " and cannot use the target's (its vocabulary or width differs)" : "");
  if (!find_name(ckpt, "embed_tokens.weight", false).empty())
    m.embed = matrix({{"embed_tokens.weight", {V, H}}}, false, "draft embed_tokens");
  else if (H != target.hidden_size)
    fail("draft {} has hidden size {} but no embed_tokens of its own (the target's are {} wide)", where, H,
         target.hidden_size);

  if (const loader::TensorView* d2t_view = ckpt.find(find_name(ckpt, "d2t", false).empty() ? "d2t" : find_name(ckpt, "d2t", false))) {
    use.used.push_back(d2t_view->name);
    expect_shape(*d2t_view, {Vd});
    std::vector<int64_t> offsets = loader::to_i64(*d2t_view);
    // GGUF (llama.cpp's converter) stores absolute target ids; safetensors stores offsets.
    if (c.format == "gguf")
      for (size_t i = 0; i < offsets.size(); ++i) offsets[i] -= int64_t(i);
    std::vector<int32_t> d2t(offsets.size());
    std::set<int64_t> seen;
    for (size_t i = 0; i < offsets.size(); ++i) {
      int64_t target_id = int64_t(i) + offsets[i];
      if (target_id < 0 || target_id >= V)
        fail("draft {}: d2t[{}] = {} maps to target id {}, outside 0..{}", where, i, offsets[i], target_id, V - 1);
      if (!seen.insert(target_id).second) fail("draft {}: d2t maps two draft ids to target id {}", where, target_id);
      d2t[i] = int32_t(offsets[i]);
    }
    m.d2t = vk::Buffer(ctx, d2t.size() * 4, vk::MemoryKind::Device, "d2t");
    up.put(m.d2t, d2t.data(), d2t.size() * 4);
  } else if (Vd != V) {
    fail("draft {}: draft_vocab_size {} differs from the vocabulary {} but there is no d2t", where, Vd, V);
  }
  // t2d is a training-time mask; validate its length when present.
  if (const loader::TensorView* t2d = ckpt.find("t2d")) {
    use.used.push_back("t2d");
    expect_shape(*t2d, {V});
  }
  use.check_all_used({}, {"rotary_emb.inv_freq", "rope_freqs.weight"});
  up.flush();
  return m;
}

}  // namespace eaglevk::models
