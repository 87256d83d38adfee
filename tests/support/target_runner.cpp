#include "support/target_runner.h"

#include <algorithm>
#include <cstring>

#include <eaglevk/error.h>

#include "runtime/engine/replay_bound.h"

namespace eaglevk::testing {

TargetRunner::TargetRunner(ops::Gpu& gpu, const models::TargetModel& model, uint32_t context, uint32_t max_rows,
                           bool arena_reuse)
    : gpu_(gpu),
      model_(model),
      context_(context),
      state_(models::make_target_state(gpu, model, context, max_rows, arena_reuse)),
      rec_(gpu.ctx),
      upload_(gpu.ctx, uint64_t(max_rows) * 8, vk::MemoryKind::Upload, "pass inputs"),
      readback_(gpu.ctx, readback_bytes(max_rows, model.config().vocab_size, 1), vk::MemoryKind::Readback,
                "pass outputs") {}

// Argmax ids for every row, then `logits_rows` rows of logits: one row covers decoding; a
// request reading more (teacher forcing, prompt scoring) grows the buffer once.
uint64_t TargetRunner::readback_bytes(uint32_t max_rows, uint32_t vocab, uint32_t logits_rows) {
  return uint64_t(max_rows) * 4 + uint64_t(logits_rows) * vocab * 4;
}

bool TargetRunner::replays(const PassRequest& req, bool sampled) const {
  const RecordedPass& r = recorded_;
  return replay && r.recording != 0 && r.recording == rec_.recordings() && !req.taps && !req.embeddings &&
         r.rows == req.ids.size() && r.logits_from == req.logits_from && r.batch_invariant == req.batch_invariant &&
         r.read_logits == req.read_logits && r.sampled == sampled &&
         (!sampled || r.sampling == *req.sampling) && req.start + r.rows <= r.kv_bound;
}

void TargetRunner::run(const PassRequest& req, PassOutput& out) {
  const uint32_t rows = uint32_t(req.ids.size());
  if (rows == 0 || rows > state_.max_rows) fail("a pass of {} tokens (at most {})", rows, state_.max_rows);
  if (req.start + rows > context_)
    fail("positions {}..{} exceed the context of {} tokens", req.start, req.start + rows - 1, context_);
  const int32_t vocab = model_.config().vocab_size;
  for (int32_t id : req.ids)
    if (id < 0 || id >= vocab) fail("token id {} is outside the vocabulary of {}", id, vocab);

  // The pass's inputs, which its commands copy to the device whether recorded now or before.
  auto* up = static_cast<int32_t*>(upload_.mapped);
  std::memcpy(up, req.ids.data(), rows * 4);
  for (uint32_t i = 0; i < rows; ++i) up[state_.max_rows + i] = int32_t(req.start + i);

  const bool sampled = req.sampling && !req.sampling->greedy();
  const uint32_t n_logits = rows - req.logits_from;
  const uint64_t logits_bytes = uint64_t(n_logits) * vocab * 4;
  if (replays(req, sampled)) {
    rec_.resubmit();
    rec_.wait();
    ++replayed_passes_;
  } else {
    record(req, sampled);
    rec_.submit_and_wait();
  }

  const auto* back = static_cast<const uint8_t*>(readback_.mapped);
  out.argmax.resize(n_logits);
  std::memcpy(out.argmax.data(), back, n_logits * 4);
  out.logits.clear();
  if (req.read_logits) {
    out.logits.resize(size_t(n_logits) * vocab);
    std::memcpy(out.logits.data(), back + uint64_t(state_.max_rows) * 4, logits_bytes);
  }
}

void TargetRunner::record(const PassRequest& req, bool sampled) {
  const uint32_t rows = uint32_t(req.ids.size());
  const int32_t vocab = model_.config().vocab_size;
  recorded_.recording = 0;
  // Taps and image rows point into buffers their caller may change: those passes are recorded
  // each time, with the exact attention length.
  const bool replayable = !req.taps && !req.embeddings;
  uint32_t kv_bound = req.start + rows;
  if (replayable)
    kv_bound = engine::replay_kv_bound(kv_bound, replay_span, context_,
                               ops::attention_max_keys(gpu_.ctx, uint32_t(model_.config().head_dim)));

  rec_.begin();
  rec_.copy(vk::BufferRange(upload_, 0, rows * 4), vk::BufferRange(state_.ids, 0, rows * 4), "ids");
  rec_.copy(vk::BufferRange(upload_, uint64_t(state_.max_rows) * 4, rows * 4),
            vk::BufferRange(state_.positions, 0, rows * 4), "positions");
  ops::OpContext oc{gpu_, rec_};
  models::ForwardPass pass{rows, kv_bound, req.logits_from, req.batch_invariant, req.taps, !sampled};
  pass.embeddings = req.embeddings;
  models::record_target_forward(oc, model_, state_, pass);
  const uint32_t n_logits = rows - req.logits_from;
  const uint64_t logits_bytes = uint64_t(n_logits) * vocab * 4;
  if (req.read_logits && readback_.bytes < readback_bytes(state_.max_rows, vocab, n_logits))
    readback_ = vk::Buffer(gpu_.ctx, readback_bytes(state_.max_rows, vocab, n_logits), vk::MemoryKind::Readback,
                           "pass outputs");
  // Row r decides the token at position start + logits_from + r + 1, read from the positions
  // the pass copied in (1 + positions[logits_from + r]), so that a replay draws for its own.
  const ops::IntVec row_positions{state_.positions, req.logits_from};
  if (n_logits && sampled)
    ops::sample(oc, ops::Act(state_.arena[state_.logits], vocab), n_logits, vocab, nullptr, ops::IntVec{state_.out_ids},
                ops::IntVec{state_.accept}, engine::device_params(*req.sampling, 1), ops::AcceptRule::Correct, nullptr, 0,
                &row_positions);
  if (n_logits) {
    rec_.copy(vk::BufferRange(state_.out_ids, 0, n_logits * 4), vk::BufferRange(readback_, 0, n_logits * 4), "argmax");
    if (req.read_logits)
      rec_.copy(state_.arena[state_.logits].sub(0, logits_bytes),
                vk::BufferRange(readback_, uint64_t(state_.max_rows) * 4, logits_bytes), "logits");
  }
  if (replayable)
    recorded_ = {rec_.recordings(), rows,   req.logits_from, kv_bound, req.batch_invariant, req.read_logits,
                 sampled,           sampled ? *req.sampling : engine::SamplingParams{}};
}

}  // namespace eaglevk::testing
