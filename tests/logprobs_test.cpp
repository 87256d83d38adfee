// Token log-probabilities (GenerationOptions::logprobs): the first token's most likely tokens
// and their differences are the reference's (golden.json's top-5 logits, from Hugging Face),
// speculative decoding, chain and tree, reports the same numbers as plain decoding (its verify
// rows are bitwise the decode rows), and the chosen token's entry is its own.
#include <cmath>

#include <gtest/gtest.h>

#include <eaglevk/error.h>

#include "runtime/engine/generate.h"
#include "runtime/engine/decoder.h"
#include "support/decoding.h"
#include "support/gpu_fixture.h"
#include "support/pairs.h"

namespace eaglevk::testing {
namespace {

engine::GenerationOptions options(uint32_t logprobs) {
  engine::GenerationOptions o;
  o.n_predict = 16;
  o.ignore_eos = true;
  o.logprobs = logprobs;
  return o;
}

TEST(Logprobs, MatchTheReferenceAndSpeculationEqualsPlain) {
  for (const char* name : {"A", "B"}) {
    Pair& p = pair(name);
    for (size_t i = 0; i < 2; ++i) {
      const GoldenPrompt& g = p.golden.prompts[i];
      engine::Decoder runner = plain_decoder(p.target, 512, 64);
      const engine::GenerationResult plain = testing::generate(runner, g.prompt_ids, options(5));
      ASSERT_EQ(plain.logprobs.size(), plain.tokens.size());
      // The first step against the reference: the same top-5 ids, and log-probability
      // differences equal to the logit differences.
      const engine::TokenLogprobs& first = plain.logprobs[0];
      ASSERT_EQ(first.top.size(), 5u);
      for (size_t j = 0; j < 5; ++j) {
        EXPECT_EQ(first.top[j].first, g.top5_ids[j]) << name << " prompt " << i << " rank " << j;
        EXPECT_NEAR(first.top[j].second - first.top[0].second, g.top5_logits[j] - g.top5_logits[0], 2e-3)
            << name << " prompt " << i << " rank " << j;
      }
      double mass = 0;
      for (const engine::TokenLogprobs& t : plain.logprobs) {
        // Greedy: the chosen token is the most likely one.
        EXPECT_EQ(t.token, t.top[0].first);
        EXPECT_EQ(t.logprob, t.top[0].second);
        EXPECT_LE(t.logprob, 0.0f);
        for (size_t j = 1; j < t.top.size(); ++j) EXPECT_LE(t.top[j].second, t.top[j - 1].second);
        mass = 0;
        for (auto [id, lp] : t.top) mass += std::exp(double(lp));
        EXPECT_LE(mass, 1.0 + 1e-5);
      }
      for (size_t j = 0; j < plain.tokens.size(); ++j) EXPECT_EQ(plain.logprobs[j].token, plain.tokens[j]);

      engine::TreeParams tree;
      tree.steps = 3;
      tree.topk = 2;
      tree.draft_tokens = 6;
      engine::Decoder chain = chain_decoder(p.target, p.draft, 512, 3, 64), trees = tree_decoder(p.target, p.draft, 512, tree, 64);
      for (engine::Decoder* spec : {&chain, &trees}) {
        const char* kind = spec == &chain ? "chain" : "tree";
        engine::SpecStats stats;
        const engine::GenerationResult s = spec->generate(g.prompt_ids, options(5), stats);
        ASSERT_EQ(s.tokens, plain.tokens) << kind;
        ASSERT_EQ(s.logprobs.size(), s.tokens.size()) << kind;
        EXPECT_GT(stats.num_accepted_tokens, 0u) << "the check needs accepted drafts";
        for (size_t j = 0; j < s.tokens.size(); ++j) {
          EXPECT_EQ(s.logprobs[j].logprob, plain.logprobs[j].logprob) << kind << " " << name << " prompt " << i << " token " << j;
          EXPECT_EQ(s.logprobs[j].top, plain.logprobs[j].top) << kind << " " << name << " prompt " << i << " token " << j;
        }
      }
    }
  }
}

// At T > 0 the entry is the sampled token's, which need not be the most likely.
TEST(Logprobs, SampledTokensCarryTheirOwn) {
  Pair& p = pair("A");
  engine::Decoder runner = plain_decoder(p.target, 512, 64);
  engine::GenerationOptions o = options(3);
  o.sampling = {1.5f, 0, 1.0f, 7};
  const engine::GenerationResult r = testing::generate(runner, p.golden.prompts[0].prompt_ids, o);
  size_t not_top = 0;
  for (size_t j = 0; j < r.tokens.size(); ++j) {
    const engine::TokenLogprobs& t = r.logprobs[j];
    EXPECT_EQ(t.token, r.tokens[j]);
    EXPECT_LE(t.logprob, t.top[0].second);
    not_top += t.token != t.top[0].first;
  }
  EXPECT_GT(not_top, 0u) << "at T = 1.5 some draws are not the argmax";
}

}  // namespace
}  // namespace eaglevk::testing
