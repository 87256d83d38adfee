#include "models/llama4.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include <eaglevk/error.h>

#include "loader/quant.h"
#include "models/forward_scaffold.h"
#include "models/layer_part.h"
#include "runtime/vk/uploader.h"

namespace eaglevk::models {
namespace {

// Whole experts per allocation: as many as maxMemoryAllocationSize allows.
// `memory`: Device, or HostWeights for experts kept in system memory (WeightPlacement).
ExpertTensor allocate_experts(const vk::Context& ctx, vk::MemoryKind memory, ops::WeightType type, int64_t E,
                              int64_t rows, int64_t cols, bool k_major, const std::string& name) {
  ExpertTensor t;
  t.type = type;
  t.experts = uint32_t(E);
  t.rows = uint32_t(rows);
  t.cols = uint32_t(cols);
  t.k_major = k_major;
  const uint64_t bytes = t.weights().expert_bytes(), padded = (bytes + 3) / 4 * 4;
  if (padded > ctx.max_allocation)
    fail("{}: one expert is {} bytes, more than the device allocates at once ({} bytes, maxMemoryAllocationSize)",
         name, bytes, ctx.max_allocation);
  t.per_buffer = uint32_t(std::min<uint64_t>(uint64_t(E), (ctx.max_allocation - (padded - bytes)) / bytes));
  for (int64_t first = 0; first < E; first += t.per_buffer) {
    uint64_t n = std::min<uint64_t>(t.per_buffer, uint64_t(E - first));
    std::string part = E > t.per_buffer ? fmt::format("{} [{}, {})", name, first, first + int64_t(n)) : name;
    t.buffers.emplace_back(ctx, (n * bytes + 3) / 4 * 4, memory, part);
  }
  return t;
}

// Hugging Face's fused experts [E, in, out] (used as x W) go up as stored, one put per expert
// from the mapping; the kernels read them k-major.
ExpertTensor upload_experts_k_major(const vk::Context& ctx, vk::MemoryKind memory, vk::Uploader& up,
                                    const loader::TensorView& t, int64_t E, int64_t in, int64_t out,
                                    const std::string& name) {
  expect_shape(t, {E, in, out});
  ops::WeightType type = weight_type_of(t);
  if (ops::weight_type_quantized(type))
    fail("tensor '{}': fused Hugging Face expert tensors must be F32, F16 or BF16", t.name);
  ExpertTensor x = allocate_experts(ctx, memory, type, E, out, in, /*k_major=*/true, name);
  const ops::ExpertWeights w = x.weights();
  const uint64_t per = w.expert_bytes();
  for (int64_t e = 0; e < E; ++e) up.put(w.expert_range(uint32_t(e)), t.data + uint64_t(e) * per, per);
  return x;
}

// GGUF keeps each expert matrix [E, out, in] already, gate and up apart: interleave them per
// expert (gate rows, then up rows) straight from the mapping, any block type.
ExpertTensor upload_experts_gate_up(const vk::Context& ctx, vk::MemoryKind memory, vk::Uploader& up,
                                    const loader::TensorView& gate, const loader::TensorView& upw, int64_t E,
                                    int64_t I, int64_t H, const std::string& name) {
  expect_shape(gate, {E, I, H});
  expect_shape(upw, {E, I, H});
  if (gate.dtype != upw.dtype)
    fail("'{}' and '{}' are stored in different types ({} and {}); eaglevk fuses them and needs one type", gate.name,
         upw.name, loader::dtype_name(gate.dtype), loader::dtype_name(upw.dtype));
  ExpertTensor x = allocate_experts(ctx, memory, weight_type_of(gate), E, 2 * I, H, false, name);
  const ops::ExpertWeights w = x.weights();
  const uint64_t per = gate.bytes / uint64_t(E);
  for (int64_t e = 0; e < E; ++e) {
    vk::BufferRange dst = w.expert_range(uint32_t(e));
    up.put(dst.sub(0, per), gate.data + e * per, per);
    up.put(dst.sub(per, dst.bytes - per), upw.data + e * per, per);
  }
  return x;
}

ExpertTensor upload_experts_as_stored(const vk::Context& ctx, vk::MemoryKind memory, vk::Uploader& up,
                                      const loader::TensorView& t, int64_t E, int64_t out, int64_t in,
                                      const std::string& name) {
  expect_shape(t, {E, out, in});
  ExpertTensor x = allocate_experts(ctx, memory, weight_type_of(t), E, out, in, false, name);
  const ops::ExpertWeights w = x.weights();
  const uint64_t per = t.bytes / uint64_t(E);
  for (int64_t e = 0; e < E; ++e) up.put(w.expert_range(uint32_t(e)), t.data + e * per, per);
  return x;
}

// Experts stored one 2-D matrix each (llm-compressor's files: Meta's and RedHatAI's FP8 Llama-4,
// `experts.{e}.gate_proj.weight` [I, H], up_proj [I, H], down_proj [H, I]): gate and up rows
// per expert as upload_experts_gate_up lays them out, down as stored; every expert in one type.
void upload_experts_split(const vk::Context& ctx, vk::MemoryKind memory, vk::Uploader& up, TensorUse& use,
                          const std::string& f, int64_t E, int64_t I, int64_t H, const std::string& p,
                          ExpertTensor& gate_up, ExpertTensor& down) {
  auto get = [&](int64_t e, const char* proj, int64_t rows, int64_t cols) -> const loader::TensorView& {
    const loader::TensorView& t = use.get(fmt::format("{}experts.{}.{}.weight", f, e, proj));
    expect_shape(t, {rows, cols});
    return t;
  };
  const ops::WeightType type = weight_type_of(get(0, "gate_proj", I, H));
  gate_up = allocate_experts(ctx, memory, type, E, 2 * I, H, false, p + "experts_gate_up");
  down = allocate_experts(ctx, memory, type, E, H, I, false, p + "experts_down");
  const ops::ExpertWeights wgu = gate_up.weights(), wdn = down.weights();
  for (int64_t e = 0; e < E; ++e) {
    const loader::TensorView& g = get(e, "gate_proj", I, H);
    const loader::TensorView& u = get(e, "up_proj", I, H);
    const loader::TensorView& d = get(e, "down_proj", H, I);
    for (const loader::TensorView* t : {&g, &u, &d})
      if (weight_type_of(*t) != type)
        fail("expert tensor '{}' in {} is {}, expert 0's gate_proj {}; eaglevk keeps all experts of a layer in one "
             "type",
             t->name, t->file, ops::weight_type_name(weight_type_of(*t)), ops::weight_type_name(type));
    const vk::BufferRange dst = wgu.expert_range(uint32_t(e));
    const uint64_t half = ops::weight_row_bytes(type, uint64_t(H)) * uint64_t(I);
    put_tensor(up, dst.sub(0, half), g);
    put_tensor(up, dst.sub(half, dst.bytes - half), u);
    put_tensor(up, wdn.expert_range(uint32_t(e)), d);
    for (const loader::TensorView* t : {&g, &u, &d}) use.ckpt.release_pages(*t);
  }
}

}  // namespace

ops::ExpertWeights ExpertTensor::weights() const {
  ops::ExpertWeights w{{}, type, experts, rows, cols, k_major, {}, per_buffer};
  for (const vk::Buffer& b : buffers) w.groups.emplace_back(b);
  return w;
}

Llama4Config load_llama4_config(const loader::ModelFiles& files) {
  const std::string source = files.format == "gguf" ? files.source() : (files.folder / "config.json").string();
  Llama4Config c = loader::parse_llama4_config(files.config, source);
  // generation_config.json, as for Llama-3: its bos, then its eos ids before config.json's.
  if (files.generation_config)
    loader::apply_generation_config(c.base, *files.generation_config, (files.folder / "generation_config.json").string());
  return c;
}

bool is_llama4_routed_expert(std::string_view tensor_name) {
  return tensor_name.find(".feed_forward.experts.") != std::string_view::npos;
}

uint64_t llama4_routed_expert_bytes(const loader::Checkpoint& checkpoint) {
  uint64_t sum = 0;
  for (const auto& [name, t] : checkpoint.tensors)
    if (is_llama4_routed_expert(name)) sum += loader::upload_bytes(t);
  return sum;
}

Llama4Model load_llama4(const vk::Context& ctx, const loader::ModelFiles& files, const WeightPlacement& placement) {
  Llama4Model m;
  m.config = load_llama4_config(files);
  const Llama4Config& c = m.config;
  const loader::LlamaConfig& b = c.base;
  const std::string source = files.source();
  if (b.attention_bias) fail("{}: attention_bias is not supported", source);
  const loader::Checkpoint& ckpt = files.checkpoint;
  TensorUse use{ckpt, {}};
  vk::Uploader up(ctx);
  const int64_t H = b.hidden_size, I = b.intermediate_size, Im = c.intermediate_size_mlp, V = b.vocab_size,
                hd = b.head_dim, E = c.num_local_experts;
  const int64_t q_dim = b.num_attention_heads * hd, kv_dim = b.num_key_value_heads * hd;
  const std::string P = c.prefix;
  const vk::MemoryKind experts_memory = placement.experts_in_host ? vk::MemoryKind::HostWeights : vk::MemoryKind::Device;

  auto matrix = [&](MatrixParts parts, const std::string& name) { return load_matrix(ctx, up, use, parts, name); };

  const bool tied = !ckpt.find(P + "lm_head.weight");
  if (tied && !b.tie_word_embeddings)
    fail("checkpoint {} has no {}lm_head.weight and tie_word_embeddings is false", source, P);
  const LayerPart part = layer_part(placement, uint32_t(b.num_hidden_layers), tied, P);
  m.range = part.range;
  if (part.embed) m.embed = matrix({{P + "model.embed_tokens.weight", {V, H}}}, "embed_tokens");
  m.layers.resize(b.num_hidden_layers);
  for (int l = int(part.range.first); l < int(part.range.end); ++l) {
    std::string p = fmt::format("{}model.layers.{}.", P, l);
    Llama4Layer& layer = m.layers[l];
    layer.attn_norm = upload_f32_vector(ctx, up, use.get(p + "input_layernorm.weight"), H);
    layer.qkv = matrix({{p + "self_attn.q_proj.weight", {q_dim, H}},
                        {p + "self_attn.k_proj.weight", {kv_dim, H}},
                        {p + "self_attn.v_proj.weight", {kv_dim, H}}},
                       p + "qkv");
    layer.o = matrix({{p + "self_attn.o_proj.weight", {H, q_dim}}}, p + "o_proj");
    layer.ffn_norm = upload_f32_vector(ctx, up, use.get(p + "post_attention_layernorm.weight"), H);
    std::string f = p + "feed_forward.";
    if (c.moe_layer[l]) {
      layer.router = matrix({{f + "router.weight", {E, H}}}, p + "router");
      layer.shared_gate_up = matrix({{f + "shared_expert.gate_proj.weight", {I, H}}, {f + "shared_expert.up_proj.weight", {I, H}}},
                                    p + "shared_gate_up");
      layer.shared_down = matrix({{f + "shared_expert.down_proj.weight", {H, I}}}, p + "shared_down");
      if (ckpt.find(f + "experts.0.gate_proj.weight")) {  // one 2-D matrix per expert
        upload_experts_split(ctx, experts_memory, up, use, f, E, I, H, p, layer.experts_gate_up, layer.experts_down);
      } else if (ckpt.find(f + "experts.gate_proj.weight")) {  // GGUF: [E, out, in] per matrix
        const loader::TensorView& g = use.get(f + "experts.gate_proj.weight");
        const loader::TensorView& u = use.get(f + "experts.up_proj.weight");
        const loader::TensorView& dn = use.get(f + "experts.down_proj.weight");
        layer.experts_gate_up = upload_experts_gate_up(ctx, experts_memory, up, g, u, E, I, H, p + "experts_gate_up");
        layer.experts_down = upload_experts_as_stored(ctx, experts_memory, up, dn, E, H, I, p + "experts_down");
        for (const loader::TensorView* t : {&g, &u, &dn}) ckpt.release_pages(*t);
      } else {
        const loader::TensorView& gu = use.get(f + "experts.gate_up_proj");
        const loader::TensorView& dn = use.get(f + "experts.down_proj");
        layer.experts_gate_up = upload_experts_k_major(ctx, experts_memory, up, gu, E, H, 2 * I, p + "experts_gate_up");
        layer.experts_down = upload_experts_k_major(ctx, experts_memory, up, dn, E, I, H, p + "experts_down");
        for (const loader::TensorView* t : {&gu, &dn}) ckpt.release_pages(*t);
      }
    } else {
      layer.gate_up = matrix({{f + "gate_proj.weight", {Im, H}}, {f + "up_proj.weight", {Im, H}}}, p + "gate_up");
      layer.down = matrix({{f + "down_proj.weight", {H, Im}}}, p + "down_proj");
    }
  }
  if (part.head) {
    m.norm = upload_f32_vector(ctx, up, use.get(P + "model.norm.weight"), H);
    if (!tied) m.lm_head = matrix({{P + "lm_head.weight", {V, H}}}, "lm_head");
  }
  // The vision tower, when the checkpoint has one with real image token ids; otherwise its
  // tensors are knowingly skipped and the text model runs alone. Of a model split across devices
  // the first part holds it: its features replace embedding rows, which only that part makes.
  if (part.range.first != 0) m.no_vision_reason = "the vision tower is with the first part of a split model";
  if (part.range.first == 0)
    if (std::optional<Llama4VisionConfig> vc = usable_llama4_vision(files, uint32_t(H), V, &m.no_vision_reason))
      m.vision = load_llama4_vision(ctx, up, use, *vc);
  std::vector<std::string> skipped = part.elsewhere;
  if (!m.vision) skipped.insert(skipped.end(), {"vision_model.", "multi_modal_projector."});
  use.check_all_used(skipped,
                     {"rotary_emb.inv_freq", "rope_freqs.weight"});
  up.flush();
  m.weight_bytes = use.used_device_bytes();
  m.parameters = use.used_parameters();
  return m;
}

TargetShape target_shape(const Llama4Model& m) {
  const Llama4Config& c = m.config;
  const loader::LlamaConfig& b = c.base;
  TargetShape t;
  t.layers = b.num_hidden_layers;
  t.hidden = b.hidden_size;
  t.heads = b.num_attention_heads;
  t.kv_heads = b.num_key_value_heads;
  t.head_dim = b.head_dim;
  t.vocab = b.vocab_size;
  t.ffn_width = uint32_t(std::max(c.intermediate_size_mlp, b.intermediate_size));
  bool any_moe = std::find(c.moe_layer.begin(), c.moe_layer.end(), true) != c.moe_layer.end();
  t.experts = any_moe ? c.num_local_experts : 0;
  t.experts_per_token = c.num_experts_per_tok;
  t.expert_width = b.intermediate_size;
  t.rope_inv_freq = loader::rope_inv_freq(b.head_dim, b.rope_theta, b.rope_scaling);
  return t;
}

void record_target_forward(ops::OpContext& oc, const Llama4Model& m, TargetState& s, const ForwardPass& pass) {
  const Llama4Config& c = m.config;
  const loader::LlamaConfig& b = c.base;
  const uint32_t H = b.hidden_size, I = b.intermediate_size, Im = c.intermediate_size_mlp, E = c.num_local_experts,
                 K = c.num_experts_per_tok;
  const uint32_t hd = b.head_dim, nh = b.num_attention_heads, nkv = b.num_key_value_heads;
  const uint32_t q_dim = nh * hd, qkv_dim = q_dim + 2 * nkv * hd;
  const float eps = b.rms_norm_eps;
  const vk::Arena& a = s.arena;
  const ScaffoldWeights w = scaffold_weights(m, H, eps);
  record_target_scaffold(oc, s, pass, w, [&](uint32_t l, const LayerPass& lp) {
    const Llama4Layer& L = m.layers[l];
    const uint32_t T = lp.rows;
    const ops::MatmulPath path = lp.path;
    const ops::Act x = lp.x, qkv(a[s.qkv], qkv_dim), n2(a[s.ffn_norm], H);
    const NormedInput attn_in{x, vk::BufferRange(L.attn_norm), eps, ops::Act(a[s.attn_norm], H), "attn_norm"};
    ops::AttentionParams params =
        pass_attention(pass, lp.split, nh, nkv, hd, c.chunked_layer[l] ? uint32_t(c.attention_chunk_size) : 0);
    if (!c.rope_layer[l] && c.attn_temperature_tuning) {
      params.temperature_tuning = true;
      params.floor_scale = c.floor_scale;
      params.attn_scale = c.attn_scale;
    }
    // Rope layers rotate q and k (Llama-4's interleaved pairs), NoPE layers only write the cache.
    const ops::RopeKv rope = pass_rope_kv(s, pass, l, nh, hd,
                                          c.rope_layer[l] ? ops::RopePairing::Interleaved : ops::RopePairing::None);
    if (c.rope_layer[l] && c.use_qk_norm) {
      // The QK norm comes between the rotation and the cache: a dispatch of its own after the
      // product, with them.
      norm_linear(oc, attn_in, L.qkv, qkv, T, path, "qkv");
      ops::rope_norm_kv_write(oc, qkv, T, rope, eps);
    } else {
      // Rotation (or none) and the cache write in the q/k/v product's workgroups where they fold.
      norm_linear_rope_kv(oc, attn_in, L.qkv, qkv, T, path, "qkv", rope);
    }
    ops::attention(oc, qkv, rope.kv, lp.positions, ops::Act(a[s.attn], q_dim), T, params);
    linear(oc, ops::Act(a[s.attn], q_dim), L.o, x, T, /*accumulate=*/true, path, "o_proj");
    if (!c.moe_layer[l]) {
      record_dense_mlp(oc, s, lp, L.ffn_norm, eps, L.gate_up, L.down, Im);
      return;
    }
    // The normalised rows feed the shared expert, the router and the routed experts.
    const vk::BufferRange ffn_w(L.ffn_norm);
    ops::rms_norm(oc, x, &ffn_w, n2, T, H, eps, "ffn_norm");
    // Shared expert, always added.
    ops::Act gu(a[s.gate_up], 2 * I), act(a[s.act], I);
    linear_swiglu(oc, n2, L.shared_gate_up, gu, act, T, I, path, "shared_gate_up");
    linear(oc, act, L.shared_down, x, T, true, path, "shared_down");
    // Routed experts: top-k by router logit, sigmoid score on the expert input.
    ops::Act router(a[s.router], E), xin(a[s.expert_in], H), egu(a[s.expert_gate_up], 2 * I),
        eact(a[s.expert_act], I);
    linear(oc, n2, L.router, router, T, false, path, "router");
    ops::IntVec ids{s.expert_ids};
    ops::moe_route(oc, router, n2, T, E, K, H, ids, xin);
    const ops::ExpertWeights wgu = L.experts_gate_up.weights(), wdn = L.experts_down.weights();
    // A prefill groups its rows by expert, so that each expert's weights are read once for all
    // its rows (a GEMM per expert); batch-invariant passes keep the per-row kernel.
    const ops::IntVec by_expert{s.expert_rows};
    const bool grouped = ops::expert_rows_grouped(T * K, path);
    if (grouped) ops::group_rows_by_expert(oc, ids, T * K, E, by_expert);
    const ops::IntVec* lists = grouped ? &by_expert : nullptr;
    ops::matmul_id_swiglu(oc, xin, wgu, ids, egu, eact, T * K, "experts_gate_up", lists);
    for (uint32_t slot = 0; slot < K; ++slot)
      ops::matmul_id(oc, eact, wdn, ids, x, T * K, K, slot, true, "experts_down", lists);
  });
}

}  // namespace eaglevk::models
