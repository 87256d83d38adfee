#include "models/qwen3.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <eaglevk/error.h>

#include "loader/quant.h"
#include "models/forward_scaffold.h"
#include "models/layer_part.h"
#include "models/llama3.h"
#include "runtime/vk/uploader.h"

namespace eaglevk::models {

loader::LlamaConfig read_qwen3_config(const loader::ModelFiles& files) {
  const std::string source = files.source();
  loader::LlamaConfig c = loader::parse_llama_config(files.config, source, {"Qwen3ForCausalLM"});
  // Qwen3's config carries a sliding window that is off in every dense release; running a
  // model that turns it on with full attention would give wrong answers past the window.
  if (loader::json_field::optional_bool(files.config, "use_sliding_window", source).value_or(false))
    fail("{}: use_sliding_window = true is not supported (eaglevk runs full attention)", source);
  return c;
}

Qwen3Model load_qwen3(const vk::Context& ctx, const loader::ModelFiles& files, const WeightPlacement& placement) {
  Qwen3Model m;
  const std::string source = files.source();
  m.config = read_qwen3_config(files);
  if (files.generation_config) loader::apply_generation_config(m.config, *files.generation_config, source);
  const loader::LlamaConfig& c = m.config;
  if (c.attention_bias || c.mlp_bias) fail("{}: attention_bias / mlp_bias are not supported", source);
  const loader::Checkpoint& ckpt = files.checkpoint;
  TensorUse use{ckpt, {}};
  vk::Uploader up(ctx);
  const int64_t H = c.hidden_size, V = c.vocab_size, hd = c.head_dim;
  auto matrix = [&](MatrixParts parts, const std::string& name) { return load_matrix(ctx, up, use, parts, name); };

  if (!ckpt.find("lm_head.weight") && !c.tie_word_embeddings)
    fail("checkpoint {} has no lm_head.weight and tie_word_embeddings is false", source);
  const LayerPart part = layer_part(placement, uint32_t(c.num_hidden_layers), !ckpt.find("lm_head.weight"));
  m.range = part.range;
  if (part.embed) m.embed = matrix({{"model.embed_tokens.weight", {V, H}}}, "embed_tokens");
  m.layers.resize(c.num_hidden_layers);
  for (uint32_t l = part.range.first; l < part.range.end; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    Qwen3Layer& layer = m.layers[l];
    layer.llama = load_llama3_layer(ctx, up, use, c, int(l));
    layer.q_norm = upload_f32_vector(ctx, up, use.get(p + "self_attn.q_norm.weight"), hd);
    layer.k_norm = upload_f32_vector(ctx, up, use.get(p + "self_attn.k_norm.weight"), hd);
  }
  if (part.head) {
    m.norm = upload_f32_vector(ctx, up, use.get("model.norm.weight"), H);
    if (ckpt.find("lm_head.weight")) m.lm_head = matrix({{"lm_head.weight", {V, H}}}, "lm_head");
  }
  use.check_all_used(part.elsewhere, {"rotary_emb.inv_freq"});
  up.flush();
  m.weight_bytes = use.used_device_bytes();
  m.parameters = use.used_parameters();
  return m;
}

TargetShape target_shape(const Qwen3Model& m) { return dense_target_shape(m.config); }

void record_target_forward(ops::OpContext& oc, const Qwen3Model& m, TargetState& s, const ForwardPass& pass) {
  const loader::LlamaConfig& c = m.config;
  const uint32_t H = c.hidden_size, I = c.intermediate_size;
  const uint32_t hd = c.head_dim, nh = c.num_attention_heads, nkv = c.num_key_value_heads;
  const uint32_t q_dim = nh * hd, qkv_dim = q_dim + 2 * nkv * hd;
  const float eps = c.rms_norm_eps;
  const vk::Arena& a = s.arena;
  const ScaffoldWeights w = scaffold_weights(m, H, eps);
  record_target_scaffold(oc, s, pass, w, [&](uint32_t l, const LayerPass& lp) {
    const Qwen3Layer& Q = m.layers[l];
    const Llama3Layer& L = Q.llama;
    const ops::Act qkv(a[s.qkv], qkv_dim);
    // The per-head norms come between the product and the rotation, so neither folds into the
    // product: q | k | v first, the q heads' and k heads' norms in place, then rotation and
    // cache write in one dispatch.
    norm_linear(oc, {lp.x, vk::BufferRange(L.attn_norm), eps, ops::Act(a[s.attn_norm], H), "attn_norm"}, L.qkv, qkv,
                lp.rows, lp.path, "qkv");
    const vk::BufferRange q_w(Q.q_norm), k_w(Q.k_norm);
    ops::rms_norm_heads(oc, qkv, lp.rows, nh, hd, eps, &q_w, "q_norm");
    // The two norms touch disjoint columns of the same rows, which the recorder tracks apart, but
    // both bind the whole qkv buffer, where synchronization validation sees a write after write.
    oc.rec.barrier();
    ops::rms_norm_heads(oc, qkv.cols(q_dim), lp.rows, nkv, hd, eps, &k_w, "k_norm");
    const ops::RopeKv rope = pass_rope_kv(s, pass, l, nh, hd, ops::RopePairing::RotateHalf);
    ops::rope_kv_write(oc, qkv, lp.rows, rope);
    ops::attention(oc, qkv, rope.kv, lp.positions, ops::Act(a[s.attn], q_dim), lp.rows,
                   pass_attention(pass, lp.split, nh, nkv, hd));
    linear(oc, ops::Act(a[s.attn], q_dim), L.o, lp.x, lp.rows, /*accumulate=*/true, lp.path, "o_proj");
    record_dense_mlp(oc, s, lp, L.ffn_norm, eps, L.gate_up, L.down, I);
  });
}

}  // namespace eaglevk::models
