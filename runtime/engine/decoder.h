#pragma once
// The decoder: up to B sequences decode together, each in its own rows of the target's (and
// the draft's) KV caches, plainly (no draft: a round is one target row per running sequence),
// by chain speculation (k draft tokens a round) or by tree speculation (batch 1). A round is
// one submission for every running sequence; a prompt's prefill is its own submissions,
// between rounds, in chunks of max_rows. Every kernel computes a row the same way whichever
// rows share its dispatch (matrix-vector kernels at any row count, attention from the row's
// own position over its own region, random draws keyed by position), so each sequence's
// tokens equal its own run alone, to the bit, while the weights are read once per round for
// all of them.
//
// Chain verification follows vLLM's rule for greedy drafts: d is accepted with probability
// p(d) under the target's filtered distribution p, a rejection is replaced by a draw from p
// with d removed, and the bonus token is drawn from p; at temperature 0 that is "accept while
// d is the argmax", and the output equals plain greedy decoding token for token.
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "models/eagle3.h"
#include "models/target.h"
#include "runtime/engine/decoder_layouts.h"
#include "runtime/engine/decoder_replay.h"
#include "runtime/engine/draft_sampling.h"
#include "runtime/engine/generate.h"
#include "runtime/engine/layer_split.h"
#include "runtime/engine/prefill.h"
#include "runtime/engine/spec_stats.h"
#include "runtime/engine/tree_params.h"
#include "runtime/ops/gpu.h"

namespace eaglevk::engine {

// Chain drafting's most draft tokens per round: past it a round's verify pass and draft
// steps cost more than the tokens they can win, and the per-round buffers grow with k.
constexpr uint32_t kMaxChainDraftTokens = 16;

// The most sequences one decoder runs together.
constexpr uint32_t kMaxBatch = 64;

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

struct DecoderConfig {
  uint32_t context = 0;  // positions per sequence
  uint32_t batch = 1;    // sequences decoded together
  uint32_t k = 0;        // chain draft tokens a round; 0 (or no draft): plain decoding
  TreeParams tree = {};  // tree drafting instead of the chain (batch 1)
  uint32_t max_rows = kPrefillRows;  // rows of one prefill pass
  bool arena_reuse = vk::arena_reuse_from_env();
};

class Decoder {
 public:
  Decoder(ops::Gpu& gpu, const models::TargetModel& target, const models::Eagle3Model* draft,
          const DecoderConfig& config);

  uint32_t batch() const { return batch_; }
  uint32_t k() const { return k_; }
  const TreeParams& tree() const { return tree_; }
  uint32_t context() const { return context_; }
  bool speculative() const { return mode_ != Mode::Plain; }

  // The second scheme at temperature > 0 (chains only): draft tokens are drawn from the
  // draft's own filtered distribution q, accepted with min(1, p/q), a rejection replaced from
  // max(0, p - q). Off: the draft proposes greedily (vLLM's default with EAGLE).
  void set_draft_sampling(bool on) { draft_sampling_ = on; }
  // When set, the taps of every verified position are read back and passed on (batch 1).
  void set_tap_sink(TapSink sink) { tap_sink_ = std::move(sink); }
  void set_tree_observer(TreeObserver observer) { tree_observer_ = std::move(observer); }
  // Tests only: a deliberately wrong acceptance rule (negative controls; trees at T > 0 know
  // AcceptIfArgmax).
  void set_accept_rule(ops::AcceptRule rule) { rule_ = rule; }

  // Starts a generation in a free slot: checks the prompt and prefills it (one submission per
  // chunk); the first token is emitted at once. Sequences that run together may differ in
  // their sampling settings and (chains) their draft tokens a round. With options.reuse_prefix it continues from the caches the slot's
  // previous generation left (a conversation's next turn). Images, the prompt argmax and top
  // logits need a batch of 1.
  void start(uint32_t slot, std::vector<int32_t> prompt, const GenerationOptions& options,
             TokenCallback on_token = {});
  bool running(uint32_t slot) const { return seqs_.at(slot).state == SeqState::Running; }
  bool finished(uint32_t slot) const { return seqs_.at(slot).state == SeqState::Finished; }
  bool any_running() const;
  // The log-probabilities of the tokens a slot has emitted so far (with options.logprobs; each is
  // recorded before its token's callback runs), for callers that stream them.
  const std::vector<TokenLogprobs>& logprobs_so_far(uint32_t slot) const { return seqs_.at(slot).result.logprobs; }
  // One round of every running slot (nothing when none runs). When it throws, the generations
  // in it are abandoned and their slots free.
  void round();
  // A finished slot's generation; its statistics are added to `stats` and the slot is free
  // again (its caches stay for reuse_prefix). Its decode_seconds are its share of each round
  // it took part in (the round's time over the sequences in it).
  GenerationResult take(uint32_t slot, SpecStats& stats);
  // One sequence in slot 0: start, rounds until it ends, take.
  GenerationResult generate(std::vector<int32_t> prompt, const GenerationOptions& options, SpecStats& stats,
                            const TokenCallback& on_token = {});

