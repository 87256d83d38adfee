#pragma once
// The speculation flags shared by run, eval and bench: -k for chain drafting, and SGLang's
// --spec-steps / --spec-topk / --spec-draft-tokens for tree drafting.
#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

#include "runtime/engine/speculative.h"

namespace eaglevk::cli {

struct SpecFlags {
  uint32_t k = 3;
  uint32_t steps = 0, topk = 0;
  std::string draft_tokens;  // a count ("auto" is refused: not implemented yet)
  CLI::Option* k_option = nullptr;

  bool tree() const { return steps > 0 || topk > 0 || !draft_tokens.empty(); }
  bool auto_tokens() const { return draft_tokens == "auto"; }
  // The tree's shape; fails naming the flag when it is incomplete or invalid.
  // bench measures the chain (-k) and the tree side by side, so it allows both.
  engine::TreeParams tree_params(bool with_k = false) const;
};

void add_spec_flags(CLI::App* sub, SpecFlags& flags);

}  // namespace eaglevk::cli
