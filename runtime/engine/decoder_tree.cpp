// One round of tree drafting (EAGLE-2's dynamic tree with an EAGLE-3 head; docs/tree.md): the
// draft catches up, expands the tree level by level on the device, the best M - 1 nodes are
// verified by the target in one pass, and the host walks the accepted path. All of it is one
// submission; the accepted path's KV rows and taps are moved to consecutive rows at the start
// of the next round's submission.
#include <algorithm>
#include <chrono>
#include <cmath>

#include <eaglevk/error.h>

#include "runtime/engine/decoder.h"
#include "runtime/engine/elapsed.h"
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

void Decoder::tree_round(uint32_t slot) {
  const auto round_start = std::chrono::steady_clock::now();
  Sequence& s = seqs_[slot];
  const GenerationOptions& o = s.options;
  const InputLayout& l = in_;
  auto* up = static_cast<int32_t*>(upload_.mapped);
  const uint32_t P = s.P;
  // Near the end of the context the tree shrinks: its M nodes take KV rows P..P+M-1.
  const uint32_t M = std::min(tree_.draft_tokens, context_ - P);
  const uint32_t K = std::min(tree_.topk, std::max(M, 2u) - 1), S = std::min(tree_.steps, std::max(M, 2u) - 1);
  const uint32_t catch_rows = P - s.c;

  for (uint32_t i = 0; i < catch_rows; ++i) {
    up[l.tap_index + i] = int32_t(s.tap_row + i);
    up[l.draft_ids + i] = s.history[s.c + 1 + i];
    up[l.draft_positions + i] = int32_t(s.c + i);
  }
  // Expansion i runs its K rows at position P + i in draft KV rows P + K i + r.
  for (uint32_t i = 0; i + 1 < S; ++i)
    for (uint32_t r = 0; r < K; ++r) {
      up[l.tree_positions + i * K + r] = int32_t(P + i);
      up[l.tree_slots + i * K + r] = int32_t(P + K * i + r);
    }
  for (uint32_t j = 0; j < M; ++j) up[l.tree_target_slots + j] = int32_t(P + j);
  up[l.target_ids] = s.y;
  up[l.target_positions] = int32_t(P);
  // The last tree's accepted path, which this round's commands move to consecutive rows first.
  up[l.compact_path] = int32_t(s.compact_path.size());
  up[l.compact_path + 1] = int32_t(s.compact_base);
  for (uint32_t i = 0; i < s.compact_path.size(); ++i) up[l.compact_path + 2 + i] = int32_t(s.compact_path[i]);
  s.compact_path.clear();

  const bool sampled = !o.sampling.greedy();
  RoundShape shape;
  shape.tree = TreeRoundShape{catch_rows, K, S, M, o.logprobs > 0, bool(tap_sink_), sampled};
  // Every node row draws with the sequence's settings, record 0.
  write_row_settings(o.sampling, up + l.row_sampling);
  std::fill_n(up + l.verify_sequence, M, 0);
  if (front_)
    split_tree_round(shape.tree, P);
  else
    submit_round(shape, P + M, [&](vk::Recorder& rec, uint32_t kv_bound, bool exact) {
      record_tree_round(rec, shape.tree, P, kv_bound, exact);
    });

  // Acceptance: from the root, step to the child whose token is the target's choice at the
  // node (siblings carry distinct tokens), then the target's choice after the last accepted
  // node. Greedy, the choice is the argmax. At T > 0 it is the node's draw x ~ p: a tree's
  // children are the draft's top-K tokens (point-mass proposals), for which the recursive
  // rejection over siblings (accept child c with p(c), else remove c from p, renormalise and
  // try the next, finally draw from what is left) emits each token with probability p(token)
  // and accepts exactly the child equal to that token; one draw is that procedure.
  const auto* words = static_cast<const int32_t*>(readback_.mapped);
  const TreeOutputs r{out_.tree, M};
  TreeRound tree;
  tree.base = P;
  tree.target_argmax.assign(words + r.argmax(), words + r.argmax() + M);
  if (sampled) tree.target_draws.assign(words + r.draws(), words + r.draws() + M);
  // The token a node's child must carry to be accepted, and the token emitted after it.
  auto match = [&](uint32_t node) {
    return sampled && rule_ != ops::AcceptRule::AcceptIfArgmax ? tree.target_draws[node] : tree.target_argmax[node];
  };
  auto choice = [&](uint32_t node) { return sampled ? tree.target_draws[node] : tree.target_argmax[node]; };
  if (M > 1) {
    tree.tokens.assign(words + r.tokens(), words + r.tokens() + M);
    tree.parents.assign(words + r.parents(), words + r.parents() + M);
    tree.depths.assign(words + r.depths(), words + r.depths() + M);
    const auto* scores = reinterpret_cast<const float*>(words + r.scores());
    tree.scores.assign(scores, scores + M);
    // A node's score sums the log-probabilities of the draft's rows on its path: finite for
    // finite logits, NaN or infinite where a row held a NaN or an infinity.
    for (uint32_t j = 1; j < M; ++j)
      if (!std::isfinite(tree.scores[j])) fail_non_finite_row(P + uint32_t(tree.depths[j]), "draft");
  } else {
    tree.tokens = {s.y};
    tree.parents = {-1};
    tree.depths = {0};
    tree.scores = {0.0f};
  }
  tree.accepted_path = walk_tree(tree.tokens, tree.parents, match);
  if (tree_observer_) tree_observer_(tree);

  Decided d;
  d.proposed = M - 1;
  d.accepted = uint32_t(tree.accepted_path.size()) - 1;
  d.steps = std::min(tree_.steps, d.proposed);
  for (uint32_t i = 1; i < tree.accepted_path.size(); ++i) d.tokens.push_back(tree.tokens[tree.accepted_path[i]]);
  d.tokens.push_back(choice(tree.accepted_path.back()));
  // The node a token follows decided it: its row of the verify logits (and of the taps).
  d.rows = tree.accepted_path;
  s.result.decode_seconds += seconds_since(round_start);
  s.compact_base = P;
  s.compact_path = tree.accepted_path;
  apply(s, d, static_cast<const float*>(logits_readback_ ? logits_readback_.mapped : nullptr));
  s.tap_row = 0;  // the accepted path's taps, compacted at the next round's start
}