  // The recorder of the last submission (a prefill chunk, a round or a plain step).
  vk::Recorder& recorder() { return last_round_ ? *last_round_ : rec_; }
  // Resubmit a round recorded before when the round's shape matches it (vk::replay_from_env;
  // tests set it): see RoundCache.
  bool replay = vk::replay_from_env();
  // Positions one round's recording serves past its own round: long enough that recording is
  // rare, short enough that its attention bound stays near the real length (a CPU device caps
  // the keys one attention row may read). Tests set it small.
  uint32_t replay_span = 512;
  // How many rounds (plain steps included) were resubmitted rather than recorded.
  uint64_t replayed_rounds() const { return replayed_rounds_; }
  // Wall time of one target verify pass of `rows` rows, or of one draft pass of `rows` rows
  // (recording, submission and the wait included): the median of `repeats` after a warm-up.
  // For --spec-draft-tokens auto; overwrites the caches' first rows, so it comes before any
  // generation.
  double time_pass(bool draft_pass, uint32_t rows, uint32_t repeats);
  // A target split across devices: the hops its passes made between them (zero otherwise).
  HopStats split_hops() const { return front_ ? front_->stats() : HopStats{}; }

 private:
  enum class Mode { Plain, Chain, Tree };
  enum class SeqState { Free, Running, Finished };
  // One sequence: what it decided, where it stands and what it reports.
  struct Sequence {
    SeqState state = SeqState::Free;
    GenerationOptions options;
    TokenCallback on_token;
    GenerationResult result;
    SpecStats stats;
    std::vector<int32_t> history;   // every token whose position is decided
    std::vector<int32_t> reusable;  // tokens of the rows the caches hold (reuse_prefix)
    uint32_t P = 0;                 // position of the pending token y
    uint32_t c = 0;                 // first position the draft has not caught up on
    int32_t y = 0;
    uint32_t tap_row = 0;           // round-taps row of position c's taps
    uint32_t cached = 0;            // leading history rows both caches hold (reuse_prefix)
    // Trees: the last tree's root position and accepted node path, moved to consecutive
    // rows at the start of the next round.
    uint32_t compact_base = 0;
    std::vector<uint32_t> compact_path;
  };
  // A round's decision for one sequence: tokens to emit (accepted drafts, then the target's
  // own), the logits row each was decided by, and the tap rows of the positions they follow.
  struct Decided {
    uint32_t proposed = 0, accepted = 0, steps = 0;
    std::vector<int32_t> tokens;
    std::vector<uint32_t> rows;  // verify row of each token's logits (and taps)
  };

