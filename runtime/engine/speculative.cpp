#include "runtime/engine/speculative.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <span>

#include <eaglevk/error.h>

#include "runtime/engine/elapsed.h"
#include "runtime/engine/prefill.h"
#include "runtime/engine/replay_bound.h"
#include "runtime/ops/tree.h"

namespace eaglevk::engine {
namespace {

// Checked before any buffer is sized by k.
uint32_t checked_chain_k(uint32_t k) {
  if (k == 0 || k > kMaxChainDraftTokens) fail("-k must be in 1..{}, got {}", kMaxChainDraftTokens, k);
  return k;
}

}  // namespace

vk::Buffer target_to_draft_ids(const vk::Context& ctx, const models::Eagle3Model& draft, uint32_t target_vocab) {
  const uint32_t Vd = draft.config.draft_vocab_size;
  std::vector<int32_t> offsets(Vd, 0), t2d(target_vocab, -1);
  if (draft.d2t) vk::download(ctx, draft.d2t, offsets.data(), Vd * 4);
  for (uint32_t j = 0; j < Vd; ++j) t2d[uint32_t(int32_t(j) + offsets[j])] = int32_t(j);
  vk::Buffer b(ctx, uint64_t(target_vocab) * 4, vk::MemoryKind::Device, "t2d");
  vk::upload(ctx, b, t2d.data(), uint64_t(target_vocab) * 4);
  return b;
}

ops::DraftDistribution draft_draw(const models::Eagle3Model& draft, const vk::Buffer& q, const vk::BufferRange& d2t,
                                  uint32_t q_row) {
  ops::DraftDistribution dist;
  dist.mode = ops::DraftDistribution::Mode::Draw;
  dist.q = vk::BufferRange(q);
  dist.width = draft.config.draft_vocab_size;
  dist.d2t = draft.d2t ? &d2t : nullptr;
  dist.q_row = q_row;
  return dist;
}

ops::DraftDistribution draft_verify(const models::Eagle3Model& draft, const vk::Buffer& q, const vk::Buffer& t2d) {
  ops::DraftDistribution dist;
  dist.mode = ops::DraftDistribution::Mode::Verify;
  dist.q = vk::BufferRange(q);
  dist.width = draft.config.draft_vocab_size;
  dist.t2d = vk::BufferRange(t2d);
  return dist;
}

uint64_t UploadLayout::slots() const { return compact_path() + 2 + tree_nodes; }

SpeculativeDecoder::SpeculativeDecoder(ops::Gpu& gpu, const models::TargetModel& target,
                                       const models::Eagle3Model& draft, uint32_t context, uint32_t k,
                                       uint32_t max_rows, bool arena_reuse)
    : SpeculativeDecoder(gpu, target, draft, context, checked_chain_k(k), TreeParams{}, max_rows, arena_reuse) {}

SpeculativeDecoder::SpeculativeDecoder(ops::Gpu& gpu, const models::TargetModel& target,
                                       const models::Eagle3Model& draft, uint32_t context, const TreeParams& tree,
                                       uint32_t max_rows, bool arena_reuse)
    : SpeculativeDecoder(gpu, target, draft, context, (check_tree_params(tree), tree.steps), tree, max_rows,
                         arena_reuse) {}

SpeculativeDecoder::SpeculativeDecoder(ops::Gpu& gpu, const models::TargetModel& target,
                                       const models::Eagle3Model& draft, uint32_t context, uint32_t k,
                                       const TreeParams& tree, uint32_t max_rows, bool arena_reuse)
    : gpu_(gpu),
      target_(target),
      draft_(draft),
      context_(context),
      k_(k),
      max_rows_(std::max({max_rows, k + 1, tree.draft_tokens})),
      tstate_(models::make_target_state(gpu, target, context, max_rows_, arena_reuse)),
      // Tree steps write K (S - 1) scratch rows past the committed draft KV.
      dstate_(models::make_eagle3_state(gpu, draft, context + tree.topk * tree.steps, max_rows_, k, arena_reuse,
                                        std::max(1u, tree.topk))),
      taps_(gpu.ctx, uint64_t(max_rows_) * 3 * target.config().hidden_size * 4, vk::MemoryKind::Device, "taps"),
      draft_tokens_(gpu.ctx, std::max(k, 1u) * 4, vk::MemoryKind::Device, "draft tokens"),
      verify_drafts_(gpu.ctx, (k + 1) * 4, vk::MemoryKind::Device, "verify drafts"),
      upload_(gpu.ctx, upload_layout(max_rows_, k, tree).slots() * 4, vk::MemoryKind::Upload, "round inputs"),
      // Ids, one row of logits (the last prompt position), and the taps when a sink wants them.
      readback_(gpu.ctx, (2ull * max_rows_ + k) * 4 + uint64_t(target.config().vocab_size) * 4 +
                             uint64_t(max_rows_) * 3 * target.config().hidden_size * 4,
                vk::MemoryKind::Readback, "round outputs"),
      rec_(gpu.ctx),
      tree_(tree) {
  if (!draft.embed.buffer && draft.config.layer.hidden_size != target.config().hidden_size)
    fail("the draft needs its own embeddings");
  tap_request_.layers = draft.aux_layers;
  // For the draft-sampling scheme: q rows, and the target -> draft vocabulary map that lets
  // the verifier see q in the target vocabulary.
  const uint32_t Vd = draft.config.draft_vocab_size, V = target.config().vocab_size;
  draft_q_ = vk::Buffer(gpu.ctx, uint64_t(std::max(k, 1u)) * Vd * 4, vk::MemoryKind::Device, "draft q");
  draft_accept_ = vk::Buffer(gpu.ctx, std::max(k, 1u) * 4, vk::MemoryKind::Device, "draft accept");
  t2d_ = target_to_draft_ids(gpu.ctx, draft, V);
  tap_request_.out = ops::Act(taps_, 3 * uint32_t(target.config().hidden_size));
  if (tree_.enabled()) {
    if (tree_.topk > Vd)
      fail_setting(Setting::TreeTopK, "tree top-k {} exceeds the draft vocabulary of {}", tree_.topk, Vd);
    const ops::TreeLayout layout{tree_.topk, tree_.steps, tree_.draft_tokens};
    tree_f_ = vk::Buffer(gpu.ctx, uint64_t(layout.f_size()) * 4, vk::MemoryKind::Device, "tree scores");
    tree_i_ = vk::Buffer(gpu.ctx, uint64_t(layout.i_size()) * 4, vk::MemoryKind::Device, "tree nodes");
    u_history_ = vk::Buffer(gpu.ctx, uint64_t(1 + tree_.topk * (tree_.steps - 1)) * draft.config.layer.hidden_size * 4,
                            vk::MemoryKind::Device, "draft u history");
    tree_readback_ = vk::Buffer(gpu.ctx, uint64_t(6) * tree_.draft_tokens * 4, vk::MemoryKind::Readback, "tree");
    tree_draws_ = vk::Buffer(gpu.ctx, uint64_t(tree_.draft_tokens) * 4, vk::MemoryKind::Device, "tree draws");
  }
}

double SpeculativeDecoder::time_pass(bool draft_pass, uint32_t rows, uint32_t repeats) {
  if (rows == 0 || rows > max_rows_ || rows >= context_) fail("time_pass: {} rows do not fit", rows);
  reusable_.clear();
  const UploadLayout up = upload_layout(max_rows_, k_, tree_);
  auto* slots = static_cast<int32_t*>(upload_.mapped);
  for (uint32_t i = 0; i < rows; ++i) {
    slots[up.target_ids() + i] = slots[up.draft_ids() + i] = 0;
    slots[up.target_positions() + i] = slots[up.draft_positions() + i] = int32_t(i);
  }
  std::vector<double> times;
  for (uint32_t r = 0; r <= repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    ops::OpContext oc{gpu_, rec_};
    rec_.begin();
    if (!draft_pass) {
      record_inputs_copy(rec_, up.target_ids(), tstate_.ids, rows);
      record_inputs_copy(rec_, up.target_positions(), tstate_.positions, rows);
      models::record_target_forward(oc, target_, tstate_,
                                    {rows, rows, 0, /*batch_invariant=*/true, &tap_request_, /*argmax=*/true});
    } else {
      record_inputs_copy(rec_, up.draft_positions(), dstate_.positions, rows);
      const models::DraftPass pass = catch_up_pass(rows, tap_request_.out, rows);
      models::record_eagle3_forward(oc, draft_, dstate_, {target_.embed(), target_.lm_head()}, pass);
    }
    rec_.submit_and_wait();
    if (r > 0) times.push_back(seconds_since(t0));
  }
  std::sort(times.begin(), times.end());
  return times.empty() ? 0.0 : times[times.size() / 2];
}

SpeculativeDecoder::RoundRecording& SpeculativeDecoder::round_recording(uint32_t catch_rows) {
  if (round_recordings_.size() < catch_rows) round_recordings_.resize(catch_rows);
  RoundRecording& slot = round_recordings_[catch_rows - 1];
  if (!slot.rec) slot.rec = std::make_unique<vk::Recorder>(gpu_.ctx);
  return slot;
}

void SpeculativeDecoder::submit_round(uint32_t catch_rows, uint32_t tap_row0, const ChainShape& chain,
                                      const TreeShape& tree, uint32_t exact_bound, const RoundRecorder& record) {
  // The first round of a generation reads its taps from the row where the prefill left them
  // (tap_row0), later ones from row 0: only those are kept for replay, each in the recorder of
  // its catch-up row count. The rest are recorded into the decoder's own recorder, exactly.
  if (!replay || tap_row0 != 0) {
    record(rec_, exact_bound, /*exact=*/true);
    rec_.submit_and_wait();
    return;
  }
  RoundRecording& slot = round_recording(catch_rows);
  vk::Recorder& rec = *slot.rec;
  if (slot.serves(chain, tree, exact_bound)) {
    rec.resubmit();
    rec.wait();
    ++replayed_rounds_;
    return;
  }
  const uint32_t kv_bound =
      replay_kv_bound(exact_bound, replay_span, context_,
                      std::min(ops::attention_max_keys(gpu_.ctx, uint32_t(target_.config().head_dim)),
                               ops::attention_max_keys(gpu_.ctx, draft_.config.layer.head_dim)));
  record(rec, kv_bound, /*exact=*/false);
  rec.submit_and_wait();
  slot.recording = rec.recordings();
  slot.chain_shape = chain;
  slot.tree_shape = tree;
  slot.kv_bound = kv_bound;
}

models::DraftPass SpeculativeDecoder::catch_up_pass(uint32_t rows, ops::Act taps, uint32_t kv_len) const {
  const UploadLayout up = upload_layout(max_rows_, k_, tree_);
  models::DraftPass pass;
  pass.rows = rows;
  pass.from_taps = true;
  pass.taps = taps;
  pass.ids = ops::IntVec{vk::BufferRange(upload_), uint32_t(up.draft_ids())};
  pass.positions = ops::IntVec{dstate_.positions, 0};
  pass.kv_len = kv_len;
  pass.out_token = ops::IntVec{draft_tokens_, 0};
  return pass;
}

void SpeculativeDecoder::record_inputs_copy(vk::Recorder& rec, uint64_t slot, vk::BufferRange dst, uint32_t count) {
  rec.copy(vk::BufferRange(upload_, slot * 4, count * 4), dst.sub(0, count * 4), "inputs");
}

void SpeculativeDecoder::prefill(const std::vector<int32_t>& prompt, uint32_t from, const GenerationOptions& o,
                                 GenerationResult& result, std::vector<float>& last_logits) {
  const UploadLayout up = upload_layout(max_rows_, k_, tree_);
  auto* slots = static_cast<int32_t*>(upload_.mapped);
  const uint32_t n = uint32_t(prompt.size()), H = target_.config().hidden_size, V = target_.config().vocab_size;
  const bool need_logits = o.top_logits > 0 || o.logprobs > 0;
  ops::OpContext oc{gpu_, rec_};
  for (const PrefillChunk& chunk : prefill_chunks(n, from, max_rows_, o.prompt_argmax)) {
    const uint32_t begin = chunk.begin, rows = chunk.rows, draft_rows = chunk.draft_rows;
    const bool last = chunk.last;
    PrefillInputs inputs;
    inputs.target_ids = slots + up.target_ids();
    inputs.target_positions = slots + up.target_positions();
    inputs.draft_ids = slots + up.draft_ids();
    inputs.draft_positions = slots + up.draft_positions();
    write_prefill_inputs(chunk, prompt, inputs);
    rec_.begin();
    record_inputs_copy(rec_, up.target_ids(), tstate_.ids, rows);
    record_inputs_copy(rec_, up.target_positions(), tstate_.positions, rows);
    const uint32_t logits_from = chunk.logits_from;
    models::ForwardPass target_pass{rows, begin + rows, logits_from, false, &tap_request_};
    models::EmbeddingOverride image_rows;
    if (o.images) {
      image_rows = o.images->override_for(begin, rows);
      target_pass.embeddings = &image_rows;
    }
    models::record_target_forward(oc, target_, tstate_, target_pass);
    if (draft_rows) {
      // The draft reads its token ids straight from the upload buffer: they are host-written
      // before submission, so no copy is needed.
      record_inputs_copy(rec_, up.draft_positions(), dstate_.positions, draft_rows);
      const models::DraftPass pass = catch_up_pass(draft_rows, tap_request_.out, begin + draft_rows);
      models::record_eagle3_forward(oc, draft_, dstate_, {target_.embed(), target_.lm_head()}, pass);
    }
    const uint32_t n_logits = chunk.logits_rows();
    if (last && !o.sampling.greedy())
      ops::sample(oc, ops::Act(tstate_.arena[tstate_.logits], V).row(n_logits - 1), 1, V, nullptr,
                  ops::IntVec{tstate_.out_ids, n_logits - 1}, ops::IntVec{tstate_.accept, n_logits - 1},
                  device_params(o.sampling, n));
    if (n_logits) rec_.copy(vk::BufferRange(tstate_.out_ids, 0, n_logits * 4), vk::BufferRange(readback_, 0, n_logits * 4));
    if (last && need_logits)
      rec_.copy(tstate_.arena[tstate_.logits].sub(uint64_t(n_logits - 1) * V * 4, uint64_t(V) * 4),
                vk::BufferRange(readback_, (2ull * max_rows_ + k_) * 4, uint64_t(V) * 4));
    if (tap_sink_)
      rec_.copy(vk::BufferRange(taps_, 0, uint64_t(rows) * 3 * H * 4),
                vk::BufferRange(readback_, readback_.bytes - uint64_t(max_rows_) * 3 * H * 4, uint64_t(rows) * 3 * H * 4));
    rec_.submit_and_wait();

    const auto* back = static_cast<const int32_t*>(readback_.mapped);
    // Row r decided the token at position begin + logits_from + r + 1.
    for (uint32_t r = 0; r < n_logits; ++r) check_row_token(back[r], begin + logits_from + r + 1);
    if (o.prompt_argmax) result.prompt_argmax.insert(result.prompt_argmax.end(), back, back + n_logits);
    if (last) {
      result.tokens.clear();
      if (need_logits) {
        const float* l = reinterpret_cast<const float*>(back + 2 * max_rows_ + k_);
        last_logits.assign(l, l + V);
      }
      slots[0] = back[n_logits - 1];  // stash y for the caller
    }
    if (tap_sink_) {
      TapRows t;
      t.tokens.assign(prompt.begin() + begin, prompt.begin() + begin + rows);
      for (uint32_t i = 0; i < rows; ++i) t.positions.push_back(int32_t(begin + i));
      const auto* h = reinterpret_cast<const float*>(static_cast<const uint8_t*>(readback_.mapped) + readback_.bytes -
                                                     uint64_t(max_rows_) * 3 * H * 4);
      t.hidden.assign(h, h + uint64_t(rows) * 3 * H);
      tap_sink_(t);
    }
  }
}

GenerationResult SpeculativeDecoder::generate(std::vector<int32_t> prompt, const GenerationOptions& o,
                                              SpecStats& stats, const TokenCallback& on_token) {
  check_prompt(prompt, context_, target_.config().vocab_size, o);
  if (tree_.enabled() && draft_sampling_ && !o.sampling.greedy())
    fail("draft sampling is for chain drafting (-k): a tree's children are the draft's top-K tokens");
  if (o.logprobs && !logits_readback_)
    logits_readback_ = vk::Buffer(gpu_.ctx, uint64_t(std::max(k_ + 1, tree_.draft_tokens)) * target_.config().vocab_size * 4,
                                  vk::MemoryKind::Readback, "round logits");
  GenerationResult result;
  result.prompt = prompt;
  auto* slots = static_cast<int32_t*>(upload_.mapped);
  const uint32_t H = target_.config().hidden_size;
  auto start = std::chrono::steady_clock::now();

  std::vector<float> last_logits;
  compact_path_.clear();
  // With reuse, restart where the draft's cache stops matching. Its row i was computed with
  // token i + 1, so it stays only below the last common token; the target's rows below c are
  // valid too (the last tree's accepted path, not yet compacted, lies at and after c).
  const bool reuse = o.reuse_prefix && !o.images && !o.prompt_argmax;
  const uint32_t same = reuse ? reusable_prefix(prompt, reusable_) : 0;
  const uint32_t from = same > 0 ? same - 1 : 0;
  reusable_.clear();  // the caches change from here on
  result.reused_tokens = from;
  prefill(prompt, from, o, result, last_logits);
  if (o.top_logits) result.prompt_top_logits = top_logits(last_logits, o.top_logits);
  std::vector<int32_t> history = prompt;  // every token whose position is decided
  int32_t y = slots[0];
  uint32_t P = uint32_t(prompt.size());   // position of the pending token y
  uint32_t c = P - 1;                     // first position the draft has not caught up on
  uint32_t tap_row0 = (P - 1 - from) % max_rows_;  // tap row of position c
  result.prefill_seconds = seconds_since(start);
  start = std::chrono::steady_clock::now();

  // Emits one token; returns false when generation must stop.
  auto emit = [&](int32_t token) {
    check_row_token(token, result.prompt.size() + result.tokens.size());
    result.tokens.push_back(token);
    bool keep_going = !on_token || on_token(token);
    if (std::find(o.eos_ids.begin(), o.eos_ids.end(), token) != o.eos_ids.end() && !o.ignore_eos) {
      result.stopped_at_eos = true;
      return false;
    }
    return keep_going && result.tokens.size() < o.n_predict;
  };

  if (o.logprobs && o.n_predict > 0) result.logprobs.push_back(token_logprobs(last_logits, y, o.logprobs));
  bool running = o.n_predict > 0 && emit(y);
  history.push_back(y);
  while (running) {
    // Room left in the context bounds this round's draft length.
    if (P + 1 > context_) {
      result.stopped_at_context = true;
      break;
    }
    RoundOutcome round = tree_.enabled() ? tree_round(P, c, tap_row0, y, history, o) : chain_round(P, c, tap_row0, y, history, o);
    if (tree_.enabled())
      stats.record_round(round.proposed, round.accepted, std::min(tree_.steps, round.proposed));
    else
      stats.record_round(round.proposed, round.accepted);
    if (tap_sink_) {
      TapRows t;
      const auto* h = reinterpret_cast<const float*>(static_cast<const uint8_t*>(readback_.mapped) + readback_.bytes -
                                                     uint64_t(max_rows_) * 3 * H * 4);
      for (uint32_t i = 0; i <= round.accepted; ++i) {
        t.tokens.push_back(i == 0 ? y : round.tokens[i - 1]);
        t.positions.push_back(int32_t(P + i));
        const float* row = h + uint64_t(round.tap_rows[i]) * 3 * H;
        t.hidden.insert(t.hidden.end(), row, row + 3 * H);
      }
      tap_sink_(t);
    }
    // Emit d_1..d_a and the target's own token after them.
    for (uint32_t i = 0; i <= round.accepted && running; ++i) {
      history.push_back(round.tokens[i]);
      if (o.logprobs) result.logprobs.push_back(round.logprobs[i]);
      running = emit(round.tokens[i]);
    }
    if (!running) break;
    c = P;
    P += round.accepted + 1;
    y = history[P];
    tap_row0 = 0;
  }
  stats.total_output_tokens += result.tokens.size();
  if (!o.images) reusable_.assign(history.begin(), history.begin() + c + 1);
  result.decode_seconds = seconds_since(start);
  return result;
}

}  // namespace eaglevk::engine