void Decoder::split_tree_round(const TreeRoundShape& shape, uint32_t P) {
  // Two submissions on this device, each replayed as a whole round is: the earlier parts need
  // the tree's nodes, which the host learns between them. The verify part reads the tree
  // (tokens, positions, ancestor table, root) where the drafts part left it on the device, and
  // the earlier parts' rows from tstate_.hidden_in, so a recording of it serves any round of
  // its shape.
  const uint32_t M = shape.nodes, S = shape.steps;
  auto part = [&](RoundPart p) {
    return [&, p](vk::Recorder& rec, uint32_t kv_bound, bool exact) {
      record_tree_round(rec, shape, P, kv_bound, exact, p);
    };
  };
  RoundShape round;
  round.tree = shape;
  round.part = RoundPart::Drafts;
  replay_or_record(round, P + M, part(RoundPart::Drafts));
  const auto* up = static_cast<const int32_t*>(upload_.mapped);
  const auto* nodes = static_cast<const int32_t*>(tree_readback_.mapped);
  const ops::TreeLayout layout{shape.k, S, M};
  models::ForwardPass verify{M, P + M, 0, /*batch_invariant=*/true, &round_taps_, /*argmax=*/true};
  SplitTree tree;
  tree.compact = up + in_.compact_path;
  tree.compact_max = tree_.draft_tokens;
  const ops::TreePath path{{}, 0, S + 1, P};
  front_->replay = replay;  // the earlier parts resubmit as the decoder's own rounds do
  front_->replay_span = replay_span;
  if (M > 1) {
    verify.tree = &path;
    tree.table = nodes + layout.i_path();
    tree.stride = S + 1;
    front_->run(verify, nodes + layout.i_tok(), nodes + layout.i_pos(), up + in_.tree_target_slots, tstate_, tree);
  } else {
    front_->run(verify, up + in_.target_ids, up + in_.target_positions, nullptr, tstate_, tree);
  }
  round.part = RoundPart::Verify;
  replay_or_record(round, P + M, part(RoundPart::Verify));
}