  void prefill(Sequence& s, uint32_t slot, uint32_t from, std::vector<float>& last_logits);
  void record_prefill_chunk(const Sequence& s, uint32_t slot, const PrefillChunk& chunk);
  // Emits one token; false: the generation stops.
  bool emit(Sequence& s, int32_t token, const float* logits_row);
  // Applies a round's decision: statistics, the tap sink, emission, the next round's place.
  void apply(Sequence& s, const Decided& d, const float* logits);
  void finish(Sequence& s);
  void abandon(Sequence& s);  // after an error: the slot is free, its caches not reusable
  void batch_round(const std::vector<uint32_t>& active);
  void tree_round(uint32_t slot);
  // A plain prefill chunk or a plain round of one row per sequence; a chain round.
  void record_plain_pass(vk::Recorder& rec, const PlainPassShape& shape, uint32_t kv_len);
  void record_batch_round(vk::Recorder& rec, const BatchRoundShape& shape, uint32_t draft_kv, uint32_t verify_kv,
                          RoundPart part = RoundPart::Whole);
  void record_tree_round(vk::Recorder& rec, const TreeRoundShape& shape, uint32_t P, uint32_t kv_bound, bool exact,
                         RoundPart part = RoundPart::Whole);
  // A tree round of a split target: the draft's tree (one submission here), its nodes and
  // ancestor table read back, the earlier parts' verify pass, the rest of the round.
  void split_tree_round(const TreeRoundShape& shape, uint32_t P);
  // Runs a round and waits for it: a split target's earlier parts first, then replay_or_record.
  void submit_round(const RoundShape& shape, uint32_t exact_bound, const RoundRecorder& record);
  // Runs commands of `shape` on this device and waits for them: resubmits the recording of the
  // shape when one serves exact_bound, else records them (into the cache when they may be
  // replayed, with attention bounded by replay_kv_bound) and submits.
  void replay_or_record(const RoundShape& shape, uint32_t exact_bound, const RoundRecorder& record);
  // A split target: runs a pass's rows (positions and cache rows as the upload buffer holds
  // them; the tokens from `ids`, else from the upload buffer too) through the parts before the
  // last, whose result the last part's recorded pass then reads from tstate_.hidden_in.
  void run_split_front(models::ForwardPass pass, const int32_t* ids = nullptr);
  // A chain round of a split target: the draft steps (one submission on this device), the
  // verify rows' tokens read back, the earlier parts' verify pass, the rest of the round.
  void split_chain_round(const BatchRoundShape& shape, uint32_t draft_kv, uint32_t verify_kv);
  ops::IntVec input(uint32_t at) const { return ops::IntVec{vk::BufferRange(inputs_), at}; }
  const ops::IntVec* regions(const ops::IntVec& slots) const { return batch_ > 1 ? &slots : nullptr; }
  uint32_t chain_draft_tokens(const GenerationOptions& o) const { return o.draft_tokens ? o.draft_tokens : k_; }
  // The readback's tap rows (all max_rows of them) from word `at`.
  void read_tap_rows(uint32_t at, std::vector<float>& out) const;

  ops::Gpu& gpu_;
  const models::TargetModel& target_;
  const models::Eagle3Model* draft_;
  Mode mode_;
  uint32_t context_, k_, batch_;
  TreeParams tree_;
  uint32_t prefill_rows_;  // rows of a prefill chunk
  uint32_t round_rows_;    // a round's most verify rows: B (k + 1), M for trees, B for plain
  uint32_t max_rows_;      // the larger of a prefill chunk and a round
  uint32_t draft_region_;  // draft cache rows per sequence: the context and the rows past it a round writes
  InputLayout in_;
  OutputLayout out_;
  models::TargetState tstate_;
  std::unique_ptr<SplitFront> front_;  // a target split across devices: its earlier parts
  std::vector<int32_t> split_ids_;     // [round rows]: a split chain round's verify tokens
  vk::Buffer tree_readback_;           // a split tree round: ops::TreeLayout's int array, read back
  models::Eagle3State dstate_;
  models::TapRequest prefill_taps_, round_taps_;  // [max_rows], [round rows + B] x 3 H
  vk::Buffer prefill_tap_rows_, round_tap_rows_, catch_taps_;
  vk::Buffer round_ids_;      // int32 RoundIds: -1, the B pending tokens, then k x B draft tokens
  vk::Buffer verify_drafts_;  // int32 [round rows]: each row's draft, -1 on bonus rows
  vk::Buffer draft_q_, q_verify_, draft_accept_, t2d_;  // draft sampling
  vk::Buffer tree_f_, tree_i_;  // ops::TreeLayout arrays
  vk::Buffer u_history_;        // [1 + K (S - 1), H]: the draft's pre-norm outputs of the round
  vk::Buffer tree_draws_;       // int32 [M]: each node's draw at T > 0
  vk::Buffer upload_, inputs_, readback_, logits_readback_;
  vk::Recorder rec_;
  TapSink tap_sink_;
  TreeObserver tree_observer_;
  ops::AcceptRule rule_ = ops::AcceptRule::Correct;
  bool draft_sampling_ = false;
  RoundCache round_cache_;
  vk::Recorder* last_round_ = nullptr;  // the cache's recorder of the last submission; null: rec_
  uint64_t replayed_rounds_ = 0;
  std::vector<Sequence> seqs_;
};

// The one place the runtime and the apps build a decoder. Without a draft (or with neither k
// nor a tree) it decodes plainly. At temperature > 0 chain drafts are drawn from the draft's
// distribution unless `greedy_drafts` (both keep the target's distribution; drawing accepts
// more); a tree's children are always the draft's top-K.
std::unique_ptr<Decoder> make_decoder(ops::Gpu& gpu, const models::TargetModel& target,
                                      const models::Eagle3Model* draft, const DecoderConfig& config,
                                      bool greedy_drafts = false);

}  // namespace eaglevk::engine
