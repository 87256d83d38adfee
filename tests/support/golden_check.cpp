#include "support/decoding.h"
#include "support/golden_check.h"

#include <cmath>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "runtime/engine/generate.h"
#include "support/gpu_fixture.h"

namespace eaglevk::testing {

GoldenSummary expect_matches_golden(const models::TargetModel& model, const Golden& golden, float tolerance,
                                    const std::string& label, float tie_margin) {
  if (tie_margin <= 0) tie_margin = tolerance;
  engine::Decoder runner = plain_decoder(model, 512, 64);
  GoldenSummary s;
  const size_t decoded = golden_prompts_to_decode(2, golden.prompts.size());
  for (const GoldenPrompt& p : golden.prompts) {
    const bool decode = s.prompts < decoded;
    engine::GenerationOptions o;
    o.n_predict = decode ? 64 : 1;
    o.ignore_eos = true;
    o.top_logits = 5;
    o.prompt_argmax = true;
    engine::GenerationResult r = testing::generate(runner, p.prompt_ids, o);
    ++s.prompts;
    if (decode) s.greedy.push_back(r.tokens);
    s.top5.push_back(r.prompt_top_logits);

    EXPECT_EQ(r.prompt_top_logits.size(), 5u) << label;
    for (size_t i = 0; i < 5 && i < r.prompt_top_logits.size(); ++i) {
      // Ids agree unless two golden logits are within the tolerance of each other.
      bool near_tie = (i > 0 && p.top5_logits[i - 1] - p.top5_logits[i] < tolerance) ||
                      (i < 4 && p.top5_logits[i] - p.top5_logits[i + 1] < tolerance);
      if (!near_tie) {
        EXPECT_EQ(r.prompt_top_logits[i].first, p.top5_ids[i]) << label << " prompt " << p.id << " rank " << i;
      }
      float err = std::fabs(r.prompt_top_logits[i].second - p.top5_logits[i]);
      s.worst_logit_error = std::max(s.worst_logit_error, err);
      EXPECT_LE(err, tolerance) << label << " prompt " << p.id << " rank " << i;
    }
    EXPECT_EQ(r.prompt_argmax.size(), p.prompt_argmax_ids.size()) << label;
    for (size_t i = 0; i < r.prompt_argmax.size() && i < p.prompt_argmax_ids.size(); ++i)
      s.argmax_equal += r.prompt_argmax[i] == p.prompt_argmax_ids[i];
    s.argmax_total += r.prompt_argmax.size();

    if (!decode) {
      // The first token is the last prompt position's argmax.
      if (p.greedy_margins[0] >= tie_margin) {
        EXPECT_EQ(r.tokens.front(), p.greedy_ids.front()) << label << " prompt " << p.id;
      }
      continue;
    }
    EXPECT_EQ(r.tokens.size(), 64u) << label;
    size_t step = 0;
    while (step < 64 && step < r.tokens.size() && r.tokens[step] == p.greedy_ids[step]) ++step;
    s.verified_tokens += step;
    if (step == 64) {
      ++s.full_matches;
    } else if (step < r.tokens.size()) {
      EXPECT_LT(p.greedy_margins[step], tie_margin)
          << label << " prompt " << p.id << " left the golden greedy path at step " << step
          << " where the golden top-2 margin is " << p.greedy_margins[step];
    }
  }
  // Prefill argmax: a mismatch can only come from a near-tie at that position.
  EXPECT_GE(double(s.argmax_equal) / std::max<size_t>(s.argmax_total, 1), 0.99)
      << label << ": " << s.argmax_equal << " of " << s.argmax_total;
  fmt::print("{}: {} of {} decoded prompts match all 64 greedy tokens; {} tokens verified; prefill argmax {}/{}; "
             "worst top-5 logit error {:.2e}\n",
             label, s.full_matches, s.greedy.size(), s.verified_tokens, s.argmax_equal, s.argmax_total, s.worst_logit_error);
  return s;
}

}  // namespace eaglevk::testing
