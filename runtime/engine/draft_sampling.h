#pragma once
// The draft-sampling scheme's device views: drafts drawn from the draft's own distribution q,
// verified against the target's p through the vocabulary maps.
#include <cstdint>

#include "models/eagle3.h"
#include "runtime/ops/gpu.h"

namespace eaglevk::engine {

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

}  // namespace eaglevk::engine
