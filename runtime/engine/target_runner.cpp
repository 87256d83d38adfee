#include "runtime/engine/target_runner.h"

#include <cstring>

#include <eaglevk/error.h>

namespace eaglevk::engine {

TargetRunner::TargetRunner(ops::Gpu& gpu, const models::TargetModel& model, uint32_t context, uint32_t max_rows,
                           bool arena_reuse)
    : gpu_(gpu),
      model_(model),
      context_(context),
      state_(models::make_target_state(gpu.ctx, model, context, max_rows, arena_reuse)),
      rec_(gpu.ctx),
      upload_(gpu.ctx, uint64_t(max_rows) * 8, vk::MemoryKind::Upload, "pass inputs"),
      readback_(gpu.ctx, readback_bytes(max_rows, model.config().vocab_size, 1), vk::MemoryKind::Readback,
                "pass outputs") {}

// Argmax ids for every row, then `logits_rows` rows of logits: one row covers decoding; a
// request reading more (teacher forcing, prompt scoring) grows the buffer once.
uint64_t TargetRunner::readback_bytes(uint32_t max_rows, uint32_t vocab, uint32_t logits_rows) {
  return uint64_t(max_rows) * 4 + uint64_t(logits_rows) * vocab * 4;
}

void TargetRunner::run(const PassRequest& req, PassOutput& out) {
  const uint32_t rows = uint32_t(req.ids.size());
  if (rows == 0 || rows > state_.max_rows) fail("a pass of {} tokens (at most {})", rows, state_.max_rows);
  if (req.start + rows > context_)
    fail("positions {}..{} exceed the context of {} tokens", req.start, req.start + rows - 1, context_);
  if (cached_tokens_.size() > req.start) cached_tokens_.resize(req.start);  // rows from start on are rewritten
  const int32_t vocab = model_.config().vocab_size;
  for (int32_t id : req.ids)
    if (id < 0 || id >= vocab) fail("token id {} is outside the vocabulary of {}", id, vocab);

  auto* up = static_cast<int32_t*>(upload_.mapped);
  std::memcpy(up, req.ids.data(), rows * 4);
  for (uint32_t i = 0; i < rows; ++i) up[state_.max_rows + i] = int32_t(req.start + i);

  rec_.begin();
  rec_.copy(vk::BufferRange(upload_, 0, rows * 4), vk::BufferRange(state_.ids, 0, rows * 4), "ids");
  rec_.copy(vk::BufferRange(upload_, uint64_t(state_.max_rows) * 4, rows * 4),
            vk::BufferRange(state_.positions, 0, rows * 4), "positions");
  ops::OpContext oc{gpu_, rec_};
  const bool sampled = req.sampling && !req.sampling->greedy();
  models::ForwardPass pass{rows, req.start + rows, req.logits_from, req.batch_invariant, req.taps, !sampled};
  pass.embeddings = req.embeddings;
  models::record_target_forward(oc, model_, state_, pass);
  const uint32_t n_logits = rows - req.logits_from;
  const uint64_t logits_bytes = uint64_t(n_logits) * vocab * 4;
  if (req.read_logits && readback_.bytes < readback_bytes(state_.max_rows, vocab, n_logits))
    readback_ = vk::Buffer(gpu_.ctx, readback_bytes(state_.max_rows, vocab, n_logits), vk::MemoryKind::Readback,
                           "pass outputs");
  if (n_logits && sampled)
    ops::sample(oc, ops::Act(state_.arena[state_.logits], vocab), n_logits, vocab, nullptr, ops::IntVec{state_.out_ids},
                ops::IntVec{state_.accept}, device_params(*req.sampling, req.start + req.logits_from + 1));
  if (n_logits) {
    rec_.copy(vk::BufferRange(state_.out_ids, 0, n_logits * 4), vk::BufferRange(readback_, 0, n_logits * 4), "argmax");
    if (req.read_logits)
      rec_.copy(state_.arena[state_.logits].sub(0, logits_bytes),
                vk::BufferRange(readback_, uint64_t(state_.max_rows) * 4, logits_bytes), "logits");
  }
  rec_.submit_and_wait();

  const auto* back = static_cast<const uint8_t*>(readback_.mapped);
  out.argmax.resize(n_logits);
  std::memcpy(out.argmax.data(), back, n_logits * 4);
  out.logits.clear();
  if (req.read_logits) {
    out.logits.resize(size_t(n_logits) * vocab);
    std::memcpy(out.logits.data(), back + uint64_t(state_.max_rows) * 4, logits_bytes);
  }
}

}  // namespace eaglevk::engine
