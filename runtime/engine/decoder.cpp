// The decoder's construction, its sequences (start, emission, finish, take) and the timing
// passes of --spec-draft-tokens auto.
#include "runtime/engine/decoder.h"

#include <algorithm>
#include <chrono>
#include <span>

#include <eaglevk/error.h>

#include "runtime/engine/elapsed.h"
#include "runtime/engine/replay_bound.h"
#include "runtime/ops/tree.h"

namespace eaglevk::engine {
namespace {

// Checked before any buffer is sized by them.
DecoderConfig checked(const DecoderConfig& c, const models::Eagle3Model* draft) {
  if (c.batch == 0 || c.batch > kMaxBatch)
    fail_setting(Setting::Batch, "the batch must be in 1..{} sequences, got {}", kMaxBatch, c.batch);
  if (!draft) return c;
  if (c.tree.enabled()) {
    check_tree_params(c.tree);
    if (c.batch != 1)
      fail_setting(Setting::Batch, "tree drafting decodes one sequence at a time, got a batch of {}", c.batch);
  } else if (c.k > kMaxChainDraftTokens) {
    fail_setting(Setting::ChainDraftTokens, "draft tokens per round must be in 1..{}, got {}", kMaxChainDraftTokens,
                 c.k);
  }
  return c;
}

}  // namespace

Decoder::Decoder(ops::Gpu& gpu, const models::TargetModel& target, const models::Eagle3Model* draft,
                 const DecoderConfig& config_in)
    : gpu_(gpu), target_(target), draft_(draft), rec_(gpu.ctx) {
  const DecoderConfig config = checked(config_in, draft);
  mode_ = !draft ? Mode::Plain : config.tree.enabled() ? Mode::Tree : config.k > 0 ? Mode::Chain : Mode::Plain;
  if (mode_ == Mode::Plain) draft_ = nullptr;
  context_ = config.context;
  batch_ = config.batch;
  tree_ = mode_ == Mode::Tree ? config.tree : TreeParams{};
  // A tree's draft steps are its levels.
  k_ = mode_ == Mode::Chain ? config.k : mode_ == Mode::Tree ? tree_.steps : 0;
  const uint32_t B = batch_, M = tree_.draft_tokens;
  prefill_rows_ = std::max({config.max_rows, mode_ == Mode::Chain ? k_ + 1 : 1u, M});
  round_rows_ = mode_ == Mode::Tree ? M : B * (k_ + 1);
  max_rows_ = std::max(prefill_rows_, round_rows_);
  // The last round's steps of a sequence near the end of the context write k - 1 draft rows
  // past it (their tokens are never used); tree steps write K (S - 1) scratch rows past the
  // committed ones.
  draft_region_ = context_ + (mode_ == Mode::Tree ? tree_.topk * tree_.steps : k_);
  const uint32_t H = target.config().hidden_size, V = target.config().vocab_size;
  tstate_ = models::make_target_state(gpu, target, B * context_, max_rows_, config.arena_reuse);
  if (target.split()) {
    // The hops carry the residual stream and the taps; each earlier part gets a tree's nodes
    // from the host (split_tree_round).
    front_ = std::make_unique<SplitFront>(target, B * context_, context_, max_rows_, config.arena_reuse);
    split_ids_.resize(round_rows_);
  }
  if (tstate_.logits_rows < round_rows_)
    fail_setting(Setting::Batch,
                 "a batch of {} with {} draft tokens: a verify pass of {} rows of {} logits exceeds one storage "
                 "binding of this device",
                 B, k_, round_rows_, V);
  const uint32_t chain_steps = mode_ == Mode::Chain ? k_ : 0;
  const LayoutSizes sizes{max_rows_, round_rows_, B, chain_steps, tree_.topk * (tree_.steps ? tree_.steps - 1 : 0),
                          M, V, 3 * H};
  in_ = input_layout(sizes);
  out_ = output_layout(sizes);
  upload_ = vk::Buffer(gpu.ctx, uint64_t(in_.size) * 4, vk::MemoryKind::Upload, "decoder inputs");
  inputs_ = vk::Buffer(gpu.ctx, uint64_t(in_.size) * 4, vk::MemoryKind::Device, "decoder inputs");
  std::fill_n(static_cast<int32_t*>(upload_.mapped), in_.size, 0);
  readback_ = vk::Buffer(gpu.ctx, uint64_t(out_.size) * 4, vk::MemoryKind::Readback, "decoder outputs");
  const RoundIds ids{B};
  round_ids_ = vk::Buffer(gpu.ctx, uint64_t(ids.words(std::max(chain_steps, 1u))) * 4, vk::MemoryKind::Device,
                          "round tokens");
  seqs_.resize(B);
  if (!draft_) return;

  const models::Eagle3Model& d = *draft_;
  if (!d.embed.buffer && d.config.layer.hidden_size != target.config().hidden_size)
    fail("the draft needs its own embeddings");
  const uint32_t Vd = d.config.draft_vocab_size, R = max_rows_, RR = round_rows_;
  if (mode_ == Mode::Tree && tree_.topk > Vd)
    fail_setting(Setting::TreeTopK, "tree top-k {} exceeds the draft vocabulary of {}", tree_.topk, Vd);
  dstate_ = models::make_eagle3_state(gpu, d, B * draft_region_, max_rows_, mode_ == Mode::Tree ? k_ : k_ * B,
                                      config.arena_reuse, mode_ == Mode::Tree ? std::max(1u, tree_.topk) : B);
  prefill_tap_rows_ = vk::Buffer(gpu.ctx, uint64_t(R) * 3 * H * 4, vk::MemoryKind::Device, "prefill taps");
  round_tap_rows_ = vk::Buffer(gpu.ctx, uint64_t(RR + B) * 3 * H * 4, vk::MemoryKind::Device, "round taps");
  catch_taps_ = vk::Buffer(gpu.ctx, uint64_t(RR) * 3 * H * 4, vk::MemoryKind::Device, "catch-up taps");
  prefill_taps_ = {d.aux_layers, ops::Act(prefill_tap_rows_, 3 * H)};
  round_taps_ = {d.aux_layers, ops::Act(round_tap_rows_, 3 * H)};
  verify_drafts_ = vk::Buffer(gpu.ctx, uint64_t(RR) * 4, vk::MemoryKind::Device, "verify drafts");
  const uint32_t KB = std::max(chain_steps * B, 1u);
  draft_q_ = vk::Buffer(gpu.ctx, uint64_t(KB) * Vd * 4, vk::MemoryKind::Device, "draft q");
  q_verify_ = vk::Buffer(gpu.ctx, uint64_t(RR) * Vd * 4, vk::MemoryKind::Device, "verify q");
  // Unused flags of the draft draws, at the offsets of the tokens they go with.
  draft_accept_ = vk::Buffer(gpu.ctx, round_ids_.bytes, vk::MemoryKind::Device, "draft accept");
  t2d_ = target_to_draft_ids(gpu.ctx, d, V);
  if (mode_ == Mode::Tree) {
    const ops::TreeLayout layout{tree_.topk, tree_.steps, M};
    tree_f_ = vk::Buffer(gpu.ctx, uint64_t(layout.f_size()) * 4, vk::MemoryKind::Device, "tree scores");
    tree_i_ = vk::Buffer(gpu.ctx, uint64_t(layout.i_size()) * 4, vk::MemoryKind::Device, "tree nodes");
    u_history_ = vk::Buffer(gpu.ctx, uint64_t(1 + tree_.topk * (tree_.steps - 1)) * d.config.layer.hidden_size * 4,
                            vk::MemoryKind::Device, "draft u history");
    tree_draws_ = vk::Buffer(gpu.ctx, uint64_t(M) * 4, vk::MemoryKind::Device, "tree draws");
    if (front_) tree_readback_ = vk::Buffer(gpu.ctx, tree_i_.bytes, vk::MemoryKind::Readback, "split tree nodes");
  }
}

std::unique_ptr<Decoder> make_decoder(ops::Gpu& gpu, const models::TargetModel& target,
                                      const models::Eagle3Model* draft, const DecoderConfig& config,
                                      bool greedy_drafts) {
  auto decoder = std::make_unique<Decoder>(gpu, target, draft, config);
  // The decoder draws only at temperature > 0 (each sequence's own).
  decoder->set_draft_sampling(decoder->speculative() && draws_drafts(decoder->tree().enabled(), greedy_drafts));
  return decoder;
}

bool Decoder::any_running() const {
  return std::any_of(seqs_.begin(), seqs_.end(), [](const Sequence& s) { return s.state == SeqState::Running; });
}

bool Decoder::emit(Sequence& s, int32_t token, const float* logits_row) {
  const GenerationOptions& o = s.options;
  check_row_token(token, s.result.prompt.size() + s.result.tokens.size());
  s.history.push_back(token);
  if (o.logprobs)
    s.result.logprobs.push_back(
        token_logprobs(std::span<const float>(logits_row, target_.config().vocab_size), token, o.logprobs));
  s.result.tokens.push_back(token);
  const bool keep_going = !s.on_token || s.on_token(token);
  if (std::find(o.eos_ids.begin(), o.eos_ids.end(), token) != o.eos_ids.end() && !o.ignore_eos) {
    s.result.stopped_at_eos = true;
    return false;
  }
  return keep_going && s.result.tokens.size() < o.n_predict;
}

void Decoder::finish(Sequence& s) {
  if (mode_ != Mode::Plain) s.stats.total_output_tokens += s.result.tokens.size();
  // Rows computed from image features are not described by their token ids.
  if (!s.options.images) s.reusable.assign(s.history.begin(), s.history.begin() + s.cached);
  s.state = SeqState::Finished;
}

void Decoder::apply(Sequence& s, const Decided& d, const float* logits) {
  const uint32_t V = target_.config().vocab_size;
  if (mode_ == Mode::Plain) {
    s.cached = s.P + 1;  // the pending token's row ran
  } else {
    s.stats.record_round(d.proposed, d.accepted, d.steps);
  }
  if (tap_sink_ && mode_ != Mode::Plain) {
    TapRows t;
    std::vector<float> rows;
    read_tap_rows(out_.taps, rows);
    const uint32_t H3 = 3 * target_.config().hidden_size;
    for (uint32_t i = 0; i <= d.accepted; ++i) {
      t.tokens.push_back(i == 0 ? s.y : d.tokens[i - 1]);
      t.positions.push_back(int32_t(s.P + i));
      const float* row = rows.data() + uint64_t(d.rows[i]) * H3;
      t.hidden.insert(t.hidden.end(), row, row + H3);
    }
    tap_sink_(t);
  }
  // Emit d_1..d_a and the target's own token after them.
  bool running = true;
  for (uint32_t i = 0; i <= d.accepted && running; ++i)
    running = emit(s, d.tokens[i], logits ? logits + uint64_t(d.rows[i]) * V : nullptr);
  if (!running) return finish(s);
  s.c = s.P;
  s.P += d.accepted + 1;
  s.y = s.history[s.P];
  if (mode_ != Mode::Plain) s.cached = s.c + 1;
}

GenerationResult Decoder::take(uint32_t slot, SpecStats& stats) {
  Sequence& s = seqs_.at(slot);
  if (s.state != SeqState::Finished) fail("Decoder::take: slot {} has no finished generation", slot);
  stats.merge(s.stats);
  s.state = SeqState::Free;
  s.on_token = {};
  return std::move(s.result);
}

void Decoder::start(uint32_t slot, std::vector<int32_t> prompt, const GenerationOptions& o, TokenCallback on_token) {
  if (slot >= batch_) fail("Decoder::start: slot {} of {}", slot, batch_);
  Sequence& s = seqs_[slot];
  if (s.state != SeqState::Free) fail("Decoder::start: slot {} is busy", slot);
  check_prompt(prompt, context_, target_.config().vocab_size, o);
  if (batch_ > 1 && (o.images || o.prompt_argmax || o.top_logits))
    fail_setting(Setting::Batch, "batched decoding takes text prompts without prompt reports (images, the prompt "
                                 "argmax and top logits need a batch of 1)");
  if (mode_ == Mode::Tree && draft_sampling_ && !o.sampling.greedy())
    fail("draft sampling is for chain drafting (-k): a tree's children are the draft's top-K tokens");
  if (o.draft_tokens > 0 && mode_ != Mode::Chain)
    fail_setting(Setting::ChainDraftTokens, "a sequence's own draft-token count is for chain drafting");
  if (o.draft_tokens > k_)
    fail_setting(Setting::ChainDraftTokens, "a sequence drafts at most the decoder's {} tokens a round, got {}", k_,
                 o.draft_tokens);
  if (o.logprobs && !logits_readback_)
    logits_readback_ = vk::Buffer(gpu_.ctx, uint64_t(round_rows_) * target_.config().vocab_size * 4,
                                  vk::MemoryKind::Readback, "round logits");
  auto start_time = std::chrono::steady_clock::now();
  // With reuse, restart where the caches stop matching. The draft's row i was computed with
  // token i + 1, so it stays only below the last common token.
  const bool reuse = o.reuse_prefix && !o.images && !o.prompt_argmax;
  const uint32_t same = reuse ? reusable_prefix(prompt, s.reusable) : 0;
  const uint32_t from = draft_ ? (same > 0 ? same - 1 : 0) : same;
  s.reusable.clear();  // the caches change from here on
  s.options = o;
  s.on_token = std::move(on_token);
  s.stats = SpecStats{};
  s.result = GenerationResult{};
  s.result.prompt = prompt;
  s.result.reused_tokens = from;
  s.history = std::move(prompt);
  s.compact_path.clear();
  std::vector<float> last_logits;
  prefill(s, slot, from, last_logits);
  if (o.top_logits) s.result.prompt_top_logits = top_logits(last_logits, o.top_logits);
  s.P = uint32_t(s.history.size());
  s.c = s.P - 1;
  s.cached = s.P;
  s.tap_row = round_rows_ + slot;  // the prefill left position c's taps in the slot's carry row
  s.result.prefill_seconds = seconds_since(start_time);
  s.state = SeqState::Running;
  try {
    const bool running = o.n_predict > 0 && emit(s, s.y, last_logits.data());
    if (!running) finish(s);
  } catch (...) {
    abandon(s);
    throw;
  }
}

void Decoder::abandon(Sequence& s) {
  s.state = SeqState::Free;
  s.on_token = {};
  s.reusable.clear();  // the caches hold rows of a generation that did not finish
  s.compact_path.clear();
}

GenerationResult Decoder::generate(std::vector<int32_t> prompt, const GenerationOptions& options, SpecStats& stats,
                                   const TokenCallback& on_token) {
  start(0, std::move(prompt), options, on_token);
  while (running(0)) round();
  return take(0, stats);
}

void Decoder::round() {
  std::vector<uint32_t> active;
  for (uint32_t i = 0; i < batch_; ++i) {
    Sequence& s = seqs_[i];
    if (s.state != SeqState::Running) continue;
    if (s.P + 1 > context_) {  // no room for another token
      s.result.stopped_at_context = true;
      finish(s);
      continue;
    }
    active.push_back(i);
  }
  if (active.empty()) return;
  // A failed round (a lost device, a non-finite row, a callback that threw) ends the generations
  // in it: their slots are free again, so that the next start reports what is wrong now.
  try {
    if (mode_ == Mode::Tree) {
      tree_round(active[0]);
    } else {
      batch_round(active);
    }
  } catch (...) {
    for (uint32_t i : active) abandon(seqs_[i]);
    throw;
  }
}

void Decoder::run_split_front(models::ForwardPass pass, const int32_t* ids) {
  const auto* up = static_cast<const int32_t*>(upload_.mapped);
  const ops::IntVec t_slots = input(in_.target_slots);
  pass.slots = regions(t_slots);
  front_->replay = replay;  // as the decoder's own rounds
  front_->replay_span = replay_span;
  front_->run(pass, ids ? ids : up + in_.target_ids, up + in_.target_positions,
              batch_ > 1 ? up + in_.target_slots : nullptr, tstate_);
}

void Decoder::submit_round(const RoundShape& shape, uint32_t exact_bound, const RoundRecorder& record) {
  // The earlier parts' submissions come first; a resubmitted last part reads what they left.
  if (front_) run_split_front({shape.plain.rows, exact_bound, shape.plain.logits_from, shape.plain.batch_invariant});
  replay_or_record(shape, exact_bound, record);
}

void Decoder::replay_or_record(const RoundShape& shape, uint32_t exact_bound, const RoundRecorder& record) {
  last_round_ = nullptr;
  if (!replay) {
    record(rec_, exact_bound, /*exact=*/true);
    rec_.submit_and_wait();
    return;
  }
  if (RoundCache::Entry* e = round_cache_.find(shape, exact_bound)) {
    last_round_ = e->rec.get();
    e->rec->resubmit();
    e->rec->wait();
    ++replayed_rounds_;
    return;
  }
  uint32_t max_keys = ops::attention_max_keys(gpu_.ctx, uint32_t(target_.config().head_dim));
  if (draft_) max_keys = std::min(max_keys, ops::attention_max_keys(gpu_.ctx, draft_->config.layer.head_dim));
  const uint32_t kv_bound = replay_kv_bound(exact_bound, replay_span, context_, max_keys);
  RoundCache::Entry& e = round_cache_.entry_for(gpu_.ctx, shape);
  last_round_ = e.rec.get();
  e.recording = 0;  // until this recording has been submitted
  record(*e.rec, kv_bound, /*exact=*/false);
  e.rec->submit_and_wait();
  e.recording = e.rec->recordings();
  e.shape = shape;
  e.kv_bound = kv_bound;
}

void Decoder::read_tap_rows(uint32_t at, std::vector<float>& out) const {
  const auto* words = static_cast<const float*>(readback_.mapped);
  out.assign(words + at, words + at + uint64_t(max_rows_) * 3 * target_.config().hidden_size);
}

double Decoder::time_pass(bool draft_pass, uint32_t rows, uint32_t repeats) {
  if (rows == 0 || rows > max_rows_ || rows >= context_) fail("time_pass: {} rows do not fit", rows);
  if (draft_pass && !draft_) fail("time_pass: no draft");
  for (Sequence& s : seqs_) s.reusable.clear();
  auto* up = static_cast<int32_t*>(upload_.mapped);
  for (uint32_t i = 0; i < rows; ++i) {
    up[in_.target_ids + i] = up[in_.draft_ids + i] = 0;
    up[in_.target_positions + i] = up[in_.draft_positions + i] = int32_t(i);
  }
  std::vector<double> times;
  for (uint32_t r = 0; r <= repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    // A split target's verify pass starts on the earlier devices, hops included.
    const models::ForwardPass target_pass{rows, rows, 0, /*batch_invariant=*/true, draft_ ? &prefill_taps_ : nullptr,
                                          /*argmax=*/true};
    if (front_ && !draft_pass) run_split_front(target_pass);
    ops::OpContext oc{gpu_, rec_};
    rec_.begin();
    rec_.copy(vk::BufferRange(upload_), vk::BufferRange(inputs_), "inputs");
    if (!draft_pass) {
      rec_.copy(vk::BufferRange(inputs_, in_.target_ids * 4ull, rows * 4), vk::BufferRange(tstate_.ids, 0, rows * 4),
                "inputs");
      rec_.copy(vk::BufferRange(inputs_, in_.target_positions * 4ull, rows * 4),
                vk::BufferRange(tstate_.positions, 0, rows * 4), "inputs");
      models::record_target_forward(oc, target_, tstate_, target_pass);
    } else {
      models::DraftPass pass;
      pass.rows = rows;
      pass.from_taps = true;
      pass.taps = prefill_taps_.out;
      pass.ids = input(in_.draft_ids);
      pass.positions = input(in_.draft_positions);
      pass.kv_len = rows;
      pass.out_token = ops::IntVec{round_ids_, RoundIds{batch_}.draft(0, 0)};
      models::record_eagle3_forward(oc, *draft_, dstate_, {target_.embed(), target_.lm_head()}, pass);
    }
    rec_.submit_and_wait();
    if (r > 0) times.push_back(seconds_since(t0));
  }
  std::sort(times.begin(), times.end());
  return times.empty() ? 0.0 : times[times.size() / 2];
}

}  // namespace eaglevk::engine
