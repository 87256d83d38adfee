#pragma once
// What the real-dimension tests share: prompts of random ids and prefill in passes.
#include <cstdint>
#include <vector>

#include "support/target_runner.h"

namespace eaglevk::testing {

// `bos` then n - 1 pseudo-random ids below `below`, reproducible from `seed`.
std::vector<int32_t> random_prompt(uint32_t n, uint32_t seed, int32_t bos, int32_t below);
// The logits of the last prompt position, through `runner` in passes of at most `chunk` rows.
std::vector<float> last_logits(TargetRunner& runner, const std::vector<int32_t>& ids, uint32_t chunk);
int32_t argmax(const std::vector<float>& v);

}  // namespace eaglevk::testing
