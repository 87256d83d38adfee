#include "runtime/engine/decoder_replay.h"

namespace eaglevk::engine {

RoundCache::Entry* RoundCache::find(const RoundShape& shape, uint32_t exact_bound) {
  for (Entry& e : entries_)
    if (e.serves(shape, exact_bound)) return &e;
  return nullptr;
}

RoundCache::Entry& RoundCache::entry_for(const vk::Context& ctx, const RoundShape& shape) {
  for (Entry& e : entries_)
    if (e.recording != 0 && e.shape == shape) return e;
  if (entries_.size() < kMaxEntries) {
    entries_.emplace_back();
    entries_.back().rec = std::make_unique<vk::Recorder>(ctx);
    return entries_.back();
  }
  Entry& e = entries_[next_];
  next_ = (next_ + 1) % kMaxEntries;
  return e;
}

}  // namespace eaglevk::engine
