// Speculative sampling end to end on pair A at temperature > 0: over many seeds, the first
// token decided by verification (the 2nd of a generation) is distributed as plain sampling
// from the target (its exact distribution, worked out from the target's logits), with greedy
// drafts and with drafts sampled from the draft (both schemes), and greedy acceptance at T > 0
// (a wrong rule) is not; a seed reproduces its output. The sampler's own tests
// (sampling_test) hold the device sampler to the filtered distribution.
#include <map>

#include <fmt/format.h>

#include "runtime/engine/generate.h"
#include "runtime/engine/decoder.h"
#include "runtime/engine/sampler.h"
#include "support/decoding.h"
#include "support/target_runner.h"
#include "support/gpu_fixture.h"
#include "support/pairs.h"
#include "support/sampling_reference.h"

namespace eaglevk::testing {
namespace {

struct SpecSampling : GpuTest {};

TEST_F(SpecSampling, VerifiedTokensFollowPlainSampling) {
  Pair& p = pair("A");
  const auto& prompt = p.golden.prompts[14].prompt_ids;  // 5 tokens: cheap prefills
  const engine::SamplingParams params{0.8f, 8, 1.0f, 0};
  // The exact distribution of plain sampling's 2nd token: the 1st is drawn from the filtered
  // distribution at the prompt's end, the 2nd from the one after it.
  TargetRunner plain(gpu(), p.target, 64, 16);
  const std::map<int32_t, double> second_token = plain_sampling_distributions(plain, prompt, params, 2)[1];
  engine::Decoder spec = chain_decoder(p.target, p.draft, 64, 3, 16), wrong = chain_decoder(p.target, p.draft, 64, 3, 16),
      sampled = chain_decoder(p.target, p.draft, 64, 3, 16);
  wrong.set_accept_rule(ops::AcceptRule::AcceptIfArgmax);
  sampled.set_draft_sampling(true);  // the second scheme: drafts drawn from q
  std::vector<int32_t> spec_at, wrong_at, sampled_at;
  engine::SpecStats stats, wrong_stats, sampled_stats;
  const uint32_t seeds = 200, wrong_seeds = 100;
  for (uint32_t seed = 0; seed < seeds; ++seed) {
    engine::GenerationOptions o;
    o.n_predict = 2;
    o.ignore_eos = true;
    o.sampling = params;
    o.sampling.seed = 1000 + seed;
    // Every seed's prompt is the same: each decoder keeps its rows and runs only the last prompt
    // token again (continuation_test holds that this gives the bits of a fresh prefill).
    o.reuse_prefix = true;
    spec_at.push_back(spec.generate(prompt, o, stats).tokens[1]);
    sampled_at.push_back(sampled.generate(prompt, o, sampled_stats).tokens[1]);
    if (seed < wrong_seeds) wrong_at.push_back(wrong.generate(prompt, o, wrong_stats).tokens[1]);
  }
  // A chi-square goodness-of-fit test against the exact distribution at 99.9% (the seeds are
  // fixed, so the outcome is too); greedy acceptance at T > 0 must fail it.
  const auto [right, right_df] = chi_square_fit(spec_at, second_token);
  const auto [second, second_df] = chi_square_fit(sampled_at, second_token);
  const auto [bad, bad_df] = chi_square_fit(wrong_at, second_token);
  fmt::print("2nd token, chi-square against the exact distribution: speculative {:.1f} on {} df, draft sampling "
             "{:.1f} on {} df (99.9%: {:.1f}); greedy acceptance {:.1f} on {} df (99.9%: {:.1f})\n",
             right, right_df, second, second_df, chi_square_999(right_df), bad, bad_df, chi_square_999(bad_df));
  EXPECT_LT(right, chi_square_999(right_df));
  EXPECT_LT(second, chi_square_999(second_df));
  EXPECT_GT(bad, chi_square_999(bad_df));
  EXPECT_GT(sampled_stats.num_accepted_tokens, 0u);
  EXPECT_GT(stats.num_accepted_tokens, 0u);
}

TEST_F(SpecSampling, SameSeedSameOutput) {
  Pair& p = pair("A");
  engine::Decoder spec = chain_decoder(p.target, p.draft, 256, 3, 64);
  engine::GenerationOptions o;
  o.n_predict = 24;
  o.ignore_eos = true;
  o.sampling = {1.0f, 0, 0.95f, 77};
  engine::SpecStats s1, s2;
  auto a = spec.generate(p.golden.prompts[0].prompt_ids, o, s1).tokens;
  auto b = spec.generate(p.golden.prompts[0].prompt_ids, o, s2).tokens;
  EXPECT_EQ(a, b);
  EXPECT_EQ(s1.num_accepted_tokens, s2.num_accepted_tokens);
  o.sampling.seed = 78;
  engine::SpecStats s3;
  EXPECT_NE(spec.generate(p.golden.prompts[0].prompt_ids, o, s3).tokens, a);
  spec.set_draft_sampling(true);
  engine::SpecStats s4, s5;
  EXPECT_EQ(spec.generate(p.golden.prompts[0].prompt_ids, o, s4).tokens,
            spec.generate(p.golden.prompts[0].prompt_ids, o, s5).tokens);
}

}  // namespace
}  // namespace eaglevk::testing
