#pragma once
// EAGLE-3 chain speculation: prefill the target with taps, catch the draft up, then rounds of
// k draft steps and one verify pass of k+1 positions. A round is one submission and one small
// read-back (k+1 target argmax ids and k draft ids); taps, logits and draft tokens stay on the
// device. Verification follows vLLM's rule for greedy drafts: d is accepted with probability
// p(d) under the target's filtered distribution p, a rejection is replaced by a draw from p
// with d removed, and the bonus token is drawn from p; at temperature 0 that is "accept while
// d is the argmax", and the output equals plain greedy decoding token for token.
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "models/eagle3.h"
#include "models/target.h"
#include "runtime/engine/generate.h"
#include "runtime/engine/spec_stats.h"
#include "runtime/engine/tree_params.h"
#include "runtime/ops/gpu.h"

namespace eaglevk::engine {

// Chain drafting's most draft tokens per round: past it a round's verify pass and draft
// steps cost more than the tokens they can win, and the per-round buffers grow with k.
constexpr uint32_t kMaxChainDraftTokens = 16;

// Hidden states handed to research code: rows of [taps x H] for consecutive positions.
struct TapRows {
  std::vector<int32_t> tokens;     // the token at each position
  std::vector<int32_t> positions;
  std::vector<float> hidden;       // rows x (3 H)
};
using TapSink = std::function<void(const TapRows&)>;


// One verified tree, as read back after its round (tests and debugging).
struct TreeRound {
  uint32_t base = 0;                 // P: the root's position
  std::vector<int32_t> tokens;       // node 0 = the root
  std::vector<int32_t> parents;      // -1 for the root
  std::vector<int32_t> depths;
  std::vector<float> scores;         // cumulative draft log-probability (root 0)
  std::vector<int32_t> target_argmax;
  std::vector<int32_t> target_draws;    // at T > 0: each node's draw from the target's p
  std::vector<uint32_t> accepted_path;  // root first
};
using TreeObserver = std::function<void(const TreeRound&)>;

// The accepted walk through a verified tree: from the root, to the child whose token is
// `choice(node)` while one exists (siblings carry distinct tokens), skipping nodes that
// `allowed` (when given) leaves out. Node ids, root first.
std::vector<uint32_t> walk_tree(const std::vector<int32_t>& tokens, const std::vector<int32_t>& parents,
                                const std::function<int32_t(uint32_t)>& choice,
                                const std::vector<bool>* allowed = nullptr);

// Layout of a round's upload buffer (int32 slots).
struct UploadLayout {
  uint32_t max_rows = 0, k = 0;
  uint32_t tree_rows = 0;   // K (S - 1): the draft's tree-step rows
  uint32_t tree_nodes = 0;  // M
  uint64_t target_ids() const { return 0; }
  uint64_t target_positions() const { return max_rows; }
  uint64_t draft_ids() const { return 2ull * max_rows; }
  uint64_t draft_positions() const { return 3ull * max_rows; }  // catch-up rows, then the k steps
  uint64_t tree_positions() const { return 4ull * max_rows + k; }  // the tree steps' rows
  uint64_t tree_slots() const { return tree_positions() + tree_rows; }  // their draft KV rows
  uint64_t target_slots() const { return tree_slots() + tree_rows; }    // the verified nodes' KV rows
  // The last tree's accepted path, moved to consecutive rows at the round's start:
  // [len, base, node ids...] (ops::row_compact).
  uint64_t compact_path() const { return target_slots() + tree_nodes; }
  uint64_t slots() const;
};
inline UploadLayout upload_layout(uint32_t max_rows, uint32_t k, const TreeParams& tree) {
  return UploadLayout{max_rows, k, tree.enabled() ? tree.topk * (tree.steps - 1) : 0, tree.draft_tokens};
}

// int32 [target vocab]: the draft id of each target id, or -1 (the draft-sampling verifier
// sees q in the target vocabulary through it).
vk::Buffer target_to_draft_ids(const vk::Context& ctx, const models::Eagle3Model& draft, uint32_t target_vocab);

// The draft-sampling draw of a draft pass's rows: q rows written from `q_row` on, the draws
// mapped to target ids through the draft's d2t (when it has one; `d2t` views it).
ops::DraftDistribution draft_draw(const models::Eagle3Model& draft, const vk::Buffer& q, const vk::BufferRange& d2t,
                                  uint32_t q_row);

// The draft-sampling verification of the target's rows against the q rows they were drawn
// from (q row r for verify row r), seen in the target vocabulary through `t2d`.
ops::DraftDistribution draft_verify(const models::Eagle3Model& draft, const vk::Buffer& q, const vk::Buffer& t2d);

class SpeculativeDecoder {
 public:
  SpeculativeDecoder(ops::Gpu& gpu, const models::TargetModel& target, const models::Eagle3Model& draft,
                     uint32_t context, uint32_t k, uint32_t max_rows = 128,
                     bool arena_reuse = vk::arena_reuse_from_env());
  // Tree drafting of the given shape (check_tree_params).
  SpeculativeDecoder(ops::Gpu& gpu, const models::TargetModel& target, const models::Eagle3Model& draft,
                     uint32_t context, const TreeParams& tree, uint32_t max_rows = 128,
                     bool arena_reuse = vk::arena_reuse_from_env());
  SpeculativeDecoder(ops::Gpu& gpu, const models::TargetModel& target, const models::Eagle3Model& draft,
                     uint32_t context, uint32_t k, const TreeParams& tree, uint32_t max_rows, bool arena_reuse);

