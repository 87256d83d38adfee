#pragma once
// The shape of a speculation tree (EAGLE-2's dynamic tree), in SGLang's terms.
#include <cstdint>

namespace eaglevk::engine {

// `steps` draft levels (--speculative-num-steps; the first comes from the catch-up row, each
// further one from a draft forward over the K frontier nodes), `topk` children per expanded
// node and frontier width, and `draft_tokens` verified tokens including the root. steps = 0:
// chain drafting.
struct TreeParams {
  uint32_t steps = 0, topk = 0, draft_tokens = 0;
  bool enabled() const { return steps > 0; }
};

// Fails with a message naming the flag unless the shape is valid and within the kernels' limits.
void check_tree_params(const TreeParams& tree);

}  // namespace eaglevk::engine
