// Generation through the C API: greedy output equals the reference's with and without the
// draft, the callback's pieces are the text, the statistics add up; a full context, bad ids,
// a small out buffer and the callback's stop; seeded sampling; freeing handles in any order.
#include <eaglevk/eaglevk.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "support/capi.h"

namespace eaglevk::testing {
namespace {

// Through the C API, greedy output is the reference's greedy output, with and without the draft.
TEST_F(CApi, GenerateMatchesGoldenWithAndWithoutSpeculation) {
  Shared& s = shared();
  const uint32_t n = 24;
  const GoldenPrompt& g = s.golden.prompts[0];
  std::vector<int32_t> want(g.greedy_ids.begin(), g.greedy_ids.begin() + n);
  for (auto [model, k] : {std::pair{s.plain, 3u}, std::pair{s.pair, 0u}, std::pair{s.pair, 3u}, std::pair{s.pair, 1u}}) {
    eaglevk_session* ses = session(model, k, n);
    Generated r = generate(ses, g.prompt_ids, n);
    ASSERT_EQ(r.status, EAGLEVK_OK) << eaglevk_last_error();
    EXPECT_EQ(r.tokens, want) << "draft " << (model == s.pair) << " k " << k;
    EXPECT_EQ(r.streamed, want);
    // The streamed pieces are the decoded text.
    std::vector<char> text(4096);
    size_t len = 0;
    EXPECT_STATUS(eaglevk_detokenize(model, want.data(), want.size(), 1, text.data(), text.size(), &len), EAGLEVK_OK);
    EXPECT_EQ(r.text, std::string(text.data(), len));
    EXPECT_EQ(r.stats.num_output_tokens, n);
    if (model == s.pair && k > 0) {
      EXPECT_GT(r.stats.num_drafts, 0u);
      EXPECT_EQ(r.stats.num_draft_tokens, k * r.stats.num_drafts);
      EXPECT_GT(r.stats.num_accepted_tokens, 0u);
      EXPECT_EQ(r.stats.num_positions, k);
      ASSERT_EQ(r.acceptance.size(), k);
      double sum = 1;
      for (double a : r.acceptance) sum += a;
      EXPECT_NEAR(r.stats.mean_acceptance_length, sum, 1e-9);
      EXPECT_NEAR(r.stats.mean_acceptance_length, 1 + double(r.stats.num_accepted_tokens) / r.stats.num_drafts, 1e-9);
      // A short array gets the first rates only.
      double first[2] = {-1, -1};
      eaglevk_spec_stats again{};
      EXPECT_STATUS(eaglevk_session_get_stats(ses, &again, first, 1), EAGLEVK_OK);
      EXPECT_EQ(again.num_positions, k);
      EXPECT_EQ(first[0], r.acceptance[0]);
      EXPECT_EQ(first[1], -1);
    } else {
      EXPECT_EQ(r.stats.num_drafts, 0u);
      EXPECT_EQ(r.stats.num_positions, 0u);
      EXPECT_EQ(r.stats.mean_acceptance_length, 1.0);
    }
    eaglevk_session_free(ses);
  }
}

// eaglevk_continue appends the next turn to the sequence and keeps its caches: the tokens equal
// generating from the whole conversation on a fresh session, plain and speculative; without a
// sequence it is eaglevk_generate; a sequence that would not fit, or a bad id, is refused and
// the session keeps its sequence.
TEST_F(CApi, ContinueEqualsGeneratingTheWholeSequence) {
  Shared& s = shared();
  const uint32_t n = 8;
  const std::vector<int32_t>& first = s.golden.prompts[0].prompt_ids;
  const std::vector<int32_t> next(s.golden.prompts[1].prompt_ids.begin() + 1, s.golden.prompts[1].prompt_ids.end());
  for (auto [model, k] : {std::pair{s.plain, 0u}, std::pair{s.pair, 3u}}) {
    eaglevk_session* ses = session(model, k, n);
    eaglevk_session* fresh = session(model, k, n);
    // No sequence yet: the same as generate.
    Generated r1 = generate(ses, first, n, -1, /*append=*/true);
    ASSERT_EQ(r1.status, EAGLEVK_OK) << r1.error;
    EXPECT_EQ(r1.tokens, generate(fresh, first, n).tokens);
    std::vector<int32_t> whole = first;
    whole.insert(whole.end(), r1.tokens.begin(), r1.tokens.end());
    for (int turn = 0; turn < 1; ++turn) {
      Generated r = generate(ses, next, n, -1, true);
      ASSERT_EQ(r.status, EAGLEVK_OK) << r.error;
      whole.insert(whole.end(), next.begin(), next.end());
      EXPECT_EQ(r.tokens, generate(fresh, whole, n).tokens) << "k " << k << " turn " << turn;
      whole.insert(whole.end(), r.tokens.begin(), r.tokens.end());
    }
    // Refused: the sequence is kept, and the next continuation still equals the whole.
    std::vector<int32_t> too_long(512, next[0]);
    EXPECT_EQ(generate(ses, too_long, n, -1, true).status, EAGLEVK_ERROR_CONTEXT_FULL);
    EXPECT_EQ(generate(ses, {1 << 30}, n, -1, true).status, EAGLEVK_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(generate(ses, {}, n, -1, true).status, EAGLEVK_ERROR_INVALID_ARGUMENT);
    Generated r = generate(ses, next, n, -1, true);
    ASSERT_EQ(r.status, EAGLEVK_OK) << r.error;
    whole.insert(whole.end(), next.begin(), next.end());
    EXPECT_EQ(r.tokens, generate(fresh, whole, n).tokens) << "after the refusals";
    eaglevk_session_free(fresh);
    eaglevk_session_free(ses);
  }
}

// Stop strings: the output ends with the token that completed the text, the pieces before the
// text; the sampling scheme at T > 0 is the caller's choice (drafts drawn from the draft by
// default, its argmax with greedy_drafts).
TEST_F(CApi, StopStringsAndTheSamplingScheme) {
  Shared& s = shared();
  const uint32_t n = 16;
  const GoldenPrompt& g = s.golden.prompts[0];
  std::vector<int32_t> want(g.greedy_ids.begin(), g.greedy_ids.begin() + n);
  std::vector<char> buf(4096);
  size_t len = 0;
  ASSERT_EQ(eaglevk_detokenize(s.pair, want.data(), want.size(), 1, buf.data(), buf.size(), &len), EAGLEVK_OK);
  const std::string text(buf.data(), len);
  ASSERT_GT(text.size(), 10u);
  const std::string stop = text.substr(text.size() / 2, 3);
  const char* stops[] = {"text that never comes", stop.c_str()};
  for (uint32_t k : {0u, 3u}) {
    eaglevk_session_params p = eaglevk_session_params_default();
    p.k = k;
    p.max_new_tokens = n;
    p.ignore_eos = 1;
    p.stop_strings = stops;
    p.stop_count = 2;
    eaglevk_session* ses = nullptr;
    ASSERT_EQ(eaglevk_session_create(s.pair, &p, &ses), EAGLEVK_OK) << eaglevk_last_error();
    Generated r = generate(ses, g.prompt_ids, n);
    ASSERT_EQ(r.status, EAGLEVK_OK) << r.error;
    EXPECT_EQ(r.text, text.substr(0, text.find(stop))) << "k " << k;
    ASSERT_FALSE(r.tokens.empty());
    EXPECT_TRUE(std::equal(r.tokens.begin(), r.tokens.end(), want.begin()));
    std::vector<int32_t> shorter(r.tokens.begin(), r.tokens.end() - 1);
    ASSERT_EQ(eaglevk_detokenize(s.pair, shorter.data(), shorter.size(), 1, buf.data(), buf.size(), &len), EAGLEVK_OK);
    EXPECT_EQ(std::string(buf.data(), len).find(stop), std::string::npos) << "went on past the stop string";
    eaglevk_session_free(ses);
  }
  eaglevk_session_params p = eaglevk_session_params_default();
  p.stop_count = 1;
  eaglevk_session* ses = nullptr;
  EXPECT_STATUS(eaglevk_session_create(s.pair, &p, &ses), EAGLEVK_ERROR_INVALID_ARGUMENT);
  const char* empty[] = {""};
  p.stop_strings = empty;
  EXPECT_STATUS(eaglevk_session_create(s.pair, &p, &ses), EAGLEVK_ERROR_INVALID_ARGUMENT);

  // The two schemes draw differently with the same seed; each is reproducible.
  std::vector<std::vector<int32_t>> outs;
  for (int greedy_drafts : {0, 1, 0}) {
    eaglevk_session_params q = eaglevk_session_params_default();
    q.temperature = 0.8f;
    q.seed = 11;
    q.max_new_tokens = 32;
    q.ignore_eos = 1;
    q.greedy_drafts = greedy_drafts;
    ASSERT_EQ(eaglevk_session_create(s.pair, &q, &ses), EAGLEVK_OK) << eaglevk_last_error();
    Generated r = generate(ses, g.prompt_ids, 32);
    ASSERT_EQ(r.status, EAGLEVK_OK) << r.error;
    outs.push_back(r.tokens);
    eaglevk_session_free(ses);
  }
  EXPECT_NE(outs[0], outs[1]);
  EXPECT_EQ(outs[0], outs[2]);
}

// Log-probabilities through the C API: the first step's most likely tokens are the
// reference's; each entry is its token's; bad requests are refused.
TEST_F(CApi, Logprobs) {
  Shared& s = shared();
  const GoldenPrompt& g = s.golden.prompts[0];
  eaglevk_session_params p = eaglevk_session_params_default();
  p.max_new_tokens = 8;
  p.ignore_eos = 1;
  p.logprobs = 5;
  eaglevk_session* ses = nullptr;
  ASSERT_EQ(eaglevk_session_create(s.pair, &p, &ses), EAGLEVK_OK) << eaglevk_last_error();
  Generated r = generate(ses, g.prompt_ids, 8);
  ASSERT_EQ(r.status, EAGLEVK_OK) << r.error;
  for (size_t i = 0; i < r.tokens.size(); ++i) {
    float lp = 1;
    int32_t ids[8];
    float lps[8];
    size_t n = 0;
    EXPECT_STATUS(eaglevk_session_get_logprobs(ses, i, &lp, ids, lps, 8, &n), EAGLEVK_OK);
    ASSERT_EQ(n, 5u);
    EXPECT_EQ(ids[0], r.tokens[i]) << "greedy picks the most likely token";
    EXPECT_EQ(lp, lps[0]);
    EXPECT_LT(lp, 0.0f);
    if (i == 0) {
      for (size_t j = 0; j < 5; ++j) EXPECT_EQ(ids[j], g.top5_ids[j]) << "rank " << j;
    }
  }
  float lp = 0;
  EXPECT_STATUS(eaglevk_session_get_logprobs(ses, r.tokens.size(), &lp, nullptr, nullptr, 0, nullptr),
                EAGLEVK_ERROR_INVALID_ARGUMENT);
  EXPECT_STATUS(eaglevk_session_get_logprobs(ses, 0, &lp, nullptr, nullptr, 3, nullptr), EAGLEVK_ERROR_INVALID_ARGUMENT);
  eaglevk_session_free(ses);
  eaglevk_session* plain = session(s.pair, 3, 4);
  ASSERT_EQ(generate(plain, g.prompt_ids, 4).status, EAGLEVK_OK);
  EXPECT_STATUS(eaglevk_session_get_logprobs(plain, 0, &lp, nullptr, nullptr, 0, nullptr), EAGLEVK_ERROR_INVALID_ARGUMENT);
  eaglevk_session_free(plain);
  p.logprobs = 21;
  EXPECT_STATUS(eaglevk_session_create(s.pair, &p, &ses), EAGLEVK_ERROR_INVALID_ARGUMENT);
}

// GGUF files load through the same call: llama.cpp's F16 conversion of the target with its
// Q8_0 draft gives the reference's greedy output, with the GGUF's own tokenizer.
TEST_F(CApi, GgufPairGeneratesTheGoldenTokens) {
  Shared& s = shared();
  const std::string dir = asset("gguf/tiny-llama3");
  eaglevk_model* m = nullptr;
  ASSERT_EQ(eaglevk_model_load(s.runtime, (dir + "/tiny-llama3-f16.gguf").c_str(),
                               (dir + "/tiny-llama3-eagle3-q8_0.gguf").c_str(), &m),
            EAGLEVK_OK)
      << eaglevk_last_error();
  EXPECT_EQ(tokenize(m, "The modules"), tokenize(s.plain, "The modules"));
  const uint32_t n = 24;
  const GoldenPrompt& g = s.golden.prompts[0];
  std::vector<int32_t> want(g.greedy_ids.begin(), g.greedy_ids.begin() + n);
  for (uint32_t k : {0u, 3u}) {
    eaglevk_session* ses = session(m, k, n);
    Generated r = generate(ses, g.prompt_ids, n);
    ASSERT_EQ(r.status, EAGLEVK_OK) << eaglevk_last_error();
    EXPECT_EQ(r.tokens, want) << "k " << k;
    if (k > 0) {
      EXPECT_GT(r.stats.num_accepted_tokens, 0u);
    }
    eaglevk_session_free(ses);
  }
  eaglevk_model_free(m);
}

TEST_F(CApi, GenerateErrorsAndStops) {
  Shared& s = shared();
  const GoldenPrompt& g = s.golden.prompts[1];
  const uint32_t context = uint32_t(g.prompt_ids.size()) + 4;
  for (uint32_t k : {0u, 3u}) {
    eaglevk_session* ses = session(s.pair, k, 8, context);
    // A prompt that leaves no room, or more than fills the context.
    std::vector<int32_t> full = g.prompt_ids;
    full.resize(context, 100);
    Generated r = generate(ses, full, 8);
    EXPECT_EQ(r.status, EAGLEVK_ERROR_CONTEXT_FULL);
    EXPECT_NE(r.error.find("context"), std::string::npos) << r.error;
    full.resize(context * 3, 100);
    EXPECT_EQ(generate(ses, full, 8).status, EAGLEVK_ERROR_CONTEXT_FULL);
    // Ids outside the vocabulary never reach the device.
    std::vector<int32_t> bad = {4091, 4096};
    EXPECT_EQ(generate(ses, bad, 8).status, EAGLEVK_ERROR_INVALID_ARGUMENT);
    bad = {4091, -1};
    EXPECT_EQ(generate(ses, bad, 8).status, EAGLEVK_ERROR_INVALID_ARGUMENT);
    // The out buffer must hold max_new_tokens; the count needed comes back and nothing runs.
    size_t n = 0;
    std::vector<int32_t> small(7, -3);
    EXPECT_STATUS(eaglevk_generate(ses, g.prompt_ids.data(), g.prompt_ids.size(), nullptr, nullptr, small.data(),
                                   small.size(), &n),
                  EAGLEVK_ERROR_BUFFER_TOO_SMALL);
    EXPECT_EQ(n, 8u);
    EXPECT_EQ(small, std::vector<int32_t>(7, -3));
    // The context fills: generation stops there, successfully.
    r = generate(ses, g.prompt_ids, 8);
    ASSERT_EQ(r.status, EAGLEVK_OK) << eaglevk_last_error();
    EXPECT_EQ(r.tokens.size(), 5u);  // 4 free positions, and the last token needs none
    EXPECT_EQ(r.tokens, std::vector<int32_t>(g.greedy_ids.begin(), g.greedy_ids.begin() + 5));
    // The callback stops it.
    r = generate(ses, g.prompt_ids, 8, /*stop_after=*/2);
    ASSERT_EQ(r.status, EAGLEVK_OK) << eaglevk_last_error();
    EXPECT_EQ(r.tokens, std::vector<int32_t>(g.greedy_ids.begin(), g.greedy_ids.begin() + 2)) << "k " << k;
    // No out buffer at all.
    EXPECT_STATUS(eaglevk_generate(ses, g.prompt_ids.data(), g.prompt_ids.size(), nullptr, nullptr, nullptr, 0, &n),
                  EAGLEVK_OK);
    EXPECT_EQ(n, 5u);
    eaglevk_session_free(ses);
  }
}

// Seeded sampling repeats itself and depends on the seed, with and without the draft.
TEST_F(CApi, SeededSampling) {
  Shared& s = shared();
  const std::vector<int32_t>& prompt = s.golden.prompts[2].prompt_ids;
  for (uint32_t k : {0u, 3u}) {
    auto sample = [&](uint64_t seed) {
      eaglevk_session_params p = eaglevk_session_params_default();
      p.k = k;
      p.temperature = 1.5f;
      p.top_p = 0.95f;
      p.seed = seed;
      p.max_new_tokens = 10;
      p.context = 256;
      p.ignore_eos = 1;
      eaglevk_session* ses = nullptr;
      EXPECT_STATUS(eaglevk_session_create(s.pair, &p, &ses), EAGLEVK_OK);
      std::vector<Generated> runs = {generate(ses, prompt, 10), generate(ses, prompt, 10)};
      eaglevk_session_free(ses);
      for (const Generated& g : runs) {
        EXPECT_EQ(g.status, EAGLEVK_OK) << g.error;
        EXPECT_EQ(g.tokens.size(), 10u);
        EXPECT_EQ(g.stats.num_drafts > 0, k > 0);
      }
      EXPECT_EQ(runs[0].tokens, runs[1].tokens) << "k " << k << " seed " << seed;
      return runs[0].tokens;
    };
    EXPECT_NE(sample(1234), sample(99)) << "k " << k;
  }
}

// Handles keep what they use alive: freeing in creation order is fine.
TEST_F(CApi, FreeInAnyOrder) {
  eaglevk_runtime* rt = nullptr;
  ASSERT_EQ(eaglevk_runtime_create(nullptr, &rt), EAGLEVK_OK) << eaglevk_last_error();
  eaglevk_model* m = nullptr;
  ASSERT_EQ(eaglevk_model_load(rt, asset("tiny-llama3").c_str(), asset("tiny-llama3-eagle3").c_str(), &m), EAGLEVK_OK)
      << eaglevk_last_error();
  const api::Device& device = api::device_of(m);
  eaglevk_runtime_destroy(rt);
  eaglevk_session* ses = session(m, 3, 6);
  eaglevk_model_free(m);
  const GoldenPrompt& g = shared().golden.prompts[0];
  Generated r = generate(ses, g.prompt_ids, 6);
  ASSERT_EQ(r.status, EAGLEVK_OK) << eaglevk_last_error();
  EXPECT_EQ(r.tokens, std::vector<int32_t>(g.greedy_ids.begin(), g.greedy_ids.begin() + 6));
  EXPECT_EQ(validation_errors(device), 0u);  // the session still holds the device
  eaglevk_session_free(ses);
}

}  // namespace
}  // namespace eaglevk::testing

namespace eaglevk::testing {
namespace {

// Tree drafting through the C API: the (EAGLE depth 3, top-k 2, 6 tokens) tree of
// tree_golden.json gives the golden tokens and rounds, and equals plain greedy output.
TEST_F(CApi, TreeDraftingMatchesTheTreeGolden) {
  Shared& s = shared();
  std::ifstream f(asset("tiny-llama3-eagle3/tree_golden.json"));
  const nlohmann::json golden = nlohmann::json::parse(f);
  const nlohmann::json* config = nullptr;
  for (const auto& c : golden.at("configs"))
    if (c.at("params").at("total_tokens") == 6) config = &c;
  ASSERT_NE(config, nullptr);
  const auto& sg = config->at("params").at("sglang");
  eaglevk_session_params p = eaglevk_session_params_default();
  EXPECT_EQ(p.spec_steps, 0u);  // the chain by default
  p.spec_steps = sg.at("speculative_num_steps").get<uint32_t>();
  p.spec_topk = sg.at("speculative_eagle_topk").get<uint32_t>();
  p.spec_draft_tokens = sg.at("speculative_num_draft_tokens").get<uint32_t>();
  p.max_new_tokens = 64;
  p.context = 512;
  p.ignore_eos = 1;
  eaglevk_session* ses = nullptr;
  ASSERT_EQ(eaglevk_session_create(s.pair, &p, &ses), EAGLEVK_OK) << eaglevk_last_error();
  for (size_t i : {0u, 7u}) {
    const auto& want = config->at("prompts").at(i);
    Generated g = generate(ses, s.golden.prompts[i].prompt_ids, 64);
    EXPECT_EQ(g.status, EAGLEVK_OK) << g.error;
    EXPECT_EQ(g.tokens, want.at("generated_ids").get<std::vector<int32_t>>()) << "prompt " << i;
    EXPECT_EQ(g.stats.num_drafts, want.at("num_drafts").get<uint64_t>()) << "prompt " << i;
    EXPECT_EQ(g.stats.num_accepted_tokens, want.at("num_accepted_tokens").get<uint64_t>()) << "prompt " << i;
  }
  eaglevk_session_free(ses);

  // At T > 0 a tree session samples the target's distribution: with one seed its output is the
  // plain session's.
  auto sampled = [&](eaglevk_model* model, eaglevk_session_params q) {
    q.temperature = 0.7f;
    q.top_p = 0.95f;
    q.seed = 5;
    q.max_new_tokens = 24;
    eaglevk_session* t = nullptr;
    EXPECT_EQ(eaglevk_session_create(model, &q, &t), EAGLEVK_OK) << eaglevk_last_error();
    Generated g = generate(t, s.golden.prompts[3].prompt_ids, 24);
    eaglevk_session_free(t);
    EXPECT_EQ(g.status, EAGLEVK_OK) << g.error;
    return g;
  };
  eaglevk_session_params plain = eaglevk_session_params_default();
  plain.context = 512;
  plain.ignore_eos = 1;
  const Generated tree_sample = sampled(s.pair, p), plain_sample = sampled(s.plain, plain);
  EXPECT_EQ(tree_sample.tokens.size(), 24u);
  EXPECT_EQ(tree_sample.tokens, plain_sample.tokens);

  // Bad shapes are refused with a message naming the field, never a CLI flag.
  auto refused = [&](eaglevk_session_params q, const char* word) {
    eaglevk_session* bad = nullptr;
    EXPECT_FAILS_WITH(eaglevk_session_create(s.pair, &q, &bad), EAGLEVK_ERROR_INVALID_ARGUMENT, word);
    EXPECT_EQ(std::string(eaglevk_last_error()).find("--"), std::string::npos) << eaglevk_last_error();
    EXPECT_EQ(bad, nullptr);
  };
  eaglevk_session_params q = p;
  q.spec_draft_tokens = 3;
  refused(q, "eaglevk_session_params.spec_draft_tokens: tree draft tokens 3 cannot reach");
  q = p;
  q.spec_topk = 40;
  refused(q, "eaglevk_session_params.spec_topk: tree top-k 40 is out of range");
}

}  // namespace
}  // namespace eaglevk::testing
