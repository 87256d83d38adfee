#include "models/llama3.h"

#include <cmath>

#include <fmt/format.h>

#include <eaglevk/error.h>

#include "loader/quant.h"
#include "runtime/vk/uploader.h"

namespace eaglevk::models {

Llama3Model load_llama3(const vk::Context& ctx, const std::filesystem::path& path) {
  return load_llama3(ctx, loader::open_model_files(path));
}

Llama3Model load_llama3(const vk::Context& ctx, const loader::ModelFiles& files) {
  Llama3Model m;
  const std::string source = files.source();
  m.config = loader::parse_llama_config(files.config, source);
  if (files.generation_config) loader::apply_generation_config(m.config, *files.generation_config, source);
  const loader::LlamaConfig& c = m.config;
  if (c.attention_bias || c.mlp_bias) fail("{}: attention_bias / mlp_bias are not supported", source);
  const loader::Checkpoint& ckpt = files.checkpoint;
  TensorUse use{ckpt, {}};
  vk::Uploader up(ctx);
  const int64_t H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size, hd = c.head_dim;
  const int64_t q_dim = c.num_attention_heads * hd, kv_dim = c.num_key_value_heads * hd;

  auto matrix = [&](MatrixParts parts, const std::string& name) { return load_matrix(ctx, up, use, parts, name); };

  m.embed = matrix({{"model.embed_tokens.weight", {V, H}}}, "embed_tokens");
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    std::string p = fmt::format("model.layers.{}.", l);
    Llama3Layer layer;
    layer.attn_norm = upload_f32_vector(ctx, up, use.get(p + "input_layernorm.weight"), H);
    layer.qkv = matrix({{p + "self_attn.q_proj.weight", {q_dim, H}},
                        {p + "self_attn.k_proj.weight", {kv_dim, H}},
                        {p + "self_attn.v_proj.weight", {kv_dim, H}}},
                       p + "qkv");
    layer.o = matrix({{p + "self_attn.o_proj.weight", {H, q_dim}}}, p + "o_proj");
    layer.ffn_norm = upload_f32_vector(ctx, up, use.get(p + "post_attention_layernorm.weight"), H);
    layer.gate_up = matrix({{p + "mlp.gate_proj.weight", {I, H}}, {p + "mlp.up_proj.weight", {I, H}}}, p + "gate_up");
    layer.down = matrix({{p + "mlp.down_proj.weight", {H, I}}}, p + "down_proj");
    m.layers.push_back(std::move(layer));
  }
  m.norm = upload_f32_vector(ctx, up, use.get("model.norm.weight"), H);
  if (ckpt.find("lm_head.weight")) {
    m.lm_head = matrix({{"lm_head.weight", {V, H}}}, "lm_head");
  } else if (!c.tie_word_embeddings) {
    fail("checkpoint {} has no lm_head.weight and tie_word_embeddings is false", source);
  }
  use.check_all_used({}, {"rotary_emb.inv_freq", "rope_freqs.weight"});
  up.flush();
  for (const std::string& name : use.used) {
    m.weight_bytes += loader::upload_bytes(ckpt.get(name));  // FP8 and 4-bit weights as their blocks
    m.parameters += uint64_t(ckpt.get(name).numel());
  }
  return m;
}

TargetShape llama3_shape(const Llama3Model& m) {
  const loader::LlamaConfig& c = m.config;
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

void record_llama3_forward(ops::OpContext& oc, const Llama3Model& m, TargetState& s, const ForwardPass& pass) {
  const loader::LlamaConfig& c = m.config;
  const uint32_t T = pass.rows, H = c.hidden_size, I = c.intermediate_size;
  const uint32_t hd = c.head_dim, nh = c.num_attention_heads, nkv = c.num_key_value_heads;
  const uint32_t q_dim = nh * hd, kv_dim = nkv * hd, qkv_dim = q_dim + 2 * kv_dim;
  if (T == 0 || T > s.max_rows) fail("a pass of {} rows (at most {})", T, s.max_rows);
  if (pass.kv_len > s.capacity) fail("position {} is beyond the context of {}", pass.kv_len - 1, s.capacity);
  const float eps = c.rms_norm_eps;
  const ops::MatmulPath path = pass.batch_invariant ? ops::MatmulPath::Vector : ops::MatmulPath::Auto;
  const vk::Arena& a = s.arena;
  ops::Act x(a[s.x], H), qkv(a[s.qkv], qkv_dim);
  ops::IntVec pos{s.positions};

  auto tap = [&](uint32_t layer) { record_taps(oc, pass, x, layer, H); };

  record_input_embeddings(oc, pass, s, m.embed.matrix(), x, H);
  const ops::AttentionSplit split = ops::attention_split(s.split_keys, s.split_scratch);
  for (uint32_t l = 0; l < m.layers.size(); ++l) {
    const Llama3Layer& L = m.layers[l];
    tap(l);
    vk::BufferRange attn_w(L.attn_norm), ffn_w(L.ffn_norm);
    ops::KvLayer kv = s.kv_layer(l);
    const ops::RopeKv rope{nh, hd, pos, s.rope_table, s.capacity, ops::RopePairing::RotateHalf,
                           pass.slots ? *pass.slots : pos, kv};
    norm_linear_rope_kv(oc, {x, attn_w, eps, ops::Act(a[s.attn_norm], H), "attn_norm"}, L.qkv, qkv, T, path, "qkv",
                        rope);
    ops::AttentionParams params{nh, nkv, hd, pass.kv_len, 0, 1.0f / std::sqrt(float(hd))};
    params.tree = pass.tree;
    params.regions = pass.slots && !pass.tree ? pass.slots : nullptr;
    params.split = &split;
    ops::attention(oc, qkv, kv, pos, ops::Act(a[s.attn], q_dim), T, params);
    linear(oc, ops::Act(a[s.attn], q_dim), L.o, x, T, /*accumulate=*/true, path, "o_proj");
    ops::Act gu(a[s.gate_up], 2 * I);
    norm_linear_swiglu(oc, {x, ffn_w, eps, ops::Act(a[s.ffn_norm], H), "ffn_norm"}, L.gate_up, gu,
                       ops::Act(a[s.act], I), T, I, path, "gate_up");
    linear(oc, ops::Act(a[s.act], I), L.down, x, T, /*accumulate=*/true, path, "down_proj");
  }
  tap(uint32_t(m.layers.size()));
  record_logits(oc, s, pass, x, m.norm, m.lm_head_matrix(), eps);
}

}  // namespace eaglevk::models