void Decoder::record_tree_round(vk::Recorder& rec, const TreeRoundShape& shape, uint32_t P, uint32_t kv_bound,
                                bool exact, RoundPart part) {
  const InputLayout& l = in_;
  const models::Eagle3Model& draft = *draft_;
  const uint32_t H = target_.config().hidden_size, Vd = draft.config.draft_vocab_size;
  const uint32_t Hd = draft.config.layer.hidden_size;
  const uint32_t K = shape.k, S = shape.steps, M = shape.nodes, catch_rows = shape.catch_rows;
  ops::OpContext oc{gpu_, rec};
  const ops::TreeLayout layout{K, S, M};
  const ops::TreeBuffers tb{vk::BufferRange(tree_f_), vk::BufferRange(tree_i_)};
  const auto word = [](const vk::Buffer& b, uint32_t at, uint32_t count) {
    return vk::BufferRange(b, uint64_t(at) * 4, uint64_t(count) * 4);
  };
  rec.begin();
  // The verify part of a split round reads what the drafts part's submission left on the device.
  if (part != RoundPart::Verify) {
    rec.copy(vk::BufferRange(upload_), vk::BufferRange(inputs_), "inputs");
    // The last tree's accepted path: KV rows and taps to consecutive rows.
    const ops::IntVec path = input(l.compact_path);
    for (uint32_t layer = 0; layer < uint32_t(tstate_.k_cache.size()); ++layer) {
      if (!tstate_.k_cache[layer]) continue;  // a layer on another device (a split target)
      const ops::KvLayer kv = tstate_.kv_layer(layer);
      ops::row_compact(oc, path, tree_.draft_tokens, kv.k, &kv.v, tstate_.kv_dim / 2, "tree_compact_kv");
    }
    ops::row_compact(oc, path, tree_.draft_tokens, vk::BufferRange(round_tap_rows_), nullptr, 3 * H,
                     "tree_compact_taps");
    const models::TargetWeights shared{target_.embed(), target_.lm_head()};
    if (M > 1) {
      // The root's position and token, which tree_select and the tree paths read on the device.
      rec.copy(word(inputs_, l.target_positions, 1), tb.i.sub(uint64_t(layout.i_base()) * 4, 4), "inputs");
      rec.copy(word(inputs_, l.target_ids, 1), tb.i.sub(uint64_t(layout.i_root()) * 4, 4), "inputs");
      // 1. Catch-up; its last row's u and top-K make level 1.
      ops::gather_rows(oc, round_taps_.out, round_rows_ + batch_, input(l.tap_index), ops::Act(catch_taps_, 3 * H),
                       catch_rows, 3 * H, "tree_taps");
      models::DraftPass pass;
      pass.rows = catch_rows;
      pass.from_taps = true;
      pass.taps = ops::Act(catch_taps_, 3 * H);
      pass.ids = input(l.draft_ids);
      pass.positions = input(l.draft_positions);
      pass.kv_len = exact ? P : kv_bound;
      pass.out_token = ops::IntVec{round_ids_, RoundIds{batch_}.draft(0, 0)};
      const uint32_t feature_row = models::record_eagle3_forward(oc, draft, dstate_, shared, pass);
      const ops::Act u_history(vk::BufferRange(u_history_), Hd);
      ops::copy_rows(oc, ops::Act(dstate_.arena[dstate_.feature], Hd).row(feature_row), u_history, 1, Hd,
                     "draft_tree_u");
      vk::BufferRange d2t(draft.d2t);
      const ops::Act logits(dstate_.arena[dstate_.logits], Vd);
      auto topk = [&](uint32_t rows) {
        ops::tree_topk(oc, logits, rows, Vd, K, draft.d2t ? &d2t : nullptr, tb.f, layout.f_topk(), tb.i,
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
        step.slots = input(l.tree_slots + i * K);
        step.path = ops::TreePath{tb.i, layout.i_step_path(), S, P, int32_t(layout.i_base())};
        step.save_row = 1 + K * i;
        models::DraftPass expand;
        expand.rows = K;
        expand.ids = ops::IntVec{tb.i, layout.i_step_ids()};
        expand.positions = input(l.tree_positions + i * K);
        expand.kv_len = exact ? P + K * (i + 1) : std::max(kv_bound, P + K * (i + 1));
        expand.tree = &step;
        models::record_eagle3_forward(oc, draft, dstate_, shared, expand);
        topk(K);
        ops::tree_expand(oc, layout, tb, i);
      }
      // 3. The verified nodes.
      ops::tree_select(oc, layout, tb, layout.pool());
      rec.copy(tb.i.sub(uint64_t(layout.i_tok()) * 4, M * 4), vk::BufferRange(tstate_.ids, 0, M * 4), "tree tokens");
      rec.copy(tb.i.sub(uint64_t(layout.i_pos()) * 4, M * 4), vk::BufferRange(tstate_.positions, 0, M * 4),
               "tree positions");
    } else {
      rec.copy(word(inputs_, l.target_ids, 1), vk::BufferRange(tstate_.ids, 0, 4), "inputs");
      rec.copy(word(inputs_, l.target_positions, 1), vk::BufferRange(tstate_.positions, 0, 4), "inputs");
    }
  }
  if (part == RoundPart::Drafts) {
    rec.copy(tb.i, vk::BufferRange(tree_readback_, 0, tb.i.bytes), "tree nodes");
    return;
  }
  // 4. Verification: every node at position P + depth over the committed rows and its ancestors.
  const ops::TreePath verify_path{tb.i, layout.i_path(), S + 1, P, int32_t(layout.i_base())};
  const ops::IntVec target_slots = input(l.tree_target_slots);
  models::ForwardPass verify{M, kv_bound, 0, /*batch_invariant=*/true, &round_taps_, /*argmax=*/true};
  if (M > 1) {
    verify.tree = &verify_path;
    verify.slots = &target_slots;
  }
  models::record_target_forward(oc, target_, tstate_, verify);
  const uint32_t V = target_.config().vocab_size;
  if (shape.logprobs)
    rec.copy(tstate_.arena[tstate_.logits].sub(0, uint64_t(M) * V * 4),
             vk::BufferRange(logits_readback_, 0, uint64_t(M) * V * 4), "logits");
  const TreeOutputs r{out_.tree, M};
  rec.copy(vk::BufferRange(tstate_.out_ids, 0, M * 4), word(readback_, r.argmax(), M), "tree argmax");
  // At T > 0 every node row also draws x ~ p from its filtered distribution, keyed by the
  // position it decides (P + depth + 1) as plain sampling keys its draws.
  if (shape.sampled) {
    const ops::IntVec positions = M > 1 ? ops::IntVec{tb.i, layout.i_pos()} : input(l.target_positions);
    const ops::IntVec settings = input(l.row_sampling), node_sequence = input(l.verify_sequence);
    const ops::SampleParams node_settings{.first_position = 1, .row_params = &settings, .row_index = &node_sequence};
    ops::sample(oc, ops::Act(tstate_.arena[tstate_.logits], V), M, V, nullptr, ops::IntVec{tree_draws_, 0},
                ops::IntVec{tstate_.accept, 0}, node_settings, ops::AcceptRule::Correct, nullptr, 0, &positions);
    rec.copy(vk::BufferRange(tree_draws_, 0, M * 4), word(readback_, r.draws(), M), "tree draws");
  }
  if (M > 1) {
    rec.copy(tb.i.sub(uint64_t(layout.i_tok()) * 4, M * 4), word(readback_, r.tokens(), M), "tree tokens");
    rec.copy(tb.i.sub(uint64_t(layout.i_parent()) * 4, M * 4), word(readback_, r.parents(), M), "tree parents");
    rec.copy(tb.i.sub(uint64_t(layout.i_depth()) * 4, M * 4), word(readback_, r.depths(), M), "tree depths");
    rec.copy(tb.f.sub(uint64_t(layout.f_node()) * 4, M * 4), word(readback_, r.scores(), M), "tree scores");
  }
  if (shape.taps_out)
    rec.copy(vk::BufferRange(round_tap_rows_, 0, uint64_t(M) * 3 * H * 4),
             vk::BufferRange(readback_, uint64_t(out_.taps) * 4, uint64_t(M) * 3 * H * 4), "taps");
}

}  // namespace eaglevk::engine
