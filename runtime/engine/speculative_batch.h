#pragma once
// Batched chain speculation (eval --batch): up to B sequences decode together, each in its own
// rows of the target's and the draft's KV caches. A round is one submission for every running
// sequence: one catch-up draft pass over all their new rows, k - 1 draft steps of one row per
// sequence, one verify pass over all their k + 1 rows and one sampling dispatch. A new
// prompt's prefill is its own submission, between rounds, in the same chunks as
// SpeculativeDecoder's. Every kernel computes a row the same way whichever rows share its
// dispatch (matrix-vector kernels at any row count, attention from the row's own position
// over its own region, random draws keyed by position), so each sequence's tokens and
// acceptance equal a SpeculativeDecoder's on it alone, to the bit; the weights are read once
// per round for all of them.
#include <cstdint>
#include <vector>

#include "models/eagle3.h"
#include "models/target.h"
#include "runtime/engine/generate.h"
#include "runtime/engine/spec_stats.h"
#include "runtime/ops/gpu.h"

namespace eaglevk::engine {

// The most sequences one BatchDecoder runs together.
constexpr uint32_t kMaxBatch = 64;

class BatchDecoder {
 public:
  BatchDecoder(ops::Gpu& gpu, const models::TargetModel& target, const models::Eagle3Model& draft, uint32_t context,
               uint32_t k, uint32_t batch, bool arena_reuse = vk::arena_reuse_from_env());

  uint32_t batch() const { return batch_; }
  uint32_t k() const { return k_; }
  // At temperature > 0, drafts drawn from the draft's own distribution (see SpeculativeDecoder).
  void set_draft_sampling(bool on) { draft_sampling_ = on; }

  // Starts a generation in a free slot: checks the prompt and prefills it (one submission per
  // chunk); the first token is emitted at once. Sequences that run together share their
  // sampling parameters. With options.reuse_prefix it continues from the caches the slot's
  // previous generation left (a conversation's next turn). Images, the prompt argmax and top
  // logits are SpeculativeDecoder's.
  void start(uint32_t slot, std::vector<int32_t> prompt, const GenerationOptions& options,
             TokenCallback on_token = {});
  bool running(uint32_t slot) const { return slots_.at(slot).state == State::Running; }
  bool finished(uint32_t slot) const { return slots_.at(slot).state == State::Finished; }
  bool any_running() const;
  // One round of every running slot (nothing when none runs).
  void round();
  // A finished slot's generation; its statistics are added to `stats` and the slot is free
  // again (its caches stay for reuse_prefix). Its decode_seconds are its share of each round
  // it took part in (the round's time over the sequences in it).
  GenerationResult take(uint32_t slot, SpecStats& stats);

 private:
  enum class State { Free, Running, Finished };
  struct Slot {
    State state = State::Free;
    GenerationOptions options;
    TokenCallback on_token;
    GenerationResult result;
    SpecStats stats;
    std::vector<int32_t> history;   // every token whose position is decided
    std::vector<int32_t> reusable;  // tokens of the rows both caches hold (reuse_prefix)
    uint32_t P = 0;                 // position of the pending token y
    uint32_t c = 0;                 // first position the draft has not caught up on
    int32_t y = 0;
    uint32_t tap_row = 0;           // round_taps_ row of position c's taps
  };
  // int32 slots of the upload buffer (and of its device copy).
  struct Layout {
    uint32_t t_ids, t_pos, t_slots;            // target rows
    uint32_t d_ids, d_pos, d_slots;            // draft catch-up rows, then the steps' rows
    uint32_t tap_index, proposal_rows, head;   // head: -1, then each sequence's pending token
    uint32_t verify_ids, verify_drafts, q_index, draw_pos;
    uint32_t size;
  };

  void prefill(Slot& s, uint32_t slot, uint32_t from, std::vector<float>& last_logits);
  bool emit(Slot& s, int32_t token);  // false: the generation stops
  void finish(Slot& s);
  void copy_inputs();
  ops::IntVec input(uint32_t at) const { return ops::IntVec{vk::BufferRange(inputs_), at}; }

  ops::Gpu& gpu_;
  const models::TargetModel& target_;
  const models::Eagle3Model& draft_;
  uint32_t context_, k_, batch_;
  uint32_t round_rows_;    // B (k + 1): a round's most verify (and catch-up) rows
  uint32_t max_rows_;      // the larger of a prefill chunk and a round
  uint32_t draft_region_;  // draft cache rows per sequence: the context and the last steps' k
  Layout layout_;
  models::TargetState tstate_;
  models::Eagle3State dstate_;
  models::TapRequest prefill_taps_, round_taps_;  // [max_rows], [round rows + B] x 3 H
  vk::Buffer prefill_tap_rows_, round_tap_rows_, catch_taps_;
  vk::Buffer round_ids_;      // int32: -1, the B pending tokens, then k x B draft tokens (step-major)
  vk::Buffer verify_drafts_;  // int32 [round rows]: each row's draft, -1 on bonus rows
  vk::Buffer draft_q_, q_verify_, draft_accept_, t2d_;  // draft sampling
  vk::Buffer upload_, inputs_, readback_, logits_readback_;
  vk::Recorder rec_;
  bool draft_sampling_ = false;
  std::vector<Slot> slots_;
};

}  // namespace eaglevk::engine
