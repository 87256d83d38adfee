#pragma once
// The speculation flags shared by run, eval and bench: -k for chain drafting, and SGLang's
// --spec-steps / --spec-topk / --spec-draft-tokens for tree drafting; and the seed run and
// eval draw when --seed is not given.
#include <cstdint>
#include <filesystem>
#include <vector>
#include <string>

#include <CLI/CLI.hpp>

#include <eaglevk/eaglevk.hpp>

namespace eaglevk::cli {

struct SpecFlags {
  uint32_t k = 3;
  uint32_t steps = 0, topk = 0;
  std::string draft_tokens;  // a count, or "auto"
  CLI::Option* k_option = nullptr;

  bool tree() const { return steps > 0 || topk > 0 || !draft_tokens.empty(); }
  bool auto_tokens() const { return draft_tokens == "auto"; }
  // The tree's shape; fails naming the flag when it is incomplete or invalid. With
  // --spec-draft-tokens auto, draft_tokens is 0 and steps/topk are the search's bounds
  // (--spec-steps and --spec-topk when given, else 8 and 8): resolve_tree decides.
  // bench measures the chain (-k) and the tree side by side, so it allows both.
  engine::TreeParams tree_params(bool with_k = false) const;
  // -k within 1..api::speculation_limits().chain_draft_tokens; a usage error otherwise.
  void check_chain() const;
};

void add_spec_flags(CLI::App* sub, SpecFlags& flags);

// `tree` itself, or for --spec-draft-tokens auto the shape api::auto_tree chooses after
// calibrating on `prompts` (its report goes to stderr).
engine::TreeParams resolve_tree(const api::Model& m, const engine::TreeParams& tree,
                                const std::vector<std::vector<int32_t>>& prompts);

// A random seed for a run at temperature > 0 without --seed, printed on stderr so that the run
// can be repeated.
uint64_t announced_random_seed();

}  // namespace eaglevk::cli
