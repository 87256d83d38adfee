#pragma once
// Raw passes of a target for tests (teacher forcing, logits of a prompt, replayed passes): inputs
// go up through a staging buffer recorded into the pass's command buffer, argmax ids (and, on
// request, logits) come back. Generation is engine::Decoder's.
#include <cstdint>
#include <span>
#include <vector>

#include "models/target.h"
#include "runtime/engine/sampler.h"
#include "runtime/ops/gpu.h"

namespace eaglevk::testing {

struct PassRequest {
  std::span<const int32_t> ids;     // tokens at positions start, start + 1, ...
  uint32_t start = 0;
  uint32_t logits_from = 0;         // rows whose logits are computed (relative to ids)
  bool read_logits = false;         // copy those logits rows back to the host
  bool batch_invariant = false;
  const models::TapRequest* taps = nullptr;
  // Sample the logits rows on the device instead of taking their argmax (temperature > 0).
  const engine::SamplingParams* sampling = nullptr;
  const models::EmbeddingOverride* embeddings = nullptr;  // image feature rows of the pass
};

struct PassOutput {
  std::vector<int32_t> argmax;      // one per logits row
  std::vector<float> logits;        // rows x vocab, when read_logits
};

class TargetRunner {
 public:
  TargetRunner(ops::Gpu& gpu, const models::TargetModel& model, uint32_t context, uint32_t max_rows,
               bool arena_reuse = vk::arena_reuse_from_env());

  void run(const PassRequest& request, PassOutput& out);

  uint32_t context() const { return context_; }
  uint32_t max_rows() const { return state_.max_rows; }
  const models::TargetModel& model() const { return model_; }
  models::TargetState& state() { return state_; }
  vk::Recorder& recorder() { return rec_; }
  ops::Gpu& gpu() { return gpu_; }

  // Resubmit the recorded pass when a request matches it (vk::replay_from_env; tests set it).
  bool replay = vk::replay_from_env();
  // Positions one recording serves past its own pass before the next pass is recorded again:
  // long enough that recording is rare, short enough that its attention bound stays near the
  // real length (a CPU device caps the keys one attention row may read). Tests set it small.
  uint32_t replay_span = 512;
  // How many passes were resubmitted rather than recorded.
  uint64_t replayed_passes() const { return replayed_passes_; }

 private:
  static uint64_t readback_bytes(uint32_t max_rows, uint32_t vocab, uint32_t logits_rows);

  // What the commands in rec_ were recorded for. A decode step differs from the previous one
  // only in its token id and position, which it copies from upload_, so the same commands
  // serve every step up to the attention bound they were recorded with (kv_bound: attention
  // never reads past a row's own position, so a larger bound gives the same bits).
  struct RecordedPass {
    uint64_t recording = 0;  // rec_.recordings() once recorded; 0: nothing replayable
    uint32_t rows = 0, logits_from = 0, kv_bound = 0;
    bool batch_invariant = false, read_logits = false, sampled = false;
    engine::SamplingParams sampling;
  };
  bool replays(const PassRequest& request, bool sampled) const;
  void record(const PassRequest& request, bool sampled);  // into rec_, not submitted

  ops::Gpu& gpu_;
  const models::TargetModel& model_;
  uint32_t context_;
  models::TargetState state_;
  vk::Recorder rec_;
  vk::Buffer upload_;    // ids then positions, int32 [2 max_rows]
  vk::Buffer readback_;  // argmax ids, then logits rows
  RecordedPass recorded_;
  uint64_t replayed_passes_ = 0;
};

}  // namespace eaglevk::testing
