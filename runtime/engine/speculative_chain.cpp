// One round of chain drafting: the draft catches up on the tokens the last round decided, runs
// k steps, and the target verifies y, d_1..d_k in one pass; acceptance is decided on the device
// and one small read-back tells the host what was accepted. All of it is one submission, and
// after the first rounds a resubmission of commands recorded before: the host writes the
// round's tokens and positions into the upload buffer, and every command reads them from
// device buffers.
#include <algorithm>

#include "runtime/engine/sampler.h"
#include "runtime/engine/speculative.h"

namespace eaglevk::engine {

SpeculativeDecoder::RoundOutcome SpeculativeDecoder::chain_round(uint32_t P, uint32_t c, uint32_t tap_row0, int32_t y,
                                                                 const std::vector<int32_t>& history,
                                                                 const GenerationOptions& o) {
  const UploadLayout up = upload_layout(max_rows_, k_, tree_);
  auto* slots = static_cast<int32_t*>(upload_.mapped);
  const uint32_t V = target_.config().vocab_size;
  const uint32_t k = std::min(k_, context_ - 1 - P);
  const uint32_t catch_rows = P - c;
  // Inputs: draft catch-up tokens x_{c+1..P} (x_P = y) at positions c..P-1, the draft
  // steps' positions, and the verify pass's first token y at P..P+k.
  for (uint32_t i = 0; i < catch_rows; ++i) {
    slots[up.draft_ids() + i] = history[c + 1 + i];
    slots[up.draft_positions() + i] = int32_t(c + i);
  }
  for (uint32_t i = 1; i < k; ++i) slots[up.draft_positions() + catch_rows + i - 1] = int32_t(P - 1 + i);
  slots[up.target_ids()] = y;
  for (uint32_t i = 0; i <= k; ++i) slots[up.target_positions() + i] = int32_t(P + i);

  const ChainShape shape{catch_rows,    k, tap_row0, o.logprobs > 0, bool(tap_sink_), draft_sampling_ && !o.sampling.greedy(),
                         o.sampling, rule_};
  submit_round(catch_rows, tap_row0, shape, TreeShape{}, P + k + 1, [&](vk::Recorder& rec, uint32_t kv_bound, bool exact) {
    record_chain_round(rec, shape, P, kv_bound, exact);
  });

  const auto* back = static_cast<const int32_t*>(readback_.mapped);
  const int32_t* verified = back;                    // the target's token after y, d_1, ..., d_k
  const int32_t* drafted = back + max_rows_;         // d_1..d_k
  const int32_t* accept = back + max_rows_ + k_;     // d_{j+1} accepted at row j
  // Draft token i was to sit at position P + 1 + i.
  for (uint32_t i = 0; i < k; ++i) check_row_token(drafted[i], P + 1 + i, "draft");
  RoundOutcome out;
  out.proposed = k;
  while (out.accepted < k && accept[out.accepted]) ++out.accepted;
  const auto* logits = static_cast<const float*>(logits_readback_ ? logits_readback_.mapped : nullptr);
  for (uint32_t i = 0; i <= out.accepted; ++i) {
    out.tokens.push_back(i < out.accepted ? drafted[i] : verified[out.accepted]);
    out.tap_rows.push_back(i);
    // Row i of the verify pass decided the token after position P + i.
    if (o.logprobs)
      out.logprobs.push_back(token_logprobs(std::span<const float>(logits + uint64_t(i) * V, V), out.tokens.back(), o.logprobs));
  }
  return out;
}

void SpeculativeDecoder::record_chain_round(vk::Recorder& rec, const ChainShape& shape, uint32_t P, uint32_t kv_bound,
                                            bool exact) {
  const UploadLayout up = upload_layout(max_rows_, k_, tree_);
  const uint32_t H = target_.config().hidden_size, V = target_.config().vocab_size;
  const uint32_t k = shape.k, catch_rows = shape.catch_rows;
  ops::OpContext oc{gpu_, rec};
  // With draft sampling, draft token i (placed at position P + 1 + i) is drawn from q on the
  // device, over the argmax the draft pass wrote; random stream 8 keeps it independent of
  // the target's draws at that position. The position comes from the draft's positions: the
  // row before draft step i's (catch-up row catch_rows - 1 for i = 0) is at P - 1 + i.
  const uint32_t Vd = draft_.config.draft_vocab_size;
  vk::BufferRange d2t(draft_.d2t);
  auto draw_draft = [&](uint32_t i) {
    if (!shape.sampled_drafts) return;
    const ops::DraftDistribution dist = draft_draw(draft_, draft_q_, d2t, i);
    const ops::IntVec position{dstate_.positions, catch_rows - 1 + i};
    ops::sample(oc, ops::Act(dstate_.arena[dstate_.logits], Vd), 1, Vd, nullptr, ops::IntVec{draft_tokens_, i},
                ops::IntVec{draft_accept_, i}, device_params(shape.sampling, 2), ops::AcceptRule::Correct, &dist,
                /*stream=*/8, &position);
  };
  rec.begin();
  record_inputs_copy(rec, up.draft_positions(), dstate_.positions, catch_rows + (k > 0 ? k - 1 : 0));
  record_inputs_copy(rec, up.target_ids(), tstate_.ids, 1);
  record_inputs_copy(rec, up.target_positions(), tstate_.positions, k + 1);
  if (k > 0) {
    const models::DraftPass pass = catch_up_pass(catch_rows, tap_request_.out.row(shape.tap_row0), exact ? P : kv_bound);
    uint32_t feature_row = models::record_eagle3_forward(oc, draft_, dstate_, {target_.embed(), target_.lm_head()}, pass);
    draw_draft(0);
    for (uint32_t i = 1; i < k; ++i) {
      models::DraftPass step;
      step.rows = 1;
      step.ids = ops::IntVec{draft_tokens_, i - 1};
      step.positions = ops::IntVec{dstate_.positions, catch_rows + i - 1};
      step.feature_row = feature_row;
      step.kv_len = exact ? P + i : kv_bound;
      step.out_token = ops::IntVec{draft_tokens_, i};
      models::record_eagle3_forward(oc, draft_, dstate_, {target_.embed(), target_.lm_head()}, step);
      draw_draft(i);
    }
    rec.copy(vk::BufferRange(draft_tokens_, 0, k * 4), vk::BufferRange(tstate_.ids, 4, k * 4), "drafts");
    rec.copy(vk::BufferRange(draft_tokens_, 0, k * 4), vk::BufferRange(verify_drafts_, 0, k * 4), "drafts");
  }
  rec.fill(vk::BufferRange(verify_drafts_, k * 4, 4), 0xffffffffu, "no draft");  // the bonus row
  // No argmax dispatch: the sampling op below decides every row (greedily at temperature 0).
  models::record_target_forward(oc, target_, tstate_,
                                {k + 1, kv_bound, 0, /*batch_invariant=*/true, &tap_request_, /*argmax=*/false});
  if (shape.logprobs)
    rec.copy(tstate_.arena[tstate_.logits].sub(0, uint64_t(k + 1) * V * 4),
             vk::BufferRange(logits_readback_, 0, uint64_t(k + 1) * V * 4), "logits");
  // Acceptance and the replacement/bonus draws, on the device (greedy at temperature 0). Row r
  // decides the token at 1 + positions[r] = P + 1 + r.
  ops::IntVec drafts{verify_drafts_};
  const ops::DraftDistribution verify = draft_verify(draft_, draft_q_, t2d_);
  const ops::IntVec row_positions{tstate_.positions, 0};
  ops::sample(oc, ops::Act(tstate_.arena[tstate_.logits], V), k + 1, V, &drafts, ops::IntVec{tstate_.out_ids},
              ops::IntVec{tstate_.accept}, device_params(shape.sampling, 1), shape.rule,
              shape.sampled_drafts ? &verify : nullptr, 0, &row_positions);
  rec.copy(vk::BufferRange(tstate_.out_ids, 0, (k + 1) * 4), vk::BufferRange(readback_, 0, (k + 1) * 4), "tokens");
  rec.copy(vk::BufferRange(tstate_.accept, 0, (k + 1) * 4),
           vk::BufferRange(readback_, (uint64_t(max_rows_) + k_) * 4, (k + 1) * 4), "accepted");
  if (k > 0) rec.copy(vk::BufferRange(draft_tokens_, 0, k * 4), vk::BufferRange(readback_, uint64_t(max_rows_) * 4, k * 4), "drafts");
  if (shape.taps_out)
    rec.copy(vk::BufferRange(taps_, 0, uint64_t(k + 1) * 3 * H * 4),
             vk::BufferRange(readback_, readback_.bytes - uint64_t(max_rows_) * 3 * H * 4, uint64_t(k + 1) * 3 * H * 4));
}

}  // namespace eaglevk::engine
