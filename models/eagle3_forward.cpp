// The draft head's device state and its forward pass.
#include <algorithm>
#include <cmath>

#include <eaglevk/error.h>

#include "models/eagle3.h"

namespace eaglevk::models {

ops::KvLayer Eagle3State::kv() const {
  return ops::KvLayer{vk::BufferRange(k_cache), vk::BufferRange(v_cache), capacity,
                      uint32_t(k_cache.bytes / (uint64_t(capacity) * 2))};
}

namespace {

// Dry stand-ins for what the engine hands a draft pass (vk::DryAllocations): no pass is run.
// The target's embedding and lm_head serve heads without their own; their type may differ from
// the real target's, which can only change whether a norm folds into the product, and a fold
// touches fewer activations, never more.
struct DryPassInputs {
  vk::Buffer taps, ids, out_token, slots, proposal_rows, u_history, gather, tree_table;
  vk::Buffer target_embed, target_lm_head;
};

}  // namespace

std::vector<vk::CommandLog> record_eagle3_arena_passes(ops::Gpu& gpu, const Eagle3Model& m, Eagle3State& s) {
  const vk::Context& ctx = gpu.ctx;
  const uint32_t H = m.config.layer.hidden_size, Ht = m.fc.cols / 3, R = s.max_rows, K = s.logit_rows;
  const uint32_t V = uint32_t(m.config.target_vocab_size);
  DryPassInputs in;
  {
    vk::DryAllocations dry;
    auto buffer = [&](uint64_t bytes, const char* name) {
      return vk::Buffer(ctx, std::max<uint64_t>(bytes, 4), vk::MemoryKind::Device, name);
    };
    in.taps = buffer(uint64_t(R) * 3 * Ht * 4, "dry taps");
    in.ids = buffer(R * 4ull, "dry ids");
    in.out_token = buffer(std::max(R, K) * 4ull, "dry out_token");
    in.slots = buffer(std::max(R, K) * 4ull, "dry slots");
    in.proposal_rows = buffer(K * 4ull, "dry proposal rows");
    in.u_history = buffer(uint64_t(2 * K) * H * 4, "dry u_history");
    in.gather = buffer(K * 4ull, "dry gather");
    in.tree_table = buffer(uint64_t(K) * (K + 1) * 4, "dry tree");
    in.target_embed = buffer(uint64_t(V) * H * 2, "dry target embed");
    in.target_lm_head = buffer(uint64_t(V) * H * 2, "dry target lm_head");
  }
  const TargetWeights target{{vk::BufferRange(in.target_embed), ops::WeightType::F16, V, H},
                             {vk::BufferRange(in.target_lm_head), ops::WeightType::F16, V, H}};
  // The kinds of pass the engine runs: a catch-up from the target's taps, a step of one row, a
  // tree step of K nodes, and for several sequences their catch-up and steps; each at a short
  // and at the full context (attention split in two dispatches or not), each path.
  std::vector<DraftPass> passes;
  DraftTreeStep tree{ops::Act(in.u_history, H), K, ops::IntVec{in.gather}, ops::IntVec{in.slots},
                     ops::TreePath{in.tree_table, 0, K + 1, 0}, K};
  const ops::IntVec slots{in.slots};
  for (uint32_t kv_len : {R, std::max(R, s.split_keys + 1)})
    for (bool batch_invariant : {false, true}) {
      DraftPass p;
      p.ids = ops::IntVec{in.ids};
      p.positions = ops::IntVec{s.positions};
      p.out_token = ops::IntVec{in.out_token};
      p.batch_invariant = batch_invariant;
      p.kv_len = std::min(kv_len, s.capacity);
      DraftPass catch_up = p;
      catch_up.rows = R, catch_up.from_taps = true, catch_up.taps = ops::Act(in.taps, 3 * Ht);
      DraftPass step = p;
      step.rows = 1;
      DraftPass tree_step = p;
      tree_step.rows = K, tree_step.tree = &tree;
      passes.insert(passes.end(), {catch_up, step, tree_step});
      if (K > 1) {
        DraftPass batched_catch_up = catch_up;
        batched_catch_up.slots = &slots, batched_catch_up.proposal_rows = ops::IntVec{in.proposal_rows};
        batched_catch_up.proposals = std::min(R, K);
        DraftPass batched_step = p;
        batched_step.rows = K, batched_step.slots = &slots, batched_step.proposals = K;
        passes.insert(passes.end(), {batched_catch_up, batched_step});
      }
    }
  vk::Recorder rec(ctx, vk::Recorder::Dry{});
  vk::DeferredPipelines deferred(gpu.pipelines);  // the dry recorder needs interfaces only
  ops::OpContext oc{gpu, rec};
  std::vector<vk::CommandLog> logs;
  for (const DraftPass& pass : passes) {
    rec.log = &logs.emplace_back();
    rec.begin();
    record_eagle3_forward(oc, m, s, target, pass);
  }
  return logs;
}

void derive_eagle3_arena(ops::Gpu& gpu, const Eagle3Model& m, Eagle3State& s) {
  s.arena.lay_out_dry(gpu.ctx, "draft activations (dry)");
  for (const vk::CommandLog& log : record_eagle3_arena_passes(gpu, m, s)) s.arena.plan.derive(s.arena.buffer, log);
}

Eagle3State make_eagle3_state(ops::Gpu& gpu, const Eagle3Model& m, uint32_t capacity, uint32_t max_rows,
                              uint32_t max_steps, bool arena_reuse, uint32_t logit_rows) {
  const vk::Context& ctx = gpu.ctx;
  const loader::LlamaConfig& c = m.config.layer;
  Eagle3State s;
  s.capacity = (capacity + 63) / 64 * 64;
  s.max_rows = max_rows;
  s.logit_rows = std::max(1u, logit_rows);
  const uint64_t H = c.hidden_size, I = c.intermediate_size, Vd = m.config.draft_vocab_size;
  const uint64_t kv_dim = uint64_t(c.num_key_value_heads) * c.head_dim;
  const uint64_t q_dim = uint64_t(c.num_attention_heads) * c.head_dim;
  s.k_cache = vk::Buffer(ctx, s.capacity * kv_dim * 2, vk::MemoryKind::Device, "draft k_cache");
  s.v_cache = vk::Buffer(ctx, s.capacity * kv_dim * 2, vk::MemoryKind::Device, "draft v_cache");
  // The head's own rope (theta, scaling), never the target's.
  std::vector<float> table = ops::rope_table(loader::rope_inv_freq(c.head_dim, c.rope_theta, c.rope_scaling), s.capacity);
  s.rope_table = vk::Buffer(ctx, table.size() * 4, vk::MemoryKind::Device, "draft rope_table");
  vk::upload(ctx, s.rope_table, table.data(), table.size() * 4);
  s.positions = vk::Buffer(ctx, (max_rows + max_steps) * 4, vk::MemoryKind::Device, "draft positions");
  s.split_keys = ops::attention_split_keys(ctx);
  s.split_scratch = ops::make_attention_split_scratch(ctx, c.num_attention_heads, c.head_dim, s.capacity, max_rows,
                                                      s.split_keys, "draft attention splits");

  // Sizes only: the lifetimes come from dry recordings of the forward (derive_eagle3_arena).
  // The feature buffer carries the pre-norm output from one pass to the next; the engine
  // samples the logits after a pass.
  vk::ArenaPlan& plan = s.arena.plan;
  const uint64_t R = max_rows;
  s.feature = plan.add("feature", R * H * 4, vk::Lifetime::Carried);
  s.embedded = plan.add("embedded", R * H * 4);
  s.attn_in = plan.add("attn_in", R * 2 * H * 4);
  s.qkv = plan.add("qkv", R * (q_dim + 2 * kv_dim) * 4);
  s.attn = plan.add("attn", R * q_dim * 4);
  s.ffn_norm = plan.add("ffn_norm", R * H * 4);
  s.gate_up = plan.add("gate_up", R * 2 * I * 4);
  s.act = plan.add("act", R * I * 4);
  s.out_norm = plan.add("out_norm", s.logit_rows * H * 4);
  s.logits = plan.add("logits", s.logit_rows * Vd * 4, vk::Lifetime::Output);
  s.proposing = plan.add("proposing", s.logit_rows * H * 4);
  derive_eagle3_arena(gpu, m, s);
  s.arena.allocate(ctx, arena_reuse, "draft activations");
  return s;
}

uint64_t eagle3_arena_bytes(ops::Gpu& gpu, const Eagle3Model& m, uint32_t max_rows, bool arena_reuse) {
  vk::DryAllocations dry;
  const uint32_t capacity = std::max(64u, ops::attention_split_keys(gpu.ctx) + 64);  // see target_arena_bytes
  return make_eagle3_state(gpu, m, capacity, max_rows, 1, arena_reuse).arena.plan.total_bytes;
}

uint32_t record_eagle3_forward(ops::OpContext& oc, const Eagle3Model& m, Eagle3State& s, const TargetWeights& target,
                               const DraftPass& pass) {
  const loader::LlamaConfig& c = m.config.layer;
  const uint32_t T = pass.rows, H = c.hidden_size, I = c.intermediate_size, Vd = m.config.draft_vocab_size;
  const uint32_t hd = c.head_dim, nh = c.num_attention_heads, nkv = c.num_key_value_heads;
  const uint32_t q_dim = nh * hd, kv_dim = nkv * hd, qkv_dim = q_dim + 2 * kv_dim;
  if (T == 0 || T > s.max_rows) fail("a draft pass of {} rows (at most {})", T, s.max_rows);
  const bool batched = pass.slots != nullptr;
  if (batched && pass.tree) fail("a draft pass of several sequences with a tree");
  if (!pass.from_taps && !pass.tree && T != (batched ? pass.proposals : 1))
    fail("draft steps after the catch-up run one row per sequence");
  if (batched && (pass.proposals == 0 || pass.proposals > std::min(T, s.logit_rows)))
    fail("a draft pass of {} sequences (at most {})", pass.proposals, s.logit_rows);
  if (pass.tree && (pass.from_taps || T > s.logit_rows)) fail("a draft tree step of {} rows (at most {})", T, s.logit_rows);
  if (pass.kv_len > s.capacity) fail("draft position {} beyond its context {}", pass.kv_len - 1, s.capacity);
  const float eps = c.rms_norm_eps;
  const ops::MatmulPath path = pass.batch_invariant ? ops::MatmulPath::Vector : ops::MatmulPath::Auto;
  const vk::Arena& a = s.arena;

  // g: the feature rows this pass works on, updated in place into h and then u.
  ops::Act g = pass.from_taps || pass.tree ? ops::Act(a[s.feature], H) : ops::Act(a[s.feature], H).row(pass.feature_row);
  if (pass.from_taps) linear(oc, pass.taps, m.fc, g, T, false, path, "draft_fc");
  if (pass.tree)
    ops::gather_rows(oc, pass.tree->u_history, pass.tree->history_rows, pass.tree->gather, g, T, H, "draft_tree_feature");

  // The two norm paths: independent dispatches into the two halves of one buffer; the
  // recorder puts the one barrier before the q/k/v matmul that reads both.
  ops::Act attn_in(a[s.attn_in], 2 * H), e(a[s.embedded], H);
  ops::embed(oc, pass.ids, T, m.embed.buffer ? m.embed.matrix() : target.embed, e);
  vk::BufferRange in_w(m.in_norm), hidden_w(m.hidden_norm), post_w(m.post_norm), final_w(m.final_norm);
  ops::rms_norm(oc, e, &in_w, attn_in, T, H, eps, "draft_input_norm");
  ops::rms_norm(oc, g, &hidden_w, attn_in.cols(H), T, H, eps, "draft_hidden_norm");

  ops::Act qkv(a[s.qkv], qkv_dim);
  ops::KvLayer kv = s.kv();
  const ops::RopeKv rope{nh, hd, pass.positions, s.rope_table, s.capacity, ops::RopePairing::RotateHalf,
                         pass.tree ? pass.tree->slots : batched ? *pass.slots : pass.positions, kv};
  linear_rope_kv(oc, attn_in, m.qkv, qkv, T, path, "draft_qkv", rope);
  ops::AttentionParams attn{nh, nkv, hd, pass.kv_len, 0, 1.0f / std::sqrt(float(hd))};
  attn.tree = pass.tree ? &pass.tree->path : nullptr;
  attn.regions = pass.slots;
  const ops::AttentionSplit split = ops::attention_split(s.split_keys, s.split_scratch);
  attn.split = &split;
  ops::attention(oc, qkv, kv, pass.positions, ops::Act(a[s.attn], q_dim), T, attn);
  // h = r + o, with r = g (default) or its normed copy (norm_before_residual).
  ops::Act h = m.config.norm_before_residual ? attn_in.cols(H) : g;
  linear(oc, ops::Act(a[s.attn], q_dim), m.o, h, T, /*accumulate=*/true, path, "draft_o_proj");
  ops::Act gu(a[s.gate_up], 2 * I);
  norm_linear_swiglu(oc, {h, post_w, eps, ops::Act(a[s.ffn_norm], H), "draft_post_norm"}, m.gate_up, gu,
                     ops::Act(a[s.act], I), T, I, path, "draft_gate_up");
  linear(oc, ops::Act(a[s.act], I), m.down, h, T, /*accumulate=*/true, path, "draft_down");
  if (m.config.norm_before_residual) ops::copy_rows(oc, h, g, T, H, "draft_feature");  // u feeds the next step

  if (pass.tree) ops::copy_rows(oc, g, pass.tree->u_history.row(pass.tree->save_row), T, H, "draft_tree_u");

  // Logits of the last row only (it proposes the next token), of every node of a tree step, or
  // of each sequence's proposing row. A batched catch-up first moves those rows to the front
  // of the feature buffer, where the steps continue from them.
  const uint32_t logit_rows = pass.tree ? T : batched ? pass.proposals : 1;
  ops::Act u_last = g.row(T - logit_rows);
  if (batched && pass.from_taps) {
    ops::Act proposing(a[s.proposing], H);
    ops::gather_rows(oc, g, T, pass.proposal_rows, proposing, logit_rows, H, "draft_proposing");
    u_last = ops::Act(a[s.feature], H);
    ops::copy_rows(oc, proposing, u_last, logit_rows, H, "draft_feature");
  }
  const NormedInput final_in{u_last, final_w, eps, ops::Act(a[s.out_norm], H), "draft_final_norm"};
  if (m.lm_head.buffer) {
    norm_linear(oc, final_in, m.lm_head, ops::Act(a[s.logits], Vd), logit_rows, path, "draft_lm_head");
  } else {
    norm_matmul(oc, final_in, target.lm_head, ops::Act(a[s.logits], Vd), logit_rows, path, "draft_lm_head");
  }
  vk::BufferRange d2t(m.d2t);
  if (!pass.tree) ops::argmax(oc, ops::Act(a[s.logits], Vd), logit_rows, Vd, pass.out_token, m.d2t ? &d2t : nullptr);
  if (batched) return pass.from_taps ? 0 : pass.feature_row;
  return pass.from_taps ? T - 1 : pass.feature_row;
}

}  // namespace eaglevk::models
