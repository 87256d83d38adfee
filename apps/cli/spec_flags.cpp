#include "apps/cli/spec_flags.h"

#include <algorithm>
#include <random>

#include <fmt/format.h>

#include <eaglevk/error.h>

#include "apps/cli/integer_flags.h"
#include "apps/cli/usage.h"

namespace eaglevk::cli {

void add_spec_flags(CLI::App* sub, SpecFlags& f) {
  const api::SpeculationLimits limits = api::speculation_limits();
  f.k_option = sub->add_option("-k,--num-spec-tokens", f.k, "chain drafting: draft tokens per round, 1..16 (with -d)")
                   ->capture_default_str()
                   ->check(integer_flag<uint32_t>());
  // The tree flags are checked against the kernels' limits as they are parsed: 0 is no way to
  // say "not given" (it once fell back to chain drafting without a word).
  sub->add_option("--spec-steps", f.steps, "tree drafting: draft levels (SGLang's --speculative-num-steps)")
      ->check(integer_in(1, limits.tree_levels));
  sub->add_option("--spec-topk", f.topk, "tree drafting: children per expanded node (default 1)")
      ->check(integer_in(1, limits.tree_topk));
  sub->add_option("--spec-draft-tokens", f.draft_tokens,
                  "tree drafting: verified tokens a round, or 'auto' (chosen per device)")
      ->check(CLI::Validator(
          [nodes = limits.tree_nodes](std::string& text) {
            return text == "auto" ? std::string() : integer_problem(text, 2, nodes);
          },
          ""));
}

engine::TreeParams SpecFlags::tree_params(bool with_k) const {
  if (!with_k && k_option && k_option->count() > 0)
    usage_fail("-k chooses chain drafting; give either -k or the --spec-* tree flags, not both");
  const uint32_t max_nodes = api::speculation_limits().tree_nodes;
  engine::TreeParams t;
  t.steps = steps;
  t.topk = topk;
  if (auto_tokens()) {
    // The search's bounds; the shape comes from resolve_tree once the models are loaded.
    t.steps = steps ? steps : 8;
    t.topk = topk ? topk : 8;
    const uint64_t pool = uint64_t(t.topk) + uint64_t(t.steps - 1) * t.topk * t.topk;
    as_usage_error(
        [&] { engine::check_tree_params({t.steps, t.topk, uint32_t(std::min<uint64_t>(max_nodes, 1 + pool))}); });
    t.draft_tokens = 0;
    return t;
  }
  if (steps == 0) usage_fail("tree drafting needs --spec-steps (draft levels, 1..16)");
  if (!draft_tokens.empty())
    t.draft_tokens = uint32_t(parse_integer(draft_tokens, "--spec-draft-tokens", 2, max_nodes));
  t = engine::tree_with_defaults(t);
  if (t.draft_tokens == 0) usage_fail("tree drafting with --spec-topk {} needs --spec-draft-tokens", t.topk);
  as_usage_error([&] { engine::check_tree_params(t); });
  return t;
}

void SpecFlags::check_chain() const {
  const uint32_t most = api::speculation_limits().chain_draft_tokens;
  if (k == 0 || k > most) usage_fail("-k must be in 1..{} draft tokens per round, got {}", most, k);
}

engine::TreeParams resolve_tree(const api::Model& m, const engine::TreeParams& tree,
                                const std::vector<std::vector<int32_t>>& prompts) {
  if (tree.draft_tokens != 0) return tree;
  std::string report;
  const engine::TreeParams shape = api::auto_tree(m, tree, prompts, &report);
  fmt::print(stderr, "{}", report);
  return shape;
}

uint64_t announced_random_seed() {
  std::random_device device;
  const uint64_t seed = (uint64_t(device()) << 32) ^ device();
  fmt::print(stderr, "eaglevk: seed {} (pass --seed {} to draw the same again)\n", seed, seed);
  return seed;
}

}  // namespace eaglevk::cli
