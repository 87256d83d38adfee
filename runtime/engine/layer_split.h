#pragma once
// A target split across devices (models::TargetModel::earlier): where its layers go, and the
// passes of the parts before the last. Each earlier part runs its layers in a submission of its
// own on its own device and leaves the rows' residual stream in a host-visible staging buffer,
// which the host copies into the next part's (one hop per device boundary per pass); the last
// part, on the decoder's device, starts from it, computes the logits and samples as an unsplit
// model does. The kernels and their order are those of one device, so the bits are too.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "models/target.h"
#include "runtime/vk/recorder.h"

namespace eaglevk::engine {

// Contiguous layer ranges, in device order, in proportion to `shares` (each > 0): device d
// ends where the running sum of shares, as a fraction of their total, reaches, rounded to the
// nearest layer; every device gets at least one layer. Fails naming the problem when there are
// more devices than layers or a share is not positive.
std::vector<models::LayerRange> place_layers(uint32_t layers, std::span<const double> shares);

// What crossed device boundaries: hops (one per boundary per pass) and their bytes.
struct HopStats {
  uint64_t passes = 0, hops = 0, bytes = 0;
  uint64_t resubmitted = 0;  // earlier parts' passes that resubmitted their last recording
};

// What a tree round adds to a split pass (host arrays): the node rows' ancestor table, which
// each earlier device's attention reads from a copy of its own, and the last tree's accepted
// path, which each device moves to consecutive rows of its own KV cache first.
struct SplitTree {
  const int32_t* table = nullptr;  // [rows][stride] ancestor nodes (ops::TreePath); null: no tree
  uint32_t stride = 0;
  const int32_t* compact = nullptr;  // [len, base, path...] (ops::row_compact); null: nothing to move
  uint32_t compact_max = 0;          // the most path entries
};

class SplitFront {
 public:
  // States for every earlier part of `target` (whose own state, on the decoder's device, holds
  // the last part's layers), sized as that state: `capacity` cache rows, `max_rows` rows a pass.
  // `context`: positions per sequence, the most a replayed recording's attention bound reaches.
  SplitFront(const models::TargetModel& target, uint32_t capacity, uint32_t context, uint32_t max_rows,
             bool arena_reuse);
  ~SplitFront();

  // Runs `pass` through the earlier parts: ids, positions and, with pass.slots, the cache rows
  // of its rows (host arrays of pass.rows each), and leaves the residual stream entering the
  // last part's first layer in last.hidden_in, with pass.taps the tap rows of the earlier
  // parts' layers beside it. With pass.tree, `tree` gives its table (pass.tree's base is
  // staged with it, so a resubmitted recording reads each pass's own).
  // Image rows (pass.embeddings, features on the first device) enter at the first part.
  void run(const models::ForwardPass& pass, const int32_t* ids, const int32_t* positions, const int32_t* slots,
           models::TargetState& last, const SplitTree& tree = {});

  const HopStats& stats() const { return stats_; }
  // Resubmit a part's last recording when the next pass has its shape (tree passes included:
  // their words, root position too, reach the device through staging written before every
  // submission) and fits its attention bound, as the decoder replays its own rounds
  // (vk::replay_from_env).
  bool replay = vk::replay_from_env();
  uint32_t replay_span = 512;  // positions a recording serves past its own pass
  size_t parts() const { return stages_.size() + 1; }

 private:
  struct Stage {
    ops::Gpu* gpu = nullptr;
    const models::TargetModel* model = nullptr;
    models::TargetState state;
    vk::Buffer inputs;  // Upload, int32 [3][max_rows]: ids, positions, cache rows
    vk::Buffer slots;   // Device, int32 [max_rows]: the cache rows, as the forward reads them
    vk::Buffer taps;    // Device, f32 [max_rows, kMaxHopTaps H]: this part's tap rows of a pass
    models::TapRequest tap_request;  // the pass's tap layers into `taps`
    // A tree round's words (SplitTree: the compact path, then the ancestor table, then the
    // tree's root position), staged and on the device; grown on first need.
    vk::Buffer tree_upload, tree_words;
    // What the recorder last recorded, when a later pass may resubmit it: its shape and the
    // recorder's count then (vk::Recorder::recordings).
    struct Recorded {
      uint32_t rows = 0, kv_bound = 0, tap_stride = 0;
      uint32_t tree_stride = 0;  // 0: no tree
      uint32_t compact_max = 0;
      bool compact = false;  // a compact path was moved first
      bool batch_invariant = false, slots = false;
      std::vector<uint32_t> tap_layers;
      uint64_t recording = 0;
    } last;
    std::unique_ptr<vk::Recorder> rec;
  };
  void hop(size_t i, const models::ForwardPass& pass, models::TargetState& last_part, uint64_t bytes);
  static bool upload_tree(Stage& st, const models::ForwardPass& pass, const SplitTree& tree);
  static void record_tree(Stage& st, const models::ForwardPass& pass, const SplitTree& tree, ops::OpContext& oc,
                          ops::TreePath& path);
  static bool same_shape(const Stage::Recorded& last, const models::ForwardPass& pass, const SplitTree& tree,
                         bool slots);
  std::vector<Stage> stages_;
  uint32_t max_rows_ = 0, hidden_ = 0, context_ = 0, max_keys_ = 0;
  HopStats stats_;
};

}  // namespace eaglevk::engine
