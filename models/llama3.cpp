#include "models/llama3.h"

#include <cmath>

#include <fmt/format.h>

#include <eaglevk/error.h>

#include "loader/quant.h"
#include "models/forward_scaffold.h"
#include "models/layer_part.h"
#include "runtime/vk/uploader.h"

namespace eaglevk::models {

Llama3Model load_llama3(const vk::Context& ctx, const std::filesystem::path& path) {
  return load_llama3(ctx, loader::open_model_files(path));
}

loader::LlamaConfig read_llama3_config(const loader::ModelFiles& files) {
  return loader::parse_llama_config(files.config, files.source());
}

Llama3Layer load_llama3_layer(const vk::Context& ctx, vk::Uploader& up, TensorUse& use, const loader::LlamaConfig& c,
                              int layer) {
  const int64_t H = c.hidden_size, I = c.intermediate_size, hd = c.head_dim;
  const int64_t q_dim = c.num_attention_heads * hd, kv_dim = c.num_key_value_heads * hd;
  auto matrix = [&](MatrixParts parts, const std::string& name) { return load_matrix(ctx, up, use, parts, name); };
  const std::string p = fmt::format("model.layers.{}.", layer);
  Llama3Layer L;
  L.attn_norm = upload_f32_vector(ctx, up, use.get(p + "input_layernorm.weight"), H);
  L.qkv = matrix({{p + "self_attn.q_proj.weight", {q_dim, H}},
                  {p + "self_attn.k_proj.weight", {kv_dim, H}},
                  {p + "self_attn.v_proj.weight", {kv_dim, H}}},
                 p + "qkv");
  L.o = matrix({{p + "self_attn.o_proj.weight", {H, q_dim}}}, p + "o_proj");
  L.ffn_norm = upload_f32_vector(ctx, up, use.get(p + "post_attention_layernorm.weight"), H);
  L.gate_up = matrix({{p + "mlp.gate_proj.weight", {I, H}}, {p + "mlp.up_proj.weight", {I, H}}}, p + "gate_up");
  L.down = matrix({{p + "mlp.down_proj.weight", {H, I}}}, p + "down_proj");
  return L;
}

TargetShape dense_target_shape(const loader::LlamaConfig& c) {
  TargetShape t;
  t.layers = c.num_hidden_layers;
  t.hidden = c.hidden_size;
  t.heads = c.num_attention_heads;
  t.kv_heads = c.num_key_value_heads;
  t.head_dim = c.head_dim;
  t.vocab = c.vocab_size;
  t.ffn_width = c.intermediate_size;
  t.rope_inv_freq = loader::rope_inv_freq(c.head_dim, c.rope_theta, c.rope_scaling);
  return t;
}

Llama3Model load_llama3(const vk::Context& ctx, const loader::ModelFiles& files, const WeightPlacement& placement) {
  Llama3Model m;
  const std::string source = files.source();
  m.config = read_llama3_config(files);
  if (files.generation_config) loader::apply_generation_config(m.config, *files.generation_config, source);
  const loader::LlamaConfig& c = m.config;
  if (c.attention_bias || c.mlp_bias) fail("{}: attention_bias / mlp_bias are not supported", source);
  const loader::Checkpoint& ckpt = files.checkpoint;
  TensorUse use{ckpt, {}};
  vk::Uploader up(ctx);
  const int64_t H = c.hidden_size, V = c.vocab_size;
  auto matrix = [&](MatrixParts parts, const std::string& name) { return load_matrix(ctx, up, use, parts, name); };

  if (!ckpt.find("lm_head.weight") && !c.tie_word_embeddings)
    fail("checkpoint {} has no lm_head.weight and tie_word_embeddings is false", source);
  const LayerPart part = layer_part(placement, uint32_t(c.num_hidden_layers), !ckpt.find("lm_head.weight"));
  m.range = part.range;
  if (part.embed) m.embed = matrix({{"model.embed_tokens.weight", {V, H}}}, "embed_tokens");
  m.layers.resize(c.num_hidden_layers);
  for (uint32_t l = part.range.first; l < part.range.end; ++l) m.layers[l] = load_llama3_layer(ctx, up, use, c, int(l));
  if (part.head) {
    m.norm = upload_f32_vector(ctx, up, use.get("model.norm.weight"), H);
    if (ckpt.find("lm_head.weight")) m.lm_head = matrix({{"lm_head.weight", {V, H}}}, "lm_head");
  }
  use.check_all_used(part.elsewhere, {"rotary_emb.inv_freq", "rope_freqs.weight"});
  up.flush();
  m.weight_bytes = use.used_device_bytes();
  m.parameters = use.used_parameters();
  return m;
}

TargetShape target_shape(const Llama3Model& m) { return dense_target_shape(m.config); }

void record_target_forward(ops::OpContext& oc, const Llama3Model& m, TargetState& s, const ForwardPass& pass) {
  const loader::LlamaConfig& c = m.config;
  const uint32_t H = c.hidden_size, I = c.intermediate_size;
  const uint32_t hd = c.head_dim, nh = c.num_attention_heads, nkv = c.num_key_value_heads;
  const uint32_t q_dim = nh * hd, qkv_dim = q_dim + 2 * nkv * hd;
  const float eps = c.rms_norm_eps;
  const vk::Arena& a = s.arena;
  const ScaffoldWeights w = scaffold_weights(m, H, eps);
  record_target_scaffold(oc, s, pass, w, [&](uint32_t l, const LayerPass& lp) {
    const Llama3Layer& L = m.layers[l];
    const ops::Act qkv(a[s.qkv], qkv_dim);
    const ops::RopeKv rope = pass_rope_kv(s, pass, l, nh, hd, ops::RopePairing::RotateHalf);
    norm_linear_rope_kv(oc, {lp.x, vk::BufferRange(L.attn_norm), eps, ops::Act(a[s.attn_norm], H), "attn_norm"}, L.qkv,
                        qkv, lp.rows, lp.path, "qkv", rope);
    ops::attention(oc, qkv, rope.kv, lp.positions, ops::Act(a[s.attn], q_dim), lp.rows,
                   pass_attention(pass, lp.split, nh, nkv, hd));
    linear(oc, ops::Act(a[s.attn], q_dim), L.o, lp.x, lp.rows, /*accumulate=*/true, lp.path, "o_proj");
    record_dense_mlp(oc, s, lp, L.ffn_norm, eps, L.gate_up, L.down, I);
  });
}

}  // namespace eaglevk::models
