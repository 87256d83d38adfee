#include "runtime/engine/layer_split.h"

#include <cmath>
#include <cstring>

#include <eaglevk/error.h>

#include "runtime/engine/replay_bound.h"
#include "runtime/ops/tree.h"

namespace eaglevk::engine {

std::vector<models::LayerRange> place_layers(uint32_t layers, std::span<const double> shares) {
  const size_t n = shares.size();
  if (n == 0) fail("a layer split needs at least one device");
  if (n > layers) fail("{} devices for a model of {} layers: every device must hold at least one layer", n, layers);
  double total = 0;
  for (size_t d = 0; d < n; ++d) {
    if (!(shares[d] > 0) || !std::isfinite(shares[d]))
      fail("device {}'s share of the layers is {}: each share must be a positive number", d, shares[d]);
    total += shares[d];
  }
  std::vector<models::LayerRange> ranges(n);
  double sum = 0;
  uint32_t first = 0;
  for (size_t d = 0; d < n; ++d) {
    sum += shares[d];
    const uint32_t left_after = uint32_t(n - 1 - d);  // devices after this one, one layer each at least
    uint32_t end = d + 1 == n ? layers : uint32_t(std::llround(layers * (sum / total)));
    end = std::clamp(end, first + 1, layers - left_after);
    ranges[d] = {first, end};
    first = end;
  }
  return ranges;
}

SplitFront::SplitFront(const models::TargetModel& target, uint32_t capacity, uint32_t context, uint32_t max_rows,
                       bool arena_reuse)
    : max_rows_(max_rows), hidden_(uint32_t(target.config().hidden_size)), context_(context), max_keys_(UINT32_MAX) {
  for (const models::TargetPart& part : target.earlier) {
    Stage st;
    st.gpu = part.gpu;
    st.model = part.model.get();
    const vk::Context& ctx = part.gpu->ctx;
    st.state = models::make_target_state(*part.gpu, *part.model, capacity, max_rows, arena_reuse);
    st.inputs = vk::Buffer(ctx, uint64_t(max_rows) * 3 * 4, vk::MemoryKind::Upload, "split inputs");
    st.slots = vk::Buffer(ctx, uint64_t(max_rows) * 4, vk::MemoryKind::Device, "split slots");
    st.taps = vk::Buffer(ctx, uint64_t(max_rows) * models::kMaxHopTaps * hidden_ * 4, vk::MemoryKind::Device,
                         "split taps");
    st.tap_request.layers.reserve(models::kMaxHopTaps);
    st.rec = std::make_unique<vk::Recorder>(ctx);
    max_keys_ = std::min(max_keys_, ops::attention_max_keys(ctx, uint32_t(target.config().head_dim)));
    stages_.push_back(std::move(st));
  }
}

SplitFront::~SplitFront() = default;

namespace {

// Where a tree pass's staged words lie: the compact path, the ancestor table, the root position.
struct TreeWords {
  uint64_t compact = 0, table = 0;
  bool root_word = false;
  uint64_t root() const { return compact + table; }
  uint64_t bytes() const { return (root() + (root_word ? 1 : 0)) * 4; }
};

TreeWords tree_words_of(const models::ForwardPass& pass, const SplitTree& tree) {
  return {tree.compact ? 2 + tree.compact_max : 0, pass.tree ? uint64_t(pass.rows) * tree.stride : 0,
          pass.tree != nullptr};
}

}  // namespace

// The words of a tree pass on one device, staged before every submission, replayed or not:
// [len, base, path...] of the accepted path to compact, the ancestor table, the root position.
// True when the buffers grew, which the last recording no longer reads.
bool SplitFront::upload_tree(Stage& st, const models::ForwardPass& pass, const SplitTree& tree) {
  const TreeWords w = tree_words_of(pass, tree);
  if (w.bytes() == 0) return false;
  const bool grown = st.tree_words.bytes < w.bytes();
  if (grown) {
    const vk::Context& ctx = st.gpu->ctx;
    st.tree_upload = vk::Buffer(ctx, w.bytes(), vk::MemoryKind::Upload, "split tree words");
    st.tree_words = vk::Buffer(ctx, w.bytes(), vk::MemoryKind::Device, "split tree words");
  }
  auto* up = static_cast<int32_t*>(st.tree_upload.mapped);
  if (w.compact) std::memcpy(up, tree.compact, w.compact * 4);
  if (w.table) std::memcpy(up + w.compact, tree.table, w.table * 4);
  if (pass.tree) up[w.root()] = int32_t(pass.tree->base);
  return grown;
}

// The recorded part of a tree pass: the staged words to the device, the compaction, the path.
void SplitFront::record_tree(Stage& st, const models::ForwardPass& pass, const SplitTree& tree, ops::OpContext& oc,
                             ops::TreePath& path) {
  const TreeWords w = tree_words_of(pass, tree);
  if (w.bytes() == 0) return;
  oc.rec.copy(vk::BufferRange(st.tree_upload, 0, w.bytes()), vk::BufferRange(st.tree_words, 0, w.bytes()),
              "tree words");
  if (w.compact) {
    // The last tree's accepted path to consecutive rows of this device's layers, as the last
    // device does for its own; row_compact reads the length and base from the words.
    const ops::IntVec compact{st.tree_words, 0};
    for (uint32_t layer = 0; layer < uint32_t(st.state.k_cache.size()); ++layer) {
      if (!st.state.k_cache[layer]) continue;
      const ops::KvLayer kv = st.state.kv_layer(layer);
      ops::row_compact(oc, compact, tree.compact_max, kv.k, &kv.v, st.state.kv_dim / 2, "tree_compact_kv");
    }
  }
  // The root position is read on the device (base_slot), so the recording serves any round.
  if (pass.tree)
    path = ops::TreePath{vk::BufferRange(st.tree_words), uint32_t(w.compact), tree.stride, pass.tree->base,
                         int32_t(w.root())};
}

// Whether `last` was recorded for a pass of this one's shape (its attention bound aside).
bool SplitFront::same_shape(const Stage::Recorded& last, const models::ForwardPass& pass, const SplitTree& tree,
                            bool slots) {
  const uint32_t tap_stride = pass.taps ? pass.taps->out.stride : 0;
  return last.rows == pass.rows && last.batch_invariant == pass.batch_invariant && last.slots == slots &&
         last.tap_stride == tap_stride && (!pass.taps || last.tap_layers == pass.taps->layers) &&
         last.tree_stride == (pass.tree ? tree.stride : 0) && last.compact == (tree.compact != nullptr) &&
         last.compact_max == (tree.compact ? tree.compact_max : 0);
}

void SplitFront::run(const models::ForwardPass& pass, const int32_t* ids, const int32_t* positions,
                     const int32_t* slots, models::TargetState& last_part, const SplitTree& tree) {
  if (pass.tree && !tree.table) fail("a split tree pass needs its ancestor table on the host");
  if (pass.tree && tree.stride == 0) fail("a split tree pass needs its ancestor table's stride");
  if (pass.rows > max_rows_) fail("a split pass of {} rows exceeds the {} its states hold", pass.rows, max_rows_);
  const uint64_t words = pass.rows;
  const uint64_t hop_bytes = uint64_t(pass.rows) * (hidden_ + (pass.taps ? pass.taps->out.stride : 0)) * 4;
  for (size_t i = 0; i < stages_.size(); ++i) {
    Stage& st = stages_[i];
    auto* in = static_cast<int32_t*>(st.inputs.mapped);
    std::memcpy(in, ids, words * 4);
    std::memcpy(in + max_rows_, positions, words * 4);
    if (slots) std::memcpy(in + 2 * max_rows_, slots, words * 4);
    Stage::Recorded& last = st.last;
    if (upload_tree(st, pass, tree)) last.recording = 0;
    vk::Recorder& rec = *st.rec;
    // Its last recording serves this pass when nothing else was recorded since, the shape is the
    // same and the attention bound reaches (a row never reads past its own position). Image rows
    // (the first part's features) are this pass's alone: never replayed.
    const bool replayable = replay && !pass.embeddings;
    if (replayable && last.recording && last.recording == rec.recordings() && pass.kv_len <= last.kv_bound &&
        same_shape(last, pass, tree, slots != nullptr)) {
      rec.resubmit();
      rec.wait();
      ++stats_.resubmitted;
      hop(i, pass, last_part, hop_bytes);
      continue;
    }
    ops::OpContext oc{*st.gpu, rec};
    rec.begin();
    if (i == 0)  // only the first part embeds the tokens
      rec.copy(vk::BufferRange(st.inputs, 0, words * 4), vk::BufferRange(st.state.ids, 0, words * 4), "inputs");
    rec.copy(vk::BufferRange(st.inputs, max_rows_ * 4ull, words * 4), vk::BufferRange(st.state.positions, 0, words * 4),
             "inputs");
    const ops::IntVec stage_slots{st.slots};
    models::ForwardPass p = pass;
    if (replayable) p.kv_len = replay_kv_bound(pass.kv_len, replay_span, context_, max_keys_);
    ops::TreePath tree_path;
    record_tree(st, pass, tree, oc, tree_path);
    if (pass.tree) p.tree = &tree_path;
    if (pass.taps) {
      // The same layers into this device's own rows, laid out as the caller's.
      st.tap_request.layers.assign(pass.taps->layers.begin(), pass.taps->layers.end());
      st.tap_request.out = ops::Act(st.taps, pass.taps->out.stride);
      p.taps = &st.tap_request;
    }
    if (slots) {
      rec.copy(vk::BufferRange(st.inputs, max_rows_ * 8ull, words * 4), vk::BufferRange(st.slots, 0, words * 4),
               "inputs");
      p.slots = &stage_slots;
    }
    models::record_target_forward(oc, *st.model, st.state, p);
    rec.submit_and_wait();
    last.recording = 0;
    if (replayable) {
      last.rows = pass.rows;
      last.kv_bound = p.kv_len;
      last.tap_stride = pass.taps ? pass.taps->out.stride : 0;
      last.tree_stride = pass.tree ? tree.stride : 0;
      last.compact = tree.compact != nullptr;
      last.compact_max = tree.compact ? tree.compact_max : 0;
      last.batch_invariant = pass.batch_invariant;
      last.slots = slots != nullptr;
      if (pass.taps) last.tap_layers.assign(pass.taps->layers.begin(), pass.taps->layers.end());
      last.recording = rec.recordings();
    }
    hop(i, pass, last_part, hop_bytes);
  }
  ++stats_.passes;
}

void SplitFront::hop(size_t i, const models::ForwardPass& pass, models::TargetState& last_part, uint64_t bytes) {
  // This device's read-back staging into the next device's upload staging.
  const models::TargetState& from = stages_[i].state;
  models::TargetState& next = i + 1 < stages_.size() ? stages_[i + 1].state : last_part;
  const uint64_t x_bytes = uint64_t(pass.rows) * hidden_ * 4;
  std::memcpy(next.hidden_in.mapped, from.hidden_out.mapped, x_bytes);
  if (pass.taps)
    std::memcpy(static_cast<char*>(next.hidden_in.mapped) + next.hop_taps_offset(),
                static_cast<const char*>(from.hidden_out.mapped) + from.hop_taps_offset(), bytes - x_bytes);
  ++stats_.hops;
  stats_.bytes += bytes;
}

}  // namespace eaglevk::engine
