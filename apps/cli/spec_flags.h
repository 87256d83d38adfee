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
  std::string draft_tokens;  // a count, or "auto"
  CLI::Option* k_option = nullptr;

  bool tree() const { return steps > 0 || topk > 0 || !draft_tokens.empty(); }
  bool auto_tokens() const { return draft_tokens == "auto"; }
  // The tree's shape (not for "auto"); fails naming the flag when it is incomplete or invalid.
  // bench measures the chain (-k) and the tree side by side, so it allows both.
  engine::TreeParams tree_params(bool with_k = false) const;
  // "k=3" or "tree S5 K4 M16", for tables and logs.
  std::string describe(const engine::TreeParams& tree) const;
};

void add_spec_flags(CLI::App* sub, SpecFlags& flags);

}  // namespace eaglevk::cli
