#include "runtime/engine/draft_sampling.h"

#include <vector>

namespace eaglevk::engine {

vk::Buffer target_to_draft_ids(const vk::Context& ctx, const models::Eagle3Model& draft, uint32_t target_vocab) {
  const uint32_t Vd = draft.config.draft_vocab_size;
  std::vector<int32_t> offsets(Vd, 0), t2d(target_vocab, -1);
  if (draft.d2t) vk::download(ctx, draft.d2t, offsets.data(), Vd * 4);
  for (uint32_t j = 0; j < Vd; ++j) t2d[uint32_t(int32_t(j) + offsets[j])] = int32_t(j);
  vk::Buffer b(ctx, uint64_t(target_vocab) * 4, vk::MemoryKind::Device, "t2d");
  vk::upload(ctx, b, t2d.data(), uint64_t(target_vocab) * 4);
  return b;
}

ops::DraftDistribution draft_draw(const models::Eagle3Model& draft, const vk::Buffer& q, const vk::BufferRange& d2t,
                                  uint32_t q_row) {
  ops::DraftDistribution dist;
  dist.mode = ops::DraftDistribution::Mode::Draw;
  dist.q = vk::BufferRange(q);
  dist.width = draft.config.draft_vocab_size;
  dist.d2t = draft.d2t ? &d2t : nullptr;
  dist.q_row = q_row;
  return dist;
}

ops::DraftDistribution draft_verify(const models::Eagle3Model& draft, const vk::Buffer& q, const vk::Buffer& t2d) {
  ops::DraftDistribution dist;
  dist.mode = ops::DraftDistribution::Mode::Verify;
  dist.q = vk::BufferRange(q);
  dist.width = draft.config.draft_vocab_size;
  dist.t2d = vk::BufferRange(t2d);
  return dist;
}

}  // namespace eaglevk::engine
