// One round of every running sequence, plain or chain drafting. Plain: one target row per
// sequence. Chain: one catch-up draft pass over all their new rows, k - 1 draft steps of one
// row per sequence, one verify pass over all their k + 1 rows and one sampling dispatch. All
// of it is one submission whose commands read the round's tokens and positions from device
// buffers, so a round of a shape seen before resubmits its recording.
#include <algorithm>
#include <chrono>

#include "runtime/engine/decoder.h"
#include "runtime/engine/elapsed.h"

namespace eaglevk::engine {

void Decoder::batch_round(const std::vector<uint32_t>& active) {
  const auto round_start = std::chrono::steady_clock::now();
  const InputLayout& l = in_;
  const uint32_t A = uint32_t(active.size());
  const RoundIds ids{batch_};
  auto* up = static_cast<int32_t*>(upload_.mapped);

  // Rows of each sequence: its catch-up rows x_{c+1..P} at positions c..P-1 and its verify
  // rows y, d_1..d_k at P..P+k; every sequence takes the draft steps up to the round's largest
  // k (those past a sequence's own k are never used). Plain: one verify row, y at P.
  const bool plain = mode_ == Mode::Plain;
  RoundShape shape;
  BatchRoundShape& b = shape.batch;
  b.logprobs = std::any_of(active.begin(), active.end(), [&](uint32_t i) { return seqs_[i].options.logprobs > 0; });
  b.taps_out = bool(tap_sink_) && !plain;
  // Each sequence samples with its own settings, read from the upload by the kernels, so that
  // sequences of one round may differ in all of them; a greedy row gives its argmax either way.
  const bool any_sampled =
      std::any_of(active.begin(), active.end(), [&](uint32_t i) { return !seqs_[i].options.sampling.greedy(); });
  b.sampled_drafts = !plain && draft_sampling_ && any_sampled;
  b.rule = rule_;
  std::vector<uint32_t> catch_off(A), verify_off(A);
  uint32_t CU = 0, VR = 0, K = 0, draft_kv = 0, verify_kv = 0;
  for (uint32_t a = 0; a < A; ++a) {
    const Sequence& s = seqs_[active[a]];
    const uint32_t k = std::min(chain_draft_tokens(s.options), context_ - 1 - s.P);
    b.ks.push_back(k);
    b.catch_rows.push_back(plain ? 0 : s.P - s.c);
    catch_off[a] = CU;
    verify_off[a] = VR;
    CU += b.catch_rows[a];
    VR += k + 1;
    K = std::max(K, k);
    verify_kv = std::max(verify_kv, s.P + k + 1);
  }
  b.steps = K;
  up[l.head] = -1;
  for (uint32_t a = 0; a < A; ++a) {
    const uint32_t slot = active[a];
    const Sequence& s = seqs_[slot];
    const uint32_t catch_rows = b.catch_rows[a], t_base = slot * context_, d_base = slot * draft_region_;
    up[l.head + ids.pending(a)] = s.y;
    write_row_settings(s.options.sampling, up + l.row_sampling + a * SAMPLE_ROW_WORDS);
    for (uint32_t i = 0; i < catch_rows; ++i) {
      const uint32_t r = catch_off[a] + i;
      up[l.tap_index + r] = int32_t(s.tap_row + i);
      up[l.draft_ids + r] = s.history[s.c + 1 + i];
      up[l.draft_positions + r] = int32_t(s.c + i);
      up[l.draft_slots + r] = int32_t(d_base + s.c + i);
    }
    up[l.proposal_rows + a] = int32_t(catch_off[a] + catch_rows - 1);
    for (uint32_t i = 1; i < K; ++i) {
      const uint32_t r = CU + (i - 1) * A + a;
      up[l.draft_positions + r] = int32_t(s.P - 1 + i);
      up[l.draft_slots + r] = int32_t(d_base + s.P - 1 + i);
    }
    for (uint32_t i = 0; i < K; ++i) up[l.draw_positions + i * batch_ + a] = int32_t(s.P + 1 + i);
    for (uint32_t i = 0; i <= b.ks[a]; ++i) {
      const uint32_t r = verify_off[a] + i;
      const bool bonus = i == b.ks[a];
      up[l.target_ids + r] = s.y;  // plain rounds read their token here
      up[l.target_positions + r] = int32_t(s.P + i);
      up[l.target_slots + r] = int32_t(t_base + s.P + i);
      up[l.verify_ids + r] = int32_t(i == 0 ? ids.pending(a) : ids.draft(i - 1, a));
      up[l.verify_drafts + r] = int32_t(bonus ? RoundIds::none : ids.draft(i, a));
      up[l.q_index + r] = int32_t(bonus ? 0 : i * batch_ + a);
      up[l.verify_sequence + r] = int32_t(a);
    }
    draft_kv = std::max(draft_kv, s.P + (K > 0 ? K - 1 : 0));  // the last step's position + 1
  }

  if (plain) {
    // One row per sequence: matrix-vector kernels, so that a row's bits do not depend on the batch.
    RoundShape step;
    step.plain = PlainPassShape{VR, 0, /*batch_invariant=*/VR > 1, false, b.logprobs, any_sampled};
    submit_round(step, verify_kv, [&](vk::Recorder& rec, uint32_t kv_bound, bool) {
      record_plain_pass(rec, step.plain, kv_bound);
    });
  } else if (front_) {
    split_chain_round(b, draft_kv, verify_kv);
  } else {
    submit_round(shape, verify_kv, [&](vk::Recorder& rec, uint32_t kv_bound, bool exact) {
      record_batch_round(rec, b, exact ? draft_kv : kv_bound, exact ? verify_kv : kv_bound);
    });
  }

  const auto* words = static_cast<const int32_t*>(readback_.mapped);
  const int32_t* verified = words + out_.tokens;  // the target's token after each verify row
  const int32_t* accept = words + out_.accepted;  // row j's draft accepted
  const int32_t* drafted = words + out_.drafts;   // RoundIds
  const auto* logits = static_cast<const float*>(logits_readback_ ? logits_readback_.mapped : nullptr);
  // Each sequence's decode time is its share of the rounds it took part in, so that the
  // sequences' times add up to the time spent.
  const double share = seconds_since(round_start) / A;
  for (uint32_t a = 0; a < A; ++a) {
    Sequence& s = seqs_[active[a]];
    s.result.decode_seconds += share;
    const uint32_t v0 = verify_off[a], k = b.ks[a];
    for (uint32_t i = 0; i < k; ++i) check_row_token(drafted[ids.draft(i, a)], s.P + 1 + i, "draft");
    Decided d;
    d.proposed = k;
    while (d.accepted < k && accept[v0 + d.accepted]) ++d.accepted;
    for (uint32_t i = 0; i <= d.accepted; ++i) {
      // Row v0 + i of the verify pass decided the token after position P + i.
      d.tokens.push_back(i < d.accepted ? drafted[ids.draft(i, a)] : verified[v0 + d.accepted]);
      d.rows.push_back(v0 + i);
    }
    apply(s, d, logits);
    if (s.state == SeqState::Running) s.tap_row = v0;
  }
}

void Decoder::record_plain_pass(vk::Recorder& rec, const PlainPassShape& p, uint32_t kv_len) {
  const uint32_t V = target_.config().vocab_size, rows = p.rows, n_logits = rows - p.logits_from;
  const bool sampled = p.sampled;
  ops::OpContext oc{gpu_, rec};
  const ops::IntVec t_slots = input(in_.target_slots);
  const vk::BufferRange back(readback_);
  rec.begin();
  rec.copy(vk::BufferRange(upload_), vk::BufferRange(inputs_), "inputs");
  rec.copy(vk::BufferRange(inputs_, in_.target_ids * 4ull, rows * 4), vk::BufferRange(tstate_.ids, 0, rows * 4),
           "inputs");
  rec.copy(vk::BufferRange(inputs_, in_.target_positions * 4ull, rows * 4),
           vk::BufferRange(tstate_.positions, 0, rows * 4), "inputs");
  models::ForwardPass pass{rows, kv_len, p.logits_from, p.batch_invariant, nullptr, /*argmax=*/!sampled};
  pass.slots = regions(t_slots);
  models::record_target_forward(oc, target_, tstate_, pass);
  if (n_logits == 0) return;
  // Logits row r decides the token at position 1 + positions[logits_from + r], read from the
  // positions the pass copied in, so that a replay draws for its own; it samples with record r
  // of the sequences' settings (a plain round's row r is sequence r, a prefill's row its own).
  const ops::IntVec row_positions{tstate_.positions, p.logits_from};
  if (sampled) {
    const ops::IntVec settings = input(in_.row_sampling);
    ops::SampleParams per_row{.first_position = 1, .row_params = &settings};
    ops::sample(oc, ops::Act(tstate_.arena[tstate_.logits], V), n_logits, V, nullptr, ops::IntVec{tstate_.out_ids},
                ops::IntVec{tstate_.accept}, per_row, ops::AcceptRule::Correct, nullptr, 0, &row_positions);
  }
  rec.copy(vk::BufferRange(tstate_.out_ids, 0, n_logits * 4), back.sub(out_.tokens * 4ull, n_logits * 4), "tokens");
  if (p.last_logits)
    rec.copy(tstate_.arena[tstate_.logits].sub(uint64_t(n_logits - 1) * V * 4, uint64_t(V) * 4),
             back.sub(out_.logits * 4ull, uint64_t(V) * 4), "logits");
  if (p.round_logits)
    rec.copy(tstate_.arena[tstate_.logits].sub(0, uint64_t(n_logits) * V * 4),
             vk::BufferRange(logits_readback_, 0, uint64_t(n_logits) * V * 4), "logits");
}

void Decoder::split_chain_round(const BatchRoundShape& b, uint32_t draft_kv, uint32_t verify_kv) {
  // Two submissions on this device, each replayed as a whole round is: the verify pass's first
  // device needs the draft tokens, which the host learns between them. The verify part reads
  // the drafts part's inputs and tokens on the device, and the earlier parts' rows from
  // tstate_.hidden_in, so a recording of it serves any round of its shape.
  auto part = [&](RoundPart p) {
    return [&, p](vk::Recorder& rec, uint32_t kv_bound, bool exact) {
      record_batch_round(rec, b, exact ? draft_kv : kv_bound, exact ? verify_kv : kv_bound, p);
    };
  };
  RoundShape shape;
  shape.batch = b;
  shape.part = RoundPart::Drafts;
  replay_or_record(shape, verify_kv, part(RoundPart::Drafts));
  const auto* up = static_cast<const int32_t*>(upload_.mapped);
  const auto* words = static_cast<const int32_t*>(readback_.mapped);
  uint32_t VR = 0;
  for (uint32_t k : b.ks) VR += k + 1;
  // Verify row r's token is RoundIds word verify_ids[r] (a pending token or a draft).
  for (uint32_t r = 0; r < VR; ++r) split_ids_[r] = words[out_.drafts + up[in_.verify_ids + r]];
  run_split_front({VR, verify_kv, 0, /*batch_invariant=*/true, &round_taps_, /*argmax=*/false}, split_ids_.data());
  shape.part = RoundPart::Verify;
  replay_or_record(shape, verify_kv, part(RoundPart::Verify));
}

void Decoder::record_batch_round(vk::Recorder& rec, const BatchRoundShape& b, uint32_t draft_kv, uint32_t verify_kv,
                                 RoundPart part) {
  const InputLayout& l = in_;
  const RoundIds ids{batch_};
  const uint32_t A = uint32_t(b.ks.size()), B = batch_, V = target_.config().vocab_size;
  const uint32_t H = target_.config().hidden_size, K = b.steps;
  uint32_t CU = 0, VR = 0;
  for (uint32_t a = 0; a < A; ++a) {
    CU += b.catch_rows[a];
    VR += b.ks[a] + 1;
  }
  ops::OpContext oc{gpu_, rec};
  const ops::IntVec d_slots = input(l.draft_slots), t_slots = input(l.target_slots);
  const ops::IntVec row_positions{tstate_.positions, 0};
  const ops::Act logits(tstate_.arena[tstate_.logits], V);
  const vk::BufferRange back(readback_);
  // Draft draw a is sequence a's; verify row r reads the record verify_sequence[r] names.
  const ops::IntVec settings = input(l.row_sampling), verify_sequence = input(l.verify_sequence);
  const ops::SampleParams draw_settings{.row_params = &settings};
  const ops::SampleParams verify_settings{.first_position = 1, .row_params = &settings, .row_index = &verify_sequence};
  rec.begin();
  // The verify part of a split round reads what the drafts part's submission left on the device.
  const bool drafts_part = part != RoundPart::Verify;
  if (drafts_part) {
    rec.copy(vk::BufferRange(upload_), vk::BufferRange(inputs_), "inputs");
    rec.copy(vk::BufferRange(inputs_, l.target_positions * 4ull, VR * 4), vk::BufferRange(tstate_.positions, 0, VR * 4),
             "inputs");
  }
  const models::Eagle3Model& draft = *draft_;
  const uint32_t Vd = draft.config.draft_vocab_size;
  if (drafts_part)
    rec.copy(vk::BufferRange(inputs_, l.head * 4ull, (1 + A) * 4), vk::BufferRange(round_ids_, 0, (1 + A) * 4),
             "tokens");
  const ops::Act ids_words(vk::BufferRange(round_ids_), 1);
  const uint32_t id_words = ids.words(k_);
  const ops::Act draft_logits(dstate_.arena[dstate_.logits], Vd);
  vk::BufferRange d2t(draft.d2t);
  const models::TargetWeights shared{target_.embed(), target_.lm_head()};
  // With draft sampling, draft i of every sequence is drawn from q on the device over the
  // argmax the pass wrote, at position P + 1 + i; random stream 8 keeps it independent of the
  // target's draws at that position.
  auto draw_drafts = [&](uint32_t i) {
    if (!b.sampled_drafts) return;
    const ops::DraftDistribution dist = draft_draw(draft, draft_q_, d2t, i * B);
    const ops::IntVec positions = input(l.draw_positions + i * B);
    ops::sample(oc, draft_logits, A, Vd, nullptr, ops::IntVec{round_ids_, ids.draft(i, 0)},
                ops::IntVec{draft_accept_, ids.draft(i, 0)}, draw_settings, ops::AcceptRule::Correct,
                &dist, /*stream=*/8, &positions);
  };
  if (K > 0 && drafts_part) {
    ops::gather_rows(oc, round_taps_.out, round_rows_ + B, input(l.tap_index), ops::Act(catch_taps_, 3 * H), CU, 3 * H,
                     "batch_taps");
    models::DraftPass pass;
    pass.rows = CU;
    pass.from_taps = true;
    pass.taps = ops::Act(catch_taps_, 3 * H);
    pass.ids = input(l.draft_ids);
    pass.positions = input(l.draft_positions);
    pass.kv_len = draft_kv;
    pass.out_token = ops::IntVec{round_ids_, ids.draft(0, 0)};
    if (B > 1) {
      pass.slots = &d_slots;
      pass.proposals = A;
      pass.proposal_rows = input(l.proposal_rows);
    }
    const uint32_t feature_row = models::record_eagle3_forward(oc, draft, dstate_, shared, pass);
    draw_drafts(0);
    for (uint32_t i = 1; i < K; ++i) {
      const ops::IntVec step_slots = input(l.draft_slots + CU + (i - 1) * A);
      models::DraftPass step;
      step.rows = A;
      step.ids = ops::IntVec{round_ids_, ids.draft(i - 1, 0)};
      step.positions = input(l.draft_positions + CU + (i - 1) * A);
      step.feature_row = feature_row;
      step.kv_len = draft_kv;
      step.out_token = ops::IntVec{round_ids_, ids.draft(i, 0)};
      if (B > 1) {
        step.slots = &step_slots;
        step.proposals = A;
      }
      models::record_eagle3_forward(oc, draft, dstate_, shared, step);
      draw_drafts(i);
    }
  }
  if (part == RoundPart::Drafts) {
    rec.copy(vk::BufferRange(round_ids_, 0, id_words * 4ull), back.sub(out_.drafts * 4ull, id_words * 4ull), "drafts");
    return;
  }
  // Each verify row's token and draft, gathered from the pending tokens and the steps' outputs.
  ops::gather_rows(oc, ids_words, id_words, input(l.verify_ids), ops::Act(vk::BufferRange(tstate_.ids), 1), VR, 1,
                   "batch_verify_ids");
  ops::gather_rows(oc, ids_words, id_words, input(l.verify_drafts), ops::Act(vk::BufferRange(verify_drafts_), 1), VR,
                   1, "batch_verify_drafts");
  if (b.sampled_drafts)
    ops::gather_rows(oc, ops::Act(vk::BufferRange(draft_q_), Vd), k_ * B, input(l.q_index),
                     ops::Act(vk::BufferRange(q_verify_), Vd), VR, Vd, "batch_verify_q");
  // No argmax dispatch: the sampling op below decides every row (greedily at temperature 0).
  models::ForwardPass verify{VR, verify_kv, 0, /*batch_invariant=*/true, &round_taps_, /*argmax=*/false};
  verify.slots = regions(t_slots);
  models::record_target_forward(oc, target_, tstate_, verify);
  if (b.logprobs)
    rec.copy(tstate_.arena[tstate_.logits].sub(0, uint64_t(VR) * V * 4),
             vk::BufferRange(logits_readback_, 0, uint64_t(VR) * V * 4), "logits");
  // Acceptance and the replacement/bonus draws, on the device. Row r decides the token after
  // position positions[r], as a single sequence's row would.
  ops::IntVec drafts{verify_drafts_};
  const ops::DraftDistribution verify_q = draft_verify(draft, q_verify_, t2d_);
  ops::sample(oc, logits, VR, V, &drafts, ops::IntVec{tstate_.out_ids}, ops::IntVec{tstate_.accept},
              verify_settings, b.rule, b.sampled_drafts ? &verify_q : nullptr, 0, &row_positions);
  rec.copy(vk::BufferRange(tstate_.out_ids, 0, VR * 4), back.sub(out_.tokens * 4ull, VR * 4), "tokens");
  rec.copy(vk::BufferRange(tstate_.accept, 0, VR * 4), back.sub(out_.accepted * 4ull, VR * 4), "accepted");
  rec.copy(vk::BufferRange(round_ids_, 0, id_words * 4ull), back.sub(out_.drafts * 4ull, id_words * 4ull), "drafts");
  if (b.taps_out)
    rec.copy(vk::BufferRange(round_tap_rows_, 0, uint64_t(VR) * 3 * H * 4),
             back.sub(out_.taps * 4ull, uint64_t(VR) * 3 * H * 4), "taps");
}

}  // namespace eaglevk::engine