  // Greedy generation; stats are added to `stats`.
  GenerationResult generate(std::vector<int32_t> prompt, const GenerationOptions& options, SpecStats& stats,
                            const TokenCallback& on_token = {});

  // When set, the taps of every verified position are read back and passed on (off by
  // default; costs nothing when off).
  void set_tap_sink(TapSink sink) { tap_sink_ = std::move(sink); }

  uint32_t k() const { return k_; }
  const TreeParams& tree() const { return tree_; }
  void set_tree_observer(TreeObserver observer) { tree_observer_ = std::move(observer); }
  // Tests only: a deliberately wrong acceptance rule (negative controls; trees at T > 0 know
  // AcceptIfArgmax).
  void set_accept_rule(ops::AcceptRule rule) { rule_ = rule; }
  // The second scheme at temperature > 0: draft tokens are drawn from the draft's own
  // filtered distribution q, accepted with min(1, p/q), a rejection replaced from
  // max(0, p - q). Off: the draft proposes greedily (vLLM's default with EAGLE).
  void set_draft_sampling(bool on) { draft_sampling_ = on; }
  vk::Recorder& recorder() { return rec_; }
  // Resubmit a round recorded before when the round's shape matches it
  // (vk::replay_from_env; tests set it): see RoundRecording.
  bool replay = vk::replay_from_env();
  // Positions one round's recording serves past its own round (TargetRunner::replay_span).
  uint32_t replay_span = 512;
  // How many rounds were resubmitted rather than recorded.
  uint64_t replayed_rounds() const { return replayed_rounds_; }
  // Wall time of one target verify pass of `rows` rows, or of one draft pass of `rows` rows
  // (recording, submission and the wait included): the median of `repeats` after a warm-up.
  // For --spec-draft-tokens auto; overwrites the caches' first rows, so it comes before any
  // generation.
  double time_pass(bool draft_pass, uint32_t rows, uint32_t repeats);

 private:
  // Runs positions from..n-1 of the prompt through the target and the draft's catch-up
  // (rows below `from` are already in both caches).
  void prefill(const std::vector<int32_t>& prompt, uint32_t from, const GenerationOptions& o, GenerationResult& result,
               std::vector<float>& last_logits);
  void record_inputs_copy(vk::Recorder& rec, uint64_t upload_offset, vk::BufferRange dst, uint32_t count);
  // A draft pass over `rows` rows whose features come from `taps` and whose token ids and
  // positions the host wrote to the upload buffer (prefill and the rounds' catch-up).
  models::DraftPass catch_up_pass(uint32_t rows, ops::Act taps, uint32_t kv_len) const;

  // What a round decided: the tokens to emit (accepted drafts, then the target's own token)
  // and the tap rows of the positions they follow (for the tap sink).
  struct RoundOutcome {
    uint32_t proposed = 0, accepted = 0;
    std::vector<int32_t> tokens;
    std::vector<uint32_t> tap_rows;
    std::vector<TokenLogprobs> logprobs;  // per token, with GenerationOptions::logprobs
  };
  // Both kinds of round take the pending token y at position P with the draft caught up to c.
  RoundOutcome chain_round(uint32_t P, uint32_t c, uint32_t tap_row0, int32_t y, const std::vector<int32_t>& history,
                           const GenerationOptions& o);
  RoundOutcome tree_round(uint32_t P, uint32_t c, uint32_t tap_row0, int32_t y, const std::vector<int32_t>& history,
                          const GenerationOptions& o);

