#include "apps/cli/spec_flags.h"

#include <charconv>

#include <fmt/format.h>

#include <eaglevk/error.h>

namespace eaglevk::cli {

void add_spec_flags(CLI::App* sub, SpecFlags& f) {
  f.k_option = sub->add_option("-k,--num-spec-tokens", f.k, "chain drafting: draft tokens per round (with -d)")
                   ->capture_default_str();
  sub->add_option("--spec-steps", f.steps,
                  "tree drafting: draft levels (SGLang's --speculative-num-steps; EAGLE's depth + 1)");
  sub->add_option("--spec-topk", f.topk, "tree drafting: children per expanded node (default 1)");
  sub->add_option("--spec-draft-tokens", f.draft_tokens,
                  "tree drafting: verified tokens per round including the root (default with top-k 1: steps + 1)");
}

engine::TreeParams SpecFlags::tree_params(bool with_k) const {
  if (!with_k && k_option && k_option->count() > 0)
    fail("-k chooses chain drafting; give either -k or the --spec-* tree flags, not both");
  engine::TreeParams t;
  t.steps = steps;
  t.topk = topk ? topk : 1;
  if (steps == 0) fail("tree drafting needs --spec-steps (draft levels, 1..16)");
  if (auto_tokens()) fail("--spec-draft-tokens auto is not implemented yet; give a count");
  if (draft_tokens.empty()) {
    if (t.topk != 1) fail("tree drafting with --spec-topk {} needs --spec-draft-tokens", t.topk);
    t.draft_tokens = steps + 1;  // the chain: every level's single node
  } else {
    uint32_t m = 0;
    auto [end, ec] = std::from_chars(draft_tokens.data(), draft_tokens.data() + draft_tokens.size(), m);
    if (ec != std::errc() || end != draft_tokens.data() + draft_tokens.size())
      fail("--spec-draft-tokens must be a token count, got '{}'", draft_tokens);
    t.draft_tokens = m;
  }
  engine::check_tree_params(t);
  return t;
}

}  // namespace eaglevk::cli
