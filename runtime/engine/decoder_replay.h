#pragma once
// Record once, resubmit many times: a decode step or a round differs from an earlier one of
// the same shape only in values its commands read from device buffers (tokens, positions, the
// draws' positions, each sequence's sampling settings, a tree's root and the last tree's
// accepted path), so the commands recorded
// for one serve the others up to the attention bound they were recorded with (a row never
// reads past its own position, so a larger bound gives the same bits).
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "runtime/ops/ops.h"
#include "runtime/vk/recorder.h"

namespace eaglevk::engine {

// What a plain pass's commands depend on besides device buffers: a prefill chunk without a
// draft or image rows, or a plain round of one row per sequence.
struct PlainPassShape {
  uint32_t rows = 0, logits_from = 0;
  bool batch_invariant = false;
  bool last_logits = false;   // the last logits row to the readback (prompt reports)
  bool round_logits = false;  // every logits row to the logits readback (logprobs)
  bool sampled = false;       // some row samples at T > 0: the sampling kernel decides every row
  bool operator==(const PlainPassShape&) const = default;
};

// What a chain round's commands depend on besides device buffers.
struct BatchRoundShape {
  std::vector<uint32_t> catch_rows;  // per running sequence, in row order
  std::vector<uint32_t> ks;          // draft tokens of each sequence
  uint32_t steps = 0;                // draft steps: the largest k
  bool logprobs = false, taps_out = false, sampled_drafts = false;
  ops::AcceptRule rule = ops::AcceptRule::Correct;
  bool operator==(const BatchRoundShape&) const = default;
};

// What a tree round's commands depend on besides device buffers.
struct TreeRoundShape {
  uint32_t catch_rows = 0, k = 0, steps = 0, nodes = 0;
  bool logprobs = false, taps_out = false, sampled = false;
  bool operator==(const TreeRoundShape&) const = default;
};

// A round's commands: all of them, or (a split target) those up to the draft tokens' read-back,
// or those from the verify pass on. A split round's two parts are two submissions, each
// recorded and resubmitted on its own.
enum class RoundPart { Whole, Drafts, Verify };

struct RoundShape {
  PlainPassShape plain;
  BatchRoundShape batch;
  TreeRoundShape tree;
  RoundPart part = RoundPart::Whole;
  bool operator==(const RoundShape&) const = default;
};

// Records a round into `rec` with attention bounded by kv_bound (exact: the round's own).
using RoundRecorder = std::function<void(vk::Recorder& rec, uint32_t kv_bound, bool exact)>;

// The recordings of the last few shapes, each in its own recorder.
class RoundCache {
 public:
  struct Entry {
    std::unique_ptr<vk::Recorder> rec;
    uint64_t recording = 0;  // rec->recordings() once recorded; 0: nothing replayable
    RoundShape shape;
    uint32_t kv_bound = 0;
    // Whether the commands in rec are a round of this shape that serves exact_bound.
    bool serves(const RoundShape& s, uint32_t exact_bound) const {
      return recording != 0 && recording == rec->recordings() && shape == s && exact_bound <= kv_bound;
    }
  };
  // The entry whose recording serves the round, or null.
  Entry* find(const RoundShape& shape, uint32_t exact_bound);
  // The entry to record a round of this shape into: the shape's own, else a new one, else
  // (past kMaxEntries) the oldest.
  Entry& entry_for(const vk::Context& ctx, const RoundShape& shape);

 private:
  // A chain of k has k + 1 shapes at batch 1 and a tree S + 1, twice that on a split target
  // (two parts a round): they all fit. Batches have many more (each sequence's catch-up rows),
  // and rarely repeat one.
  static constexpr size_t kMaxEntries = 48;
  std::vector<Entry> entries_;
  size_t next_ = 0;  // the oldest entry, replaced next
};

}  // namespace eaglevk::engine