  // What a round's commands depend on besides device buffers: the host decides these, and
  // everything else (tokens, positions, the draws' positions, a tree's root and the last tree's
  // accepted path) is read from the upload buffer or written on the device.
  struct ChainShape {
    uint32_t catch_rows = 0, k = 0;
    uint32_t tap_row0 = 0;
    bool logprobs = false, taps_out = false, sampled_drafts = false;
    SamplingParams sampling;
    ops::AcceptRule rule = ops::AcceptRule::Correct;
    bool operator==(const ChainShape&) const = default;
  };
  struct TreeShape {
    uint32_t catch_rows = 0, k = 0, steps = 0, nodes = 0;
    uint32_t tap_row0 = 0;
    bool logprobs = false, taps_out = false, sampled = false;
    SamplingParams sampling;
    bool operator==(const TreeShape&) const = default;
  };
  // Record a round into `rec`: its attention reads keys below `kv_bound` (the round's own
  // P + k + 1 or P + M, or more for a recording that later rounds replay: a row never reads past
  // its own position, so a larger bound gives the same bits). The draft's passes take their own
  // bounds when `exact`.
  void record_chain_round(vk::Recorder& rec, const ChainShape& shape, uint32_t P, uint32_t kv_bound, bool exact);
  void record_tree_round(vk::Recorder& rec, const TreeShape& shape, uint32_t P, uint32_t kv_bound, bool exact);
  // Moves the accepted path of the last tree (KV rows and taps) to consecutive rows at the start
  // of a tree round, on the device, from the path the host wrote to the upload buffer.
  void record_tree_compaction(vk::Recorder& rec);

  // One recorder per catch-up row count (1..k + 1 for chains, 1..S + 1 for trees: the drafts the
  // last round accepted, plus one), which decides a round's shape; so after a few rounds every
  // shape has been recorded and each round is resubmitted as recorded, until its positions pass
  // kv_bound.
  struct RoundRecording {
    std::unique_ptr<vk::Recorder> rec;
    uint64_t recording = 0;  // rec->recordings() once recorded; 0: nothing replayable
    ChainShape chain_shape;
    TreeShape tree_shape;
    uint32_t kv_bound = 0;
    // Whether the commands in rec are a round of this shape that serves exact_bound.
    bool serves(const ChainShape& c, const TreeShape& t, uint32_t exact_bound) const {
      return recording != 0 && recording == rec->recordings() && chain_shape == c && tree_shape == t &&
             exact_bound <= kv_bound;
    }
  };
  RoundRecording& round_recording(uint32_t catch_rows);  // made on first use
  // Records a round into `rec` with attention bounded by kv_bound (exact: the round's own).
  using RoundRecorder = std::function<void(vk::Recorder& rec, uint32_t kv_bound, bool exact)>;
  // Runs a round and waits for it: resubmits the recording of its shape when one serves
  // exact_bound, else records it (in its shape's recorder when it may be replayed) and submits.
  void submit_round(uint32_t catch_rows, uint32_t tap_row0, const ChainShape& chain, const TreeShape& tree,
                    uint32_t exact_bound, const RoundRecorder& record);

  ops::Gpu& gpu_;
  const models::TargetModel& target_;
  const models::Eagle3Model& draft_;
  uint32_t context_, k_, max_rows_;
  models::TargetState tstate_;
  models::Eagle3State dstate_;
  vk::Buffer taps_;          // [max_rows, 3 H]: the residual stream entering the tap layers
  vk::Buffer draft_tokens_;  // int32 [k]
  vk::Buffer verify_drafts_; // int32 [k + 1]: d_1..d_k, then -1 for the bonus row
  vk::Buffer upload_;        // host inputs of one submission
  vk::Buffer readback_;
  vk::Recorder rec_;
  TapSink tap_sink_;
  ops::AcceptRule rule_ = ops::AcceptRule::Correct;
  bool draft_sampling_ = false;
  vk::Buffer draft_q_;       // f32 [k, draft vocab]: the distributions the drafts came from
  vk::Buffer draft_accept_;  // int32 [k]: unused flags of the draft draws
  vk::Buffer t2d_;           // int32 [vocab]: draft id of each target id, or -1
  models::TapRequest tap_request_;
  // Tree drafting.
  TreeParams tree_;
  TreeObserver tree_observer_;
  vk::Buffer tree_f_, tree_i_;   // ops::TreeLayout arrays
  vk::Buffer u_history_;         // [1 + K (S - 1), H]: the draft's pre-norm outputs of the round
  vk::Buffer tree_readback_;     // [6 M]: tokens, parents, depths, target argmax, draws, scores
  vk::Buffer tree_draws_;        // int32 [M]: each node's draw at T > 0
  uint32_t compact_base_ = 0;    // the last tree's root position, and its accepted node path
  std::vector<uint32_t> compact_path_;
  // Tokens 0..c of the last generation, c the first position the draft had not caught up on:
  // rows below c are valid in both KV caches (GenerationOptions::reuse_prefix). Emptied by
  // anything else that writes the caches.
  std::vector<int32_t> reusable_;
  vk::Buffer logits_readback_;   // [k + 1 or M, vocab]: a round's verify logits, for logprobs
  std::vector<RoundRecording> round_recordings_;  // by catch-up rows - 1
  uint64_t replayed_rounds_ = 0;
};

}  // namespace eaglevk::engine
