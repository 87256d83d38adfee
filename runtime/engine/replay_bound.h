#pragma once
// The attention bound of a recording that later passes resubmit (replayed decode steps and
// speculative rounds): the pass's own bound, or up to `span` positions more, within the context
// and the keys one attention row may read on the device. A row never reads past its own
// position, so a larger bound gives the same bits; the recording serves passes up to it.
#include <algorithm>
#include <cstdint>

namespace eaglevk::engine {

inline uint32_t replay_kv_bound(uint32_t exact, uint32_t span, uint32_t context, uint32_t max_keys) {
  return std::max(exact, std::min({context, exact + span, max_keys}));
}

}  // namespace eaglevk::engine
