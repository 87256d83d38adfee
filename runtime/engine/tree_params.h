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

// The tree a caller means when it leaves parts out, for every front door: top-k 0 is 1, and
// with top-k 1 the verified tokens default to the root and every level's single node
// (steps + 1). With top-k > 1 the count has no default: 0 stays 0 (the CLI's automatic choice,
// otherwise refused by check_tree_params).
inline TreeParams tree_with_defaults(TreeParams t) {
  if (!t.enabled()) return t;
  if (t.topk == 0) t.topk = 1;
  if (t.draft_tokens == 0 && t.topk == 1) t.draft_tokens = t.steps + 1;
  return t;
}

// Fails with a message naming the flag unless the shape is valid and within the kernels' limits.
void check_tree_params(const TreeParams& tree);

}  // namespace eaglevk::engine
