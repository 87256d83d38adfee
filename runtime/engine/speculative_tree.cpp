// One round of tree drafting (EAGLE-2's dynamic tree with an EAGLE-3 head; docs/tree.md): the
// draft catches up, expands the tree level by level on the device, the best M - 1 nodes are
// verified by the target in one pass, and the host walks the accepted path. All of it is one
// submission; the accepted path's KV rows and taps are moved to consecutive rows at the start
// of the next round's submission.
#include <algorithm>
#include <cmath>

#include <eaglevk/error.h>

#include "runtime/engine/sampler.h"
#include "runtime/engine/speculative.h"
#include "runtime/ops/tree.h"

namespace eaglevk::engine {

void check_tree_params(const TreeParams& tree) { ops::check_tree_shape(tree.topk, tree.steps, tree.draft_tokens); }

std::vector<uint32_t> walk_tree(const std::vector<int32_t>& tokens, const std::vector<int32_t>& parents,
                                const std::function<int32_t(uint32_t)>& choice, const std::vector<bool>* allowed) {
  const uint32_t M = uint32_t(tokens.size());
  std::vector<uint32_t> path = {0};
  for (uint32_t node = 0;;) {
    const int32_t want = choice(node);
    uint32_t next = 0;
    for (uint32_t j = node + 1; j < M && !next; ++j)
      if ((!allowed || (*allowed)[j]) && parents[j] == int32_t(node) && tokens[j] == want) next = j;
    if (!next) return path;
    path.push_back(next);
    node = next;
  }
}

void SpeculativeDecoder::record_tree_compaction(vk::Recorder& rec) {
  const UploadLayout up = upload_layout(max_rows_, k_, tree_);
  const uint32_t H = target_.config().hidden_size;
  ops::OpContext oc{gpu_, rec};
  const ops::IntVec path{vk::BufferRange(upload_), uint32_t(up.compact_path())};
  for (uint32_t l = 0; l < uint32_t(tstate_.k_cache.size()); ++l) {
    const ops::KvLayer kv = tstate_.kv_layer(l);
    ops::row_compact(oc, path, tree_.draft_tokens, kv.k, &kv.v, tstate_.kv_dim / 2, "tree_compact_kv");
  }
  ops::row_compact(oc, path, tree_.draft_tokens, vk::BufferRange(taps_), nullptr, 3 * H, "tree_compact_taps");
}

SpeculativeDecoder::RoundOutcome SpeculativeDecoder::tree_round(uint32_t P, uint32_t c, uint32_t tap_row0, int32_t y,
                                                                const std::vector<int32_t>& history,
                                                                const GenerationOptions& o) {
  const UploadLayout up = upload_layout(max_rows_, k_, tree_);
  auto* slots = static_cast<int32_t*>(upload_.mapped);
  // Near the end of the context the tree shrinks: its M nodes take KV rows P..P+M-1.
  const uint32_t M = std::min(tree_.draft_tokens, context_ - P);
  const uint32_t K = std::min(tree_.topk, std::max(M, 2u) - 1), S = std::min(tree_.steps, std::max(M, 2u) - 1);
  const uint32_t catch_rows = P - c;

  for (uint32_t i = 0; i < catch_rows; ++i) {
    slots[up.draft_ids() + i] = history[c + 1 + i];
    slots[up.draft_positions() + i] = int32_t(c + i);
  }
  // Expansion i runs its K rows at position P + i in draft KV rows P + K i + r.
  for (uint32_t i = 0; i + 1 < S; ++i)
    for (uint32_t r = 0; r < K; ++r) {
      slots[up.tree_positions() + i * K + r] = int32_t(P + i);
      slots[up.tree_slots() + i * K + r] = int32_t(P + K * i + r);
    }
  for (uint32_t j = 0; j < M; ++j) slots[up.target_slots() + j] = int32_t(P + j);
  slots[up.target_ids()] = y;
  slots[up.target_positions()] = int32_t(P);
  // The last tree's accepted path, which this round's commands move to consecutive rows first.
  slots[up.compact_path()] = int32_t(compact_path_.size());
  slots[up.compact_path() + 1] = int32_t(compact_base_);
  for (uint32_t i = 0; i < compact_path_.size(); ++i) slots[up.compact_path() + 2 + i] = int32_t(compact_path_[i]);
  compact_path_.clear();

  const bool sampled = !o.sampling.greedy();
  const TreeShape shape{catch_rows, K, S, M, tap_row0, o.logprobs > 0, bool(tap_sink_), sampled, o.sampling};
  submit_round(catch_rows, tap_row0, ChainShape{}, shape, P + M, [&](vk::Recorder& rec, uint32_t kv_bound, bool exact) {
    record_tree_round(rec, shape, P, kv_bound, exact);
  });

  // 5. Acceptance: from the root, step to the child whose token is the target's choice at the
  // node (siblings carry distinct tokens), then the target's choice after the last accepted
  // node. Greedy, the choice is the argmax. At T > 0 it is the node's draw x ~ p: a tree's
  // children are the draft's top-K tokens (point-mass proposals), for which the recursive
  // rejection over siblings (accept child c with p(c), else remove c from p, renormalise and
  // try the next, finally draw from what is left) emits each token with probability p(token)
  // and accepts exactly the child equal to that token; one draw is that procedure.
  const uint32_t V = target_.config().vocab_size;
  const auto* r = static_cast<const int32_t*>(tree_readback_.mapped);
  TreeRound tree;
  tree.base = P;
  tree.target_argmax.assign(r + 3 * M, r + 4 * M);
  if (sampled) tree.target_draws.assign(r + 4 * M, r + 5 * M);
  // The token a node's child must carry to be accepted, and the token emitted after it.
  auto match = [&](uint32_t node) {
    return sampled && rule_ != ops::AcceptRule::AcceptIfArgmax ? tree.target_draws[node] : tree.target_argmax[node];
  };
  auto choice = [&](uint32_t node) { return sampled ? tree.target_draws[node] : tree.target_argmax[node]; };
  if (M > 1) {
    tree.tokens.assign(r, r + M);
    tree.parents.assign(r + M, r + 2 * M);
    tree.depths.assign(r + 2 * M, r + 3 * M);
    const auto* scores = reinterpret_cast<const float*>(r + 5 * M);
    tree.scores.assign(scores, scores + M);
    // A node's score sums the log-probabilities of the draft's rows on its path: finite for
    // finite logits, NaN or infinite where a row held a NaN or an infinity.
    for (uint32_t j = 1; j < M; ++j)
      if (!std::isfinite(tree.scores[j])) fail_non_finite_row(P + uint32_t(tree.depths[j]), "draft");
  } else {
    tree.tokens = {y};
    tree.parents = {-1};
    tree.depths = {0};
    tree.scores = {0.0f};
  }
  tree.accepted_path = walk_tree(tree.tokens, tree.parents, match);
  if (tree_observer_) tree_observer_(tree);

  RoundOutcome out;
  out.proposed = M - 1;
  out.accepted = uint32_t(tree.accepted_path.size()) - 1;
  for (uint32_t i = 1; i < tree.accepted_path.size(); ++i) out.tokens.push_back(tree.tokens[tree.accepted_path[i]]);
  out.tokens.push_back(choice(tree.accepted_path.back()));
  out.tap_rows = tree.accepted_path;
  // The node a token follows decided it: its row of the verify logits.
  if (o.logprobs) {
    const auto* logits = static_cast<const float*>(logits_readback_.mapped);
    for (uint32_t i = 0; i < out.tokens.size(); ++i)
      out.logprobs.push_back(token_logprobs(std::span<const float>(logits + uint64_t(tree.accepted_path[i]) * V, V),
                                            out.tokens[i], o.logprobs));
  }
  compact_base_ = P;
  compact_path_ = tree.accepted_path;
  return out;
}

void SpeculativeDecoder::record_tree_round(vk::Recorder& rec, const TreeShape& shape, uint32_t P, uint32_t kv_bound,
                                           bool exact) {
  const UploadLayout up = upload_layout(max_rows_, k_, tree_);
  const uint32_t H = target_.config().hidden_size, Vd = draft_.config.draft_vocab_size;
  const uint32_t K = shape.k, S = shape.steps, M = shape.nodes, catch_rows = shape.catch_rows;
  ops::OpContext oc{gpu_, rec};
  const ops::TreeLayout layout{K, S, M};
  const ops::TreeBuffers tb{vk::BufferRange(tree_f_), vk::BufferRange(tree_i_)};
  rec.begin();
  record_tree_compaction(rec);
  record_inputs_copy(rec, up.draft_positions(), dstate_.positions, catch_rows);
  const models::TargetWeights shared{target_.embed(), target_.lm_head()};
  if (M > 1) {
    // The root's position and token, which tree_select and the tree paths read on the device.
    record_inputs_copy(rec, up.target_positions(), tb.i.sub(uint64_t(layout.i_base()) * 4, 4), 1);
    record_inputs_copy(rec, up.target_ids(), tb.i.sub(uint64_t(layout.i_root()) * 4, 4), 1);
    // 1. Catch-up; its last row's u and top-K make level 1.
    const models::DraftPass pass = catch_up_pass(catch_rows, tap_request_.out.row(shape.tap_row0), exact ? P : kv_bound);
    const uint32_t feature_row = models::record_eagle3_forward(oc, draft_, dstate_, shared, pass);
    const ops::Act u_history(vk::BufferRange(u_history_), draft_.config.layer.hidden_size);
    ops::copy_rows(oc, ops::Act(dstate_.arena[dstate_.feature], draft_.config.layer.hidden_size).row(feature_row),
                   u_history, 1, draft_.config.layer.hidden_size, "draft_tree_u");
    vk::BufferRange d2t(draft_.d2t);
    const ops::Act logits(dstate_.arena[dstate_.logits], Vd);
    auto topk = [&](uint32_t rows) {
      ops::tree_topk(oc, logits, rows, Vd, K, draft_.d2t ? &d2t : nullptr, tb.f, layout.f_topk(), tb.i,
                     layout.i_topk());
    };
    topk(1);
    ops::tree_level_one(oc, layout, tb);
    // 2. Expansions: the K frontier nodes as K draft rows, then their children.
    for (uint32_t i = 0; i + 1 < S; ++i) {
      models::DraftTreeStep step;
      step.u_history = u_history;
      step.history_rows = 1 + K * i;
      step.gather = ops::IntVec{tb.i, layout.i_step_gather()};
      step.slots = ops::IntVec{vk::BufferRange(upload_), uint32_t(up.tree_slots() + i * K)};
      step.path = ops::TreePath{tb.i, layout.i_step_path(), S, P, int32_t(layout.i_base())};
      step.save_row = 1 + K * i;
      models::DraftPass expand;
      expand.rows = K;
      expand.ids = ops::IntVec{tb.i, layout.i_step_ids()};
      expand.positions = ops::IntVec{vk::BufferRange(upload_), uint32_t(up.tree_positions() + i * K)};
      expand.kv_len = exact ? P + K * (i + 1) : std::max(kv_bound, P + K * (i + 1));
      expand.tree = &step;
      models::record_eagle3_forward(oc, draft_, dstate_, shared, expand);
      topk(K);
      ops::tree_expand(oc, layout, tb, i);
    }
    // 3. The verified nodes.
    ops::tree_select(oc, layout, tb, layout.pool());
    rec.copy(tb.i.sub(uint64_t(layout.i_tok()) * 4, M * 4), vk::BufferRange(tstate_.ids, 0, M * 4), "tree tokens");
    rec.copy(tb.i.sub(uint64_t(layout.i_pos()) * 4, M * 4), vk::BufferRange(tstate_.positions, 0, M * 4),
             "tree positions");
  } else {
    record_inputs_copy(rec, up.target_ids(), tstate_.ids, 1);
    record_inputs_copy(rec, up.target_positions(), tstate_.positions, 1);
  }
  // 4. Verification: every node at position P + depth over the committed rows and its ancestors.
  const ops::TreePath verify_path{tb.i, layout.i_path(), S + 1, P, int32_t(layout.i_base())};
  const ops::IntVec target_slots{vk::BufferRange(upload_), uint32_t(up.target_slots())};
  models::ForwardPass verify{M, kv_bound, 0, /*batch_invariant=*/true, &tap_request_, /*argmax=*/true};
  if (M > 1) {
    verify.tree = &verify_path;
    verify.slots = &target_slots;
  }
  models::record_target_forward(oc, target_, tstate_, verify);
  const uint32_t V = target_.config().vocab_size;
  if (shape.logprobs)
    rec.copy(tstate_.arena[tstate_.logits].sub(0, uint64_t(M) * V * 4),
             vk::BufferRange(logits_readback_, 0, uint64_t(M) * V * 4), "logits");
  const vk::BufferRange back(tree_readback_);
  rec.copy(vk::BufferRange(tstate_.out_ids, 0, M * 4), back.sub(3ull * M * 4, M * 4), "tree argmax");
  // At T > 0 every node row also draws x ~ p from its filtered distribution, keyed by the
  // position it decides (P + depth + 1) as plain sampling keys its draws.
  if (shape.sampled) {
    const ops::IntVec positions = M > 1 ? ops::IntVec{tb.i, layout.i_pos()}
                                        : ops::IntVec{vk::BufferRange(upload_), uint32_t(up.target_positions())};
    ops::sample(oc, ops::Act(tstate_.arena[tstate_.logits], V), M, V, nullptr, ops::IntVec{tree_draws_, 0},
                ops::IntVec{tstate_.accept, 0}, device_params(shape.sampling, 1), ops::AcceptRule::Correct, nullptr, 0,
                &positions);
    rec.copy(vk::BufferRange(tree_draws_, 0, M * 4), back.sub(4ull * M * 4, M * 4), "tree draws");
  }
  if (M > 1) {
    rec.copy(tb.i.sub(uint64_t(layout.i_tok()) * 4, M * 4), back.sub(0, M * 4), "tree tokens");
    rec.copy(tb.i.sub(uint64_t(layout.i_parent()) * 4, M * 4), back.sub(uint64_t(M) * 4, M * 4), "tree parents");
    rec.copy(tb.i.sub(uint64_t(layout.i_depth()) * 4, M * 4), back.sub(2ull * M * 4, M * 4), "tree depths");
    rec.copy(tb.f.sub(uint64_t(layout.f_node()) * 4, M * 4), back.sub(5ull * M * 4, M * 4), "tree scores");
  }
  if (shape.taps_out)
    rec.copy(vk::BufferRange(taps_, 0, uint64_t(M) * 3 * H * 4),
             vk::BufferRange(readback_, readback_.bytes - uint64_t(max_rows_) * 3 * H * 4, uint64_t(M) * 3 * H * 4));
}

}  // namespace eaglevk::engine
