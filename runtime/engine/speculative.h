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
#include <vector>

#include "models/eagle3.h"
#include "models/target.h"
#include "runtime/engine/generate.h"
#include "runtime/engine/spec_stats.h"
#include "runtime/ops/gpu.h"

namespace eaglevk::engine {

// Hidden states handed to research code: rows of [taps x H] for consecutive positions.
struct TapRows {
  std::vector<int32_t> tokens;     // the token at each position
  std::vector<int32_t> positions;
  std::vector<float> hidden;       // rows x (3 H)
};
using TapSink = std::function<void(const TapRows&)>;

class SpeculativeDecoder {
 public:
  SpeculativeDecoder(ops::Gpu& gpu, const models::TargetModel& target, const models::Eagle3Model& draft,
                     uint32_t context, uint32_t k, uint32_t max_rows = 128,
                     bool arena_reuse = vk::arena_reuse_from_env());

  // Greedy generation; stats are added to `stats`.
  GenerationResult generate(std::vector<int32_t> prompt, const GenerationOptions& options, SpecStats& stats,
                            const TokenCallback& on_token = {});

  // When set, the taps of every verified position are read back and passed on (off by
  // default; costs nothing when off).
  void set_tap_sink(TapSink sink) { tap_sink_ = std::move(sink); }

  uint32_t k() const { return k_; }
  // Tests only: a deliberately wrong acceptance rule (negative controls).
  void set_accept_rule(ops::AcceptRule rule) { rule_ = rule; }
  // The second scheme at temperature > 0: draft tokens are drawn from the draft's own
  // filtered distribution q, accepted with min(1, p/q), a rejection replaced from
  // max(0, p - q). Off: the draft proposes greedily (vLLM's default with EAGLE).
  void set_draft_sampling(bool on) { draft_sampling_ = on; }
  vk::Recorder& recorder() { return rec_; }

 private:
  void prefill(const std::vector<int32_t>& prompt, const GenerationOptions& o, GenerationResult& result,
               std::vector<float>& last_logits);
  void record_inputs_copy(uint64_t upload_offset, vk::BufferRange dst, uint32_t count);

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
};

}  // namespace eaglevk::engine
