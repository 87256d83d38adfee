#include "runtime/engine/speculative_batch.h"

#include <algorithm>
#include <span>

#include <eaglevk/error.h>

#include "runtime/engine/elapsed.h"
#include "runtime/engine/prefill.h"
#include "runtime/engine/speculative.h"

namespace eaglevk::engine {
namespace {

uint32_t checked_batch_k(uint32_t k, uint32_t batch) {
  if (k == 0 || k > kMaxChainDraftTokens)
    fail_setting(Setting::ChainDraftTokens, "draft tokens per round must be in 1..{}, got {}", kMaxChainDraftTokens, k);
  if (batch == 0 || batch > kMaxBatch)
    fail_setting(Setting::Batch, "the batch must be in 1..{} sequences, got {}", kMaxBatch, batch);
  return k;
}

// Bytes of `rows` rows of `width` 32-bit words from row `first`.
vk::BufferRange rows_of(const vk::Buffer& b, uint64_t first, uint64_t rows, uint64_t width) {
  return vk::BufferRange(b, first * width * 4, rows * width * 4);
}

}  // namespace

BatchDecoder::BatchDecoder(ops::Gpu& gpu, const models::TargetModel& target, const models::Eagle3Model& draft,
                           uint32_t context, uint32_t k, uint32_t batch, bool arena_reuse)
    : gpu_(gpu),
      target_(target),
      draft_(draft),
      context_(context),
      k_(checked_batch_k(k, batch)),
      batch_(batch),
      round_rows_(batch * (k + 1)),
      // Prefill chunks are SpeculativeDecoder's (kPrefillRows), so a prompt's bits are its.
      max_rows_(std::max(kPrefillRows, round_rows_)),
      // The last round's steps of a sequence near the end of the context write k - 1 draft rows
      // past it (their tokens are never used).
      draft_region_(context + k),
      tstate_(models::make_target_state(gpu, target, batch * context, max_rows_, arena_reuse)),
      dstate_(models::make_eagle3_state(gpu, draft, batch * draft_region_, max_rows_, k * batch, arena_reuse,
                                        batch)),
      rec_(gpu.ctx),
      slots_(batch) {
  if (!draft.embed.buffer && draft.config.layer.hidden_size != target.config().hidden_size)
    fail("the draft needs its own embeddings");
  if (tstate_.logits_rows < round_rows_)
    fail_setting(Setting::Batch,
                 "a batch of {} with {} draft tokens: a verify pass of {} rows of {} logits exceeds one storage "
                 "binding of this device",
                 batch, k, round_rows_, target.config().vocab_size);
  const uint32_t H = target.config().hidden_size, V = target.config().vocab_size;
  const uint32_t Vd = draft.config.draft_vocab_size, R = max_rows_, RR = round_rows_, KB = k * batch;
  Layout& l = layout_;
  l.t_ids = 0;
  l.t_pos = R;
  l.t_slots = 2 * R;
  l.d_ids = 3 * R;
  l.d_pos = 4 * R;            // R catch-up rows, then k B step rows
  l.d_slots = 5 * R + KB;
  l.tap_index = 6 * R + 2 * KB;
  l.proposal_rows = l.tap_index + RR;
  l.head = l.proposal_rows + batch;
  l.verify_ids = l.head + 1 + batch;
  l.verify_drafts = l.verify_ids + RR;
  l.q_index = l.verify_drafts + RR;
  l.draw_pos = l.q_index + RR;
  l.size = l.draw_pos + KB;
  upload_ = vk::Buffer(gpu.ctx, uint64_t(l.size) * 4, vk::MemoryKind::Upload, "batch inputs");
  inputs_ = vk::Buffer(gpu.ctx, uint64_t(l.size) * 4, vk::MemoryKind::Device, "batch inputs");
  std::fill_n(static_cast<int32_t*>(upload_.mapped), l.size, 0);

  prefill_tap_rows_ = vk::Buffer(gpu.ctx, uint64_t(R) * 3 * H * 4, vk::MemoryKind::Device, "prefill taps");
  round_tap_rows_ = vk::Buffer(gpu.ctx, uint64_t(RR + batch) * 3 * H * 4, vk::MemoryKind::Device, "round taps");
  catch_taps_ = vk::Buffer(gpu.ctx, uint64_t(RR) * 3 * H * 4, vk::MemoryKind::Device, "catch-up taps");
  prefill_taps_ = {draft.aux_layers, ops::Act(prefill_tap_rows_, 3 * H)};
  round_taps_ = {draft.aux_layers, ops::Act(round_tap_rows_, 3 * H)};
  round_ids_ = vk::Buffer(gpu.ctx, uint64_t(1 + batch + KB) * 4, vk::MemoryKind::Device, "batch tokens");
  verify_drafts_ = vk::Buffer(gpu.ctx, uint64_t(RR) * 4, vk::MemoryKind::Device, "verify drafts");
  draft_q_ = vk::Buffer(gpu.ctx, uint64_t(KB) * Vd * 4, vk::MemoryKind::Device, "draft q");
  q_verify_ = vk::Buffer(gpu.ctx, uint64_t(RR) * Vd * 4, vk::MemoryKind::Device, "verify q");
  // Unused flags of the draft draws, at the offsets of the tokens they go with.
  draft_accept_ = vk::Buffer(gpu.ctx, uint64_t(1 + batch + KB) * 4, vk::MemoryKind::Device, "draft accept");
  t2d_ = target_to_draft_ids(gpu.ctx, draft, V);
  // Token ids and acceptance flags of a round (or a prefill's last ids), its drafts, and one
  // row of logits (the prompt's last, for logprobs).
  readback_ = vk::Buffer(gpu.ctx, (2ull * R + 1 + batch + KB) * 4 + uint64_t(V) * 4, vk::MemoryKind::Readback,
                         "batch outputs");
}

bool BatchDecoder::any_running() const {
  return std::any_of(slots_.begin(), slots_.end(), [](const Slot& s) { return s.state == State::Running; });
}

void BatchDecoder::copy_inputs() {
  rec_.copy(vk::BufferRange(upload_), vk::BufferRange(inputs_), "inputs");
}

bool BatchDecoder::emit(Slot& s, int32_t token) {
  const GenerationOptions& o = s.options;
  check_row_token(token, s.result.prompt.size() + s.result.tokens.size());
  s.result.tokens.push_back(token);
  const bool keep_going = !s.on_token || s.on_token(token);
  if (std::find(o.eos_ids.begin(), o.eos_ids.end(), token) != o.eos_ids.end() && !o.ignore_eos) {
    s.result.stopped_at_eos = true;
    return false;
  }
  return keep_going && s.result.tokens.size() < o.n_predict;
}

void BatchDecoder::finish(Slot& s) {
  s.stats.total_output_tokens += s.result.tokens.size();
  s.reusable.assign(s.history.begin(), s.history.begin() + s.c + 1);
  s.state = State::Finished;
}

GenerationResult BatchDecoder::take(uint32_t slot, SpecStats& stats) {
  Slot& s = slots_.at(slot);
  if (s.state != State::Finished) fail("BatchDecoder::take: slot {} has no finished generation", slot);
  stats.merge(s.stats);
  s.state = State::Free;
  s.on_token = {};
  return std::move(s.result);
}

void BatchDecoder::start(uint32_t slot, std::vector<int32_t> prompt, const GenerationOptions& o,
                         TokenCallback on_token) {
  if (slot >= batch_) fail("BatchDecoder::start: slot {} of {}", slot, batch_);
  Slot& s = slots_[slot];
  if (s.state != State::Free) fail("BatchDecoder::start: slot {} is busy", slot);
  check_prompt(prompt, context_, target_.config().vocab_size, o);
  if (o.images || o.prompt_argmax || o.top_logits)
    fail_setting(Setting::Batch, "batched decoding takes text prompts without prompt reports (images, the prompt "
                                 "argmax and top logits need a batch of 1)");
  for (const Slot& other : slots_)
    if (other.state == State::Running && other.options.sampling != o.sampling)
      fail("sequences decoded together must share their sampling parameters");
  if (o.logprobs && !logits_readback_)
    logits_readback_ = vk::Buffer(gpu_.ctx, uint64_t(round_rows_) * target_.config().vocab_size * 4,
                                  vk::MemoryKind::Readback, "round logits");
  auto start_time = std::chrono::steady_clock::now();
  const uint32_t same = o.reuse_prefix ? reusable_prefix(prompt, s.reusable) : 0;
  const uint32_t from = same > 0 ? same - 1 : 0;
  s.reusable.clear();  // the caches change from here on
  s.options = o;
  s.on_token = std::move(on_token);
  s.stats = SpecStats{};
  s.result = GenerationResult{};
  s.result.prompt = prompt;
  s.result.reused_tokens = from;
  s.history = std::move(prompt);
  std::vector<float> last_logits;
  prefill(s, slot, from, last_logits);
  s.P = uint32_t(s.history.size());
  s.c = s.P - 1;
  s.tap_row = round_rows_ + slot;  // the prefill left position c's taps in the slot's carry row
  s.result.prefill_seconds = seconds_since(start_time);
  s.state = State::Running;
  if (o.logprobs && o.n_predict > 0) s.result.logprobs.push_back(token_logprobs(last_logits, s.y, o.logprobs));
  const bool running = o.n_predict > 0 && emit(s, s.y);
  s.history.push_back(s.y);
  if (!running) finish(s);
}

void BatchDecoder::prefill(Slot& s, uint32_t slot, uint32_t from, std::vector<float>& last_logits) {
  const Layout& l = layout_;
  const GenerationOptions& o = s.options;
  auto* up = static_cast<int32_t*>(upload_.mapped);
  const std::vector<int32_t>& prompt = s.history;
  const uint32_t n = uint32_t(prompt.size()), H = target_.config().hidden_size, V = target_.config().vocab_size;
  const uint32_t t_base = slot * context_, d_base = slot * draft_region_;
  const bool need_logits = o.logprobs > 0;
  ops::OpContext oc{gpu_, rec_};
  const ops::IntVec t_slots = input(l.t_slots), d_slots = input(l.d_slots);
  for (const PrefillChunk& chunk : prefill_chunks(n, from, kPrefillRows, false)) {
    const uint32_t begin = chunk.begin, rows = chunk.rows, draft_rows = chunk.draft_rows;
    const bool last = chunk.last;
    write_prefill_inputs(chunk, prompt, {up + l.t_ids, up + l.t_pos, up + l.t_slots, t_base,
                                         up + l.d_ids, up + l.d_pos, up + l.d_slots, d_base});
    up[l.proposal_rows] = int32_t(draft_rows > 0 ? draft_rows - 1 : 0);
    rec_.begin();
    copy_inputs();
    rec_.copy(rows_of(inputs_, l.t_ids, rows, 1), rows_of(tstate_.ids, 0, rows, 1), "inputs");
    rec_.copy(rows_of(inputs_, l.t_pos, rows, 1), rows_of(tstate_.positions, 0, rows, 1), "inputs");
    models::ForwardPass target_pass{rows, begin + rows, chunk.logits_from, false, &prefill_taps_};
    target_pass.slots = &t_slots;
    models::record_target_forward(oc, target_, tstate_, target_pass);
    if (draft_rows) {
      models::DraftPass pass;
      pass.rows = draft_rows;
      pass.from_taps = true;
      pass.taps = prefill_taps_.out;
      pass.ids = input(l.d_ids);
      pass.positions = input(l.d_pos);
      pass.slots = &d_slots;
      pass.proposals = 1;
      pass.proposal_rows = input(l.proposal_rows);
      pass.kv_len = begin + draft_rows;
      pass.out_token = ops::IntVec{round_ids_, 1};  // unused: the first round proposes again
      models::record_eagle3_forward(oc, draft_, dstate_, {target_.embed(), target_.lm_head()}, pass);
    }
    if (last) {
      if (!o.sampling.greedy())
        ops::sample(oc, ops::Act(tstate_.arena[tstate_.logits], V), 1, V, nullptr, ops::IntVec{tstate_.out_ids, 0},
                    ops::IntVec{tstate_.accept, 0}, device_params(o.sampling, n));
      rec_.copy(rows_of(tstate_.out_ids, 0, 1, 1), rows_of(readback_, 0, 1, 1), "tokens");
      if (need_logits)
        rec_.copy(tstate_.arena[tstate_.logits].sub(0, uint64_t(V) * 4),
                  vk::BufferRange(readback_, readback_.bytes - uint64_t(V) * 4, uint64_t(V) * 4), "logits");
      // Position n - 1's taps feed the slot's first catch-up row.
      rec_.copy(rows_of(prefill_tap_rows_, rows - 1, 1, 3 * H), rows_of(round_tap_rows_, round_rows_ + slot, 1, 3 * H),
                "taps");
    }
    rec_.submit_and_wait();
    if (last) {
      s.y = static_cast<const int32_t*>(readback_.mapped)[0];
      if (need_logits) {
        const auto* logits = reinterpret_cast<const float*>(static_cast<const uint8_t*>(readback_.mapped) +
                                                            readback_.bytes - uint64_t(V) * 4);
        last_logits.assign(logits, logits + V);
      }
    }
  }
}

void BatchDecoder::round() {
  std::vector<uint32_t> active;
  for (uint32_t i = 0; i < batch_; ++i) {
    Slot& s = slots_[i];
    if (s.state != State::Running) continue;
    if (s.P + 1 > context_) {  // no room for another token
      s.result.stopped_at_context = true;
      finish(s);
      continue;
    }
    active.push_back(i);
  }
  if (active.empty()) return;
  const auto round_start = std::chrono::steady_clock::now();
  const Layout& l = layout_;
  const uint32_t A = uint32_t(active.size()), B = batch_, V = target_.config().vocab_size;
  const uint32_t H = target_.config().hidden_size, Vd = draft_.config.draft_vocab_size;
  const GenerationOptions& o0 = slots_[active[0]].options;
  const bool sampled_drafts = draft_sampling_ && !o0.sampling.greedy();
  const bool want_logits =
      std::any_of(active.begin(), active.end(), [&](uint32_t i) { return slots_[i].options.logprobs > 0; });
  auto* up = static_cast<int32_t*>(upload_.mapped);

  // Rows of each sequence: its catch-up rows x_{c+1..P} at positions c..P-1 and its verify
  // rows y, d_1..d_k at P..P+k; every sequence takes the draft steps up to the round's largest
  // k (those past a sequence's own k are never used).
  std::vector<uint32_t> ks(A), catch_off(A), verify_off(A);
  uint32_t CU = 0, VR = 0, K = 0, draft_kv = 0, verify_kv = 0;
  for (uint32_t a = 0; a < A; ++a) {
    const Slot& s = slots_[active[a]];
    ks[a] = std::min(k_, context_ - 1 - s.P);
    catch_off[a] = CU;
    verify_off[a] = VR;
    CU += s.P - s.c;
    VR += ks[a] + 1;
    K = std::max(K, ks[a]);
    verify_kv = std::max(verify_kv, s.P + ks[a] + 1);
  }
  up[l.head] = -1;
  for (uint32_t a = 0; a < A; ++a) {
    const uint32_t slot = active[a];
    const Slot& s = slots_[slot];
    const uint32_t catch_rows = s.P - s.c, t_base = slot * context_, d_base = slot * draft_region_;
    up[l.head + 1 + a] = s.y;
    for (uint32_t i = 0; i < catch_rows; ++i) {
      const uint32_t r = catch_off[a] + i;
      up[l.tap_index + r] = int32_t(s.tap_row + i);
      up[l.d_ids + r] = s.history[s.c + 1 + i];
      up[l.d_pos + r] = int32_t(s.c + i);
      up[l.d_slots + r] = int32_t(d_base + s.c + i);
    }
    up[l.proposal_rows + a] = int32_t(catch_off[a] + catch_rows - 1);
    for (uint32_t i = 1; i < K; ++i) {
      const uint32_t r = CU + (i - 1) * A + a;
      up[l.d_pos + r] = int32_t(s.P - 1 + i);
      up[l.d_slots + r] = int32_t(d_base + s.P - 1 + i);
    }
    for (uint32_t i = 0; i < K; ++i) up[l.draw_pos + i * B + a] = int32_t(s.P + 1 + i);
    for (uint32_t i = 0; i <= ks[a]; ++i) {
      const uint32_t r = verify_off[a] + i;
      up[l.t_pos + r] = int32_t(s.P + i);
      up[l.t_slots + r] = int32_t(t_base + s.P + i);
      const bool bonus = i == ks[a];
      // round_ids_: [0] = -1, [1 + a] = y, [1 + B + i B + a] = draft i.
      up[l.verify_ids + r] = int32_t(i == 0 ? 1 + a : 1 + B + (i - 1) * B + a);
      up[l.verify_drafts + r] = int32_t(bonus ? 0 : 1 + B + i * B + a);
      up[l.q_index + r] = int32_t(bonus ? 0 : i * B + a);
    }
    draft_kv = std::max(draft_kv, s.P + (K > 0 ? K - 1 : 0));  // the last step's position + 1
  }

  ops::OpContext oc{gpu_, rec_};
  const ops::IntVec d_slots = input(l.d_slots), t_slots = input(l.t_slots), t_pos = input(l.t_pos);
  const ops::Act ids_words(vk::BufferRange(round_ids_), 1);
  const uint32_t id_words = 1 + B + k_ * B;
  const ops::Act draft_logits(dstate_.arena[dstate_.logits], Vd);
  vk::BufferRange d2t(draft_.d2t);
  // With draft sampling, draft i of every sequence is drawn from q on the device over the
  // argmax the pass wrote, at position P + 1 + i and random stream 8, as SpeculativeDecoder draws it.
  auto draw_drafts = [&](uint32_t i) {
    if (!sampled_drafts) return;
    const ops::DraftDistribution dist = draft_draw(draft_, draft_q_, d2t, i * B);
    const ops::IntVec positions = input(l.draw_pos + i * B);
    ops::sample(oc, draft_logits, A, Vd, nullptr, ops::IntVec{round_ids_, 1 + B + i * B},
                ops::IntVec{draft_accept_, 1 + B + i * B}, device_params(o0.sampling, 0), ops::AcceptRule::Correct,
                &dist, /*stream=*/8, &positions);
  };

  rec_.begin();
  copy_inputs();
  rec_.copy(rows_of(inputs_, l.head, 1 + A, 1), rows_of(round_ids_, 0, 1 + A, 1), "tokens");
  rec_.copy(rows_of(inputs_, l.t_pos, VR, 1), rows_of(tstate_.positions, 0, VR, 1), "inputs");
  if (K > 0) {
    ops::gather_rows(oc, round_taps_.out, round_rows_ + B, input(l.tap_index), ops::Act(catch_taps_, 3 * H), CU, 3 * H,
                     "batch_taps");
    models::DraftPass pass;
    pass.rows = CU;
    pass.from_taps = true;
    pass.taps = ops::Act(catch_taps_, 3 * H);
    pass.ids = input(l.d_ids);
    pass.positions = input(l.d_pos);
    pass.slots = &d_slots;
    pass.proposals = A;
    pass.proposal_rows = input(l.proposal_rows);
    pass.kv_len = draft_kv;
    pass.out_token = ops::IntVec{round_ids_, 1 + B};
    const uint32_t feature_row =
        models::record_eagle3_forward(oc, draft_, dstate_, {target_.embed(), target_.lm_head()}, pass);
    draw_drafts(0);
    for (uint32_t i = 1; i < K; ++i) {
      const ops::IntVec step_slots = input(l.d_slots + CU + (i - 1) * A);
      models::DraftPass step;
      step.rows = A;
      step.ids = ops::IntVec{round_ids_, 1 + B + (i - 1) * B};
      step.positions = input(l.d_pos + CU + (i - 1) * A);
      step.slots = &step_slots;
      step.proposals = A;
      step.feature_row = feature_row;
      step.kv_len = draft_kv;
      step.out_token = ops::IntVec{round_ids_, 1 + B + i * B};
      models::record_eagle3_forward(oc, draft_, dstate_, {target_.embed(), target_.lm_head()}, step);
      draw_drafts(i);
    }
  }
  // Each verify row's token and draft, gathered from the pending tokens and the steps' outputs.
  ops::gather_rows(oc, ids_words, id_words, input(l.verify_ids), ops::Act(vk::BufferRange(tstate_.ids), 1), VR, 1,
                   "batch_verify_ids");
  ops::gather_rows(oc, ids_words, id_words, input(l.verify_drafts), ops::Act(vk::BufferRange(verify_drafts_), 1), VR,
                   1, "batch_verify_drafts");
  if (sampled_drafts)
    ops::gather_rows(oc, ops::Act(vk::BufferRange(draft_q_), Vd), k_ * B, input(l.q_index),
                     ops::Act(vk::BufferRange(q_verify_), Vd), VR, Vd, "batch_verify_q");
  models::ForwardPass verify{VR, verify_kv, 0, /*batch_invariant=*/true, &round_taps_, /*argmax=*/false};
  verify.slots = &t_slots;
  models::record_target_forward(oc, target_, tstate_, verify);
  if (want_logits)
    rec_.copy(tstate_.arena[tstate_.logits].sub(0, uint64_t(VR) * V * 4),
              vk::BufferRange(logits_readback_, 0, uint64_t(VR) * V * 4), "logits");
  ops::IntVec drafts{verify_drafts_};
  const ops::DraftDistribution verify_q = draft_verify(draft_, q_verify_, t2d_);
  // Row r decides the token after position t_pos[r], as a single sequence's row would.
  ops::sample(oc, ops::Act(tstate_.arena[tstate_.logits], V), VR, V, &drafts, ops::IntVec{tstate_.out_ids},
              ops::IntVec{tstate_.accept}, device_params(o0.sampling, 1), ops::AcceptRule::Correct,
              sampled_drafts ? &verify_q : nullptr, 0, &t_pos);
  const uint64_t R = max_rows_;
  rec_.copy(rows_of(tstate_.out_ids, 0, VR, 1), rows_of(readback_, 0, VR, 1), "tokens");
  rec_.copy(rows_of(tstate_.accept, 0, VR, 1), rows_of(readback_, R, VR, 1), "accepted");
  rec_.copy(vk::BufferRange(round_ids_), rows_of(readback_, 2 * R, id_words, 1), "drafts");
  rec_.submit_and_wait();

  const auto* back = static_cast<const int32_t*>(readback_.mapped);
  const int32_t* verified = back;       // the target's token after each verify row
  const int32_t* accept = back + R;     // row j's draft accepted
  const int32_t* ids = back + 2 * R;    // round_ids_
  const auto* logits = static_cast<const float*>(logits_readback_ ? logits_readback_.mapped : nullptr);
  // Each sequence's decode time is its share of the rounds it took part in, so that the
  // sequences' times add up to the time spent.
  const double share = seconds_since(round_start) / A;
  for (uint32_t a = 0; a < A; ++a) {
    Slot& s = slots_[active[a]];
    s.result.decode_seconds += share;
    const uint32_t v0 = verify_off[a];
    for (uint32_t i = 0; i < ks[a]; ++i) check_row_token(ids[1 + B + i * B + a], s.P + 1 + i, "draft");
    uint32_t accepted = 0;
    while (accepted < ks[a] && accept[v0 + accepted]) ++accepted;
    s.stats.record_round(ks[a], accepted);
    bool running = true;
    for (uint32_t i = 0; i <= accepted && running; ++i) {
      const int32_t token = i < accepted ? ids[1 + B + i * B + a] : verified[v0 + accepted];
      s.history.push_back(token);
      if (s.options.logprobs)
        s.result.logprobs.push_back(
            token_logprobs(std::span<const float>(logits + uint64_t(v0 + i) * V, V), token, s.options.logprobs));
      running = emit(s, token);
    }
    if (!running) {
      finish(s);
      continue;
    }
    s.c = s.P;
    s.P += accepted + 1;
    s.y = s.history[s.P];
    s.tap_row = v0;
  }
}

}  // namespace eaglevk::engine
