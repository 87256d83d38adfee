// Continuing a sequence (GenerationOptions::reuse_prefix): a chat's next turn keeps the KV
// caches of the turns before it and prefills only what is new. At temperature 0 every
// continuation must give the tokens and acceptance counts of re-prefilling the whole prompt on
// a fresh decoder, for plain decoding, chain and tree speculation, when the new
// prompt extends the old sequence, repeats it, or leaves it part-way through.
#include <fmt/format.h>

#include "runtime/engine/generate.h"
#include "runtime/engine/decoder.h"
#include "support/decoding.h"
#include "support/gpu_fixture.h"
#include "support/pairs.h"

namespace eaglevk::testing {
namespace {

constexpr uint32_t kContext = 512;

engine::GenerationOptions options(bool reuse) {
  engine::GenerationOptions o;
  o.n_predict = 12;
  o.ignore_eos = true;
  o.reuse_prefix = reuse;
  return o;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b, size_t b_from = 0) {
  a.insert(a.end(), b.begin() + std::min(b_from, b.size()), b.end());
  return a;
}

// The follow-up prompts of a conversation that starts with `first` and answered `answer`:
// the answer and a new turn appended; the same first prompt again; the first prompt cut short
// and continued differently (the cache is left part-way through); a prompt that shares only
// its first token.
struct Step {
  std::string what;
  std::vector<int32_t> prompt;
  // At least this many positions come from the cache: all but the last common token (the
  // draft's row before it was computed with the token after it).
  uint32_t min_reused;
};

std::vector<Step> follow_ups(const Golden& g, const std::vector<int32_t>& first, const std::vector<int32_t>& answer) {
  const std::vector<int32_t>& other = g.prompts[1].prompt_ids;
  std::vector<Step> steps;
  const std::vector<int32_t> turn2 = concat(concat(first, answer), other, 1);
  steps.push_back({"next turn", turn2, uint32_t(first.size()) - 1});
  steps.push_back({"a third turn", concat(turn2, g.prompts[2].prompt_ids, 1), uint32_t(turn2.size()) - 1});
  steps.push_back({"the first prompt again", first, 0});
  std::vector<int32_t> cut(first.begin(), first.begin() + first.size() / 2);
  steps.push_back({"cut and continued otherwise", concat(cut, other, 1), uint32_t(cut.size()) - 1});
  steps.push_back({"only the first token shared", concat({first[0]}, g.prompts[3].prompt_ids, 1), 0});
  return steps;
}

void expect_same_as_fresh(const std::string& label, const engine::GenerationResult& reused,
                          const engine::GenerationResult& fresh, const Step& step) {
  EXPECT_EQ(reused.tokens, fresh.tokens) << label << ": " << step.what;
  EXPECT_GE(reused.reused_tokens, step.min_reused) << label << ": " << step.what;
  EXPECT_LT(reused.reused_tokens, step.prompt.size()) << label << ": " << step.what;
  EXPECT_EQ(fresh.reused_tokens, 0u);
}

// Pair A plain, pair B chained (the MoE target), pair A with a tree: each path once.
TEST(Continuation, PlainDecodingEqualsReprefilling) {
  for (const char* name : {"A"}) {
    Pair& p = pair(name);
    engine::Decoder runner = plain_decoder(p.target, kContext, 64);
    engine::Decoder fresh = plain_decoder(p.target, kContext, 64);
    const std::vector<int32_t>& first = p.golden.prompts[0].prompt_ids;
    const engine::GenerationResult r1 = testing::generate(runner, first, options(true));
    EXPECT_EQ(r1.reused_tokens, 0u) << "nothing to reuse yet";
    for (const Step& step : follow_ups(p.golden, first, r1.tokens)) {
      const engine::GenerationResult got = testing::generate(runner, step.prompt, options(true));
      const engine::GenerationResult want = testing::generate(fresh, step.prompt, options(false));
      expect_same_as_fresh(fmt::format("pair {} plain", name), got, want, step);
    }
  }
}

void check_speculative(Pair& p, const std::string& label, const engine::TreeParams& tree) {
  auto make = [&] {
    return tree.enabled() ? tree_decoder(p.target, p.draft, kContext, tree, 64)
                          : chain_decoder(p.target, p.draft, kContext, 3, 64);
  };
  engine::Decoder decoder = make(), fresh = make();
  // A tree shows the draft's own numbers: each node's cumulative log-probability. The first
  // tree of a generation is drafted from the caught-up cache, so a stale draft row moves it.
  std::vector<float> got_scores, want_scores;
  decoder.set_tree_observer([&](const engine::TreeRound& t) {
    if (got_scores.empty()) got_scores = t.scores;
  });
  fresh.set_tree_observer([&](const engine::TreeRound& t) {
    if (want_scores.empty()) want_scores = t.scores;
  });
  const std::vector<int32_t>& first = p.golden.prompts[0].prompt_ids;
  engine::SpecStats s1;
  const engine::GenerationResult r1 = decoder.generate(first, options(true), s1);
  for (const Step& step : follow_ups(p.golden, first, r1.tokens)) {
    engine::SpecStats got_stats, want_stats;
    got_scores.clear();
    want_scores.clear();
    const engine::GenerationResult got = decoder.generate(step.prompt, options(true), got_stats);
    const engine::GenerationResult want = fresh.generate(step.prompt, options(false), want_stats);
    expect_same_as_fresh(label, got, want, step);
    ASSERT_EQ(got_scores.size(), want_scores.size()) << label << ": " << step.what;
    for (size_t i = 0; i < got_scores.size(); ++i)
      EXPECT_NEAR(got_scores[i], want_scores[i], 1e-4) << label << ": " << step.what << ", node " << i;
    // The draft's cache is continued too: a stale or shifted row would show as other
    // acceptance (the target alone decides the tokens).
    EXPECT_EQ(got_stats.num_drafts, want_stats.num_drafts) << label << ": " << step.what;
    EXPECT_EQ(got_stats.num_accepted_tokens, want_stats.num_accepted_tokens) << label << ": " << step.what;
  }
}

TEST(Continuation, ChainSpeculationEqualsReprefilling) { check_speculative(pair("B"), "pair B k=3", {}); }

TEST(Continuation, TreeSpeculationEqualsReprefilling) {
  engine::TreeParams tree;
  tree.steps = 3;
  tree.topk = 4;
  tree.draft_tokens = 8;
  check_speculative(pair("A"), "pair A tree 3/4/8", tree);
}

// Anything else that writes the caches forgets them: after a timing pass nothing is reused.
TEST(Continuation, TimingPassForgetsTheCache) {
  Pair& p = pair("A");
  engine::Decoder decoder = chain_decoder(p.target, p.draft, kContext, 3, 64);
  const std::vector<int32_t>& first = p.golden.prompts[0].prompt_ids;
  engine::SpecStats stats;
  decoder.generate(first, options(true), stats);
  decoder.time_pass(false, 4, 1);
  EXPECT_EQ(decoder.generate(first, options(true), stats).reused_tokens, 0u);
}

}  // namespace
}  // namespace eaglevk::testing
