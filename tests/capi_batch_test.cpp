// Batched generation through the C API (eaglevk_batch_*): at temperature 0 each sequence's
// tokens equal eaglevk_generate's on it alone, with and without a draft, whichever sequences
// run beside it and whenever it joins; the callback's pieces, stop strings, cancelling, the
// statistics, seeded sampling; and every misuse refused by name.
#include <eaglevk/eaglevk.h>

#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "support/capi.h"

namespace eaglevk::testing {
namespace {

#define ASSERT_STATUS_OK(call) ASSERT_EQ((call), EAGLEVK_OK) << #call << ": " << eaglevk_last_error()

// Prompts of different lengths: the golden prompts and a few texts.
std::vector<std::vector<int32_t>> prompts(eaglevk_model* m) {
  std::vector<std::vector<int32_t>> out;
  for (const GoldenPrompt& g : shared().golden.prompts) out.push_back(g.prompt_ids);
  for (const char* text : {"Once upon a time", "The cat", "In a small village by the sea there lived", "Hello",
                           "A long time ago, in a land far away, a young girl found a"})
    out.push_back(tokenize(m, text));
  return out;
}

struct Sequence {
  std::vector<int32_t> streamed;
  std::string text;
  int stop_after = -1;  // the callback stops after this many tokens
};

int on_token(int32_t token, const char* piece, void* user) {
  auto* s = static_cast<Sequence*>(user);
  if (token >= 0) s->streamed.push_back(token);
  s->text += piece;
  return s->stop_after >= 0 && int(s->streamed.size()) >= s->stop_after;
}

eaglevk_batch* make_batch(eaglevk_model* m, uint32_t sequences, uint32_t k, uint32_t context = 512) {
  eaglevk_batch_params p = eaglevk_batch_params_default();
  p.sequences = sequences;
  p.k = k;
  p.context = context;
  eaglevk_batch* b = nullptr;
  EXPECT_STATUS(eaglevk_batch_create(m, &p, &b), EAGLEVK_OK);
  return b;
}

eaglevk_sequence_params greedy(uint32_t n) {
  eaglevk_sequence_params p = eaglevk_sequence_params_default();
  p.max_new_tokens = n;
  p.ignore_eos = 1;
  return p;
}

struct Taken {
  std::vector<int32_t> tokens;
  eaglevk_spec_stats stats{};
};

// Runs every prompt through a batch of `sequences`, starting each as an id frees up (so
// sequences join between rounds while others are midway), and returns each prompt's tokens.
std::vector<Taken> run_batch(eaglevk_model* m, uint32_t sequences, uint32_t k, const std::vector<std::vector<int32_t>>& ps,
                             const eaglevk_sequence_params& params, std::vector<Sequence>* streams = nullptr) {
  eaglevk_batch* b = make_batch(m, sequences, k);
  std::vector<Taken> out(ps.size());
  std::vector<Sequence> local(ps.size());
  std::vector<Sequence>& seqs = streams ? *streams : local;
  seqs.resize(ps.size());
  std::map<uint32_t, size_t> running;  // id -> prompt
  size_t next = 0;
  std::vector<uint32_t> done(sequences);
  for (int guard = 0; guard < 10000; ++guard) {
    while (next < ps.size() && running.size() < sequences) {
      uint32_t id = 99;
      EXPECT_STATUS(eaglevk_batch_start(b, ps[next].data(), ps[next].size(), &params, on_token, &seqs[next], &id),
                    EAGLEVK_OK);
      EXPECT_LT(id, sequences);
      running[id] = next++;
    }
    if (running.empty()) break;
    size_t n = 0;
    EXPECT_STATUS(eaglevk_batch_step(b, done.data(), done.size(), &n), EAGLEVK_OK);
    for (size_t i = 0; i < n; ++i) {
      const size_t p = running.at(done[i]);
      size_t count = 0;
      std::vector<int32_t> tokens(params.max_new_tokens + 1, -7);
      EXPECT_STATUS(eaglevk_batch_take(b, done[i], tokens.data(), tokens.size(), &count, &out[p].stats), EAGLEVK_OK);
      tokens.resize(count);
      out[p].tokens = tokens;
      running.erase(done[i]);
    }
  }
  int still = 1;
  EXPECT_STATUS(eaglevk_batch_running(b, &still), EAGLEVK_OK);
  EXPECT_EQ(still, 0);
  eaglevk_batch_free(b);
  return out;
}

// At temperature 0 each sequence equals its own eaglevk_generate, plain and speculative, in
// batches of 1, 3 and 8 where later prompts join as earlier ones finish.
TEST_F(CApi, BatchEqualsEachSequenceAlone) {
  Shared& s = shared();
  const uint32_t n = 20;
  for (auto [model, k] : {std::pair{s.plain, 0u}, std::pair{s.pair, 3u}}) {
    const auto ps = prompts(model);
    std::vector<std::vector<int32_t>> alone;
    eaglevk_session* ses = session(model, k, n);
    for (const auto& p : ps) alone.push_back(generate(ses, p, n).tokens);
    eaglevk_session_free(ses);
    for (uint32_t sequences : {1u, 3u, 8u}) {
      std::vector<Sequence> streams;
      const std::vector<Taken> got = run_batch(model, sequences, k, ps, greedy(n), &streams);
      for (size_t i = 0; i < ps.size(); ++i) {
        EXPECT_EQ(got[i].tokens, alone[i]) << "prompt " << i << " batch " << sequences << " k " << k;
        EXPECT_EQ(streams[i].streamed, alone[i]);
        // The pieces are the decoded text.
        std::vector<char> text(4096);
        size_t len = 0;
        EXPECT_STATUS(eaglevk_detokenize(model, alone[i].data(), alone[i].size(), 1, text.data(), text.size(), &len),
                      EAGLEVK_OK);
        EXPECT_EQ(streams[i].text, std::string(text.data(), len));
        EXPECT_EQ(got[i].stats.num_output_tokens, n);
        if (k > 0) {
          EXPECT_GT(got[i].stats.num_drafts, 0u);
          EXPECT_EQ(got[i].stats.num_draft_tokens, k * got[i].stats.num_drafts);
          EXPECT_NEAR(got[i].stats.mean_acceptance_length,
                      1 + double(got[i].stats.num_accepted_tokens) / got[i].stats.num_drafts, 1e-9);
        } else {
          EXPECT_EQ(got[i].stats.num_drafts, 0u);
        }
      }
    }
  }
}

// Seeded sampling with drafts drawn from the draft: a sequence's tokens do not depend on the
// sequences beside it (random draws are keyed by position and seed).
TEST_F(CApi, SeededSamplingIsTheSameInAnyBatch) {
  Shared& s = shared();
  const uint32_t n = 16;
  const auto ps = prompts(s.pair);
  eaglevk_sequence_params p = greedy(n);
  p.temperature = 0.8f;
  p.top_k = 20;
  p.seed = 1234;
  const std::vector<Taken> one = run_batch(s.pair, 1, 3, ps, p);
  const std::vector<Taken> eight = run_batch(s.pair, 8, 3, ps, p);
  for (size_t i = 0; i < ps.size(); ++i) {
    EXPECT_EQ(one[i].tokens.size(), n);
    EXPECT_EQ(eight[i].tokens, one[i].tokens) << "prompt " << i;
  }
  // And they are the session's at the same seed.
  eaglevk_session_params sp = eaglevk_session_params_default();
  sp.k = 3;
  sp.max_new_tokens = n;
  sp.context = 512;
  sp.ignore_eos = 1;
  sp.temperature = p.temperature;
  sp.top_k = p.top_k;
  sp.seed = p.seed;
  eaglevk_session* ses = nullptr;
  ASSERT_STATUS_OK(eaglevk_session_create(s.pair, &sp, &ses));
  for (size_t i = 0; i < ps.size(); ++i) EXPECT_EQ(generate(ses, ps[i], n).tokens, one[i].tokens) << "prompt " << i;
  eaglevk_session_free(ses);
}

// Stop strings end a sequence as they end a session's; the callback's stop and cancel end it
// early with a prefix of its tokens.
TEST_F(CApi, StopStringsCallbackStopAndCancel) {
  Shared& s = shared();
  const uint32_t n = 24;
  const std::vector<int32_t> prompt = s.golden.prompts[0].prompt_ids;
  eaglevk_session* ses = session(s.pair, 3, n);
  const Generated whole = generate(ses, prompt, n);
  eaglevk_session_free(ses);
  ASSERT_EQ(whole.tokens.size(), n);
  // A stop string: the text of tokens 6..7.
  std::vector<char> buf(512);
  size_t len = 0;
  ASSERT_STATUS_OK(eaglevk_detokenize(s.pair, whole.tokens.data() + 6, 2, 1, buf.data(), buf.size(), &len));
  const std::string stop(buf.data(), len);
  ASSERT_FALSE(stop.empty());
  const char* stops[] = {stop.c_str()};
  eaglevk_sequence_params p = greedy(n);
  p.stop_strings = stops;
  p.stop_count = 1;
  eaglevk_session_params sp = eaglevk_session_params_default();
  sp.k = 3;
  sp.max_new_tokens = n;
  sp.context = 512;
  sp.ignore_eos = 1;
  sp.stop_strings = stops;
  sp.stop_count = 1;
  ASSERT_STATUS_OK(eaglevk_session_create(s.pair, &sp, &ses));
  const Generated stopped = generate(ses, prompt, n);
  eaglevk_session_free(ses);
  ASSERT_LT(stopped.tokens.size(), n);
  std::vector<Sequence> streams;
  const std::vector<Taken> got = run_batch(s.pair, 2, 3, {prompt, prompt}, p, &streams);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(got[i].tokens, stopped.tokens);
    EXPECT_EQ(streams[i].text, stopped.text);
    EXPECT_EQ(streams[i].text.find(stop), std::string::npos);
  }

  // The callback stops one sequence after 5 tokens; cancel stops another.
  eaglevk_batch* b = make_batch(s.pair, 3, 3);
  Sequence a, c, d;
  a.stop_after = 5;
  const eaglevk_sequence_params g = greedy(n);
  uint32_t ia = 0, ic = 0, id = 0;
  ASSERT_STATUS_OK(eaglevk_batch_start(b, prompt.data(), prompt.size(), &g, on_token, &a, &ia));
  ASSERT_STATUS_OK(eaglevk_batch_start(b, prompt.data(), prompt.size(), &g, on_token, &c, &ic));
  ASSERT_STATUS_OK(eaglevk_batch_start(b, prompt.data(), prompt.size(), &g, on_token, &d, &id));
  std::vector<uint32_t> done(3);
  size_t count = 0;
  ASSERT_STATUS_OK(eaglevk_batch_step(b, done.data(), done.size(), &count));
  ASSERT_STATUS_OK(eaglevk_batch_cancel(b, ic));
  std::map<uint32_t, std::vector<int32_t>> out;
  for (int guard = 0; guard < 100 && out.size() < 3; ++guard) {
    ASSERT_STATUS_OK(eaglevk_batch_step(b, done.data(), done.size(), &count));
    for (size_t i = 0; i < count; ++i) {
      std::vector<int32_t> t(n);
      size_t m = 0;
      ASSERT_STATUS_OK(eaglevk_batch_take(b, done[i], t.data(), t.size(), &m, nullptr));
      t.resize(m);
      out[done[i]] = t;
    }
  }
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[ia].size(), 5u);
  EXPECT_LT(out[ic].size(), n);
  EXPECT_EQ(out[id], whole.tokens);
  for (uint32_t i : {ia, ic})
    EXPECT_TRUE(std::equal(out[i].begin(), out[i].end(), whole.tokens.begin())) << "a prefix of the whole output";
  eaglevk_batch_free(b);
}

// Misuse: each refused with the status and the C name of what is wrong.
TEST_F(CApi, BatchMisuseIsRefusedByName) {
  Shared& s = shared();
  eaglevk_batch* b = nullptr;
  eaglevk_batch_params bp = eaglevk_batch_params_default();
  EXPECT_EQ(bp.sequences, 8u);
  EXPECT_EQ(bp.k, 3u);
  bp.sequences = 0;
  EXPECT_FAILS_WITH(eaglevk_batch_create(s.pair, &bp, &b), EAGLEVK_ERROR_INVALID_ARGUMENT,
                    "eaglevk_batch_params.sequences");
  bp.sequences = 65;
  EXPECT_FAILS_WITH(eaglevk_batch_create(s.pair, &bp, &b), EAGLEVK_ERROR_INVALID_ARGUMENT,
                    "eaglevk_batch_params.sequences");
  bp.sequences = 2;
  bp.k = 17;
  EXPECT_FAILS_WITH(eaglevk_batch_create(s.pair, &bp, &b), EAGLEVK_ERROR_INVALID_ARGUMENT, "eaglevk_batch_params.k");
  EXPECT_EQ(b, nullptr);
  EXPECT_FAILS_WITH(eaglevk_batch_create(nullptr, nullptr, &b), EAGLEVK_ERROR_INVALID_ARGUMENT, "model");

  b = make_batch(s.pair, 2, 3, 64);
  const std::vector<int32_t> prompt = s.golden.prompts[0].prompt_ids;
  eaglevk_sequence_params p = greedy(8);
  uint32_t id = 0;
  p.temperature = -1;
  EXPECT_FAILS_WITH(eaglevk_batch_start(b, prompt.data(), prompt.size(), &p, nullptr, nullptr, &id),
                    EAGLEVK_ERROR_INVALID_ARGUMENT, "eaglevk_sequence_params.temperature");
  p = greedy(8);
  p.top_p = 0;
  EXPECT_FAILS_WITH(eaglevk_batch_start(b, prompt.data(), prompt.size(), &p, nullptr, nullptr, &id),
                    EAGLEVK_ERROR_INVALID_ARGUMENT, "eaglevk_sequence_params.top_p");
  p = greedy(8);
  const char* empty[] = {""};
  p.stop_strings = empty;
  p.stop_count = 1;
  EXPECT_FAILS_WITH(eaglevk_batch_start(b, prompt.data(), prompt.size(), &p, nullptr, nullptr, &id),
                    EAGLEVK_ERROR_INVALID_ARGUMENT, "eaglevk_sequence_params.stop_strings");
  p = greedy(8);
  const std::vector<int32_t> too_long(64, prompt[0]);
  EXPECT_FAILS_WITH(eaglevk_batch_start(b, too_long.data(), too_long.size(), &p, nullptr, nullptr, &id),
                    EAGLEVK_ERROR_CONTEXT_FULL, "context holds 64");
  const std::vector<int32_t> bad_id = {prompt[0], 1 << 30};
  EXPECT_FAILS_WITH(eaglevk_batch_start(b, bad_id.data(), bad_id.size(), &p, nullptr, nullptr, &id),
                    EAGLEVK_ERROR_INVALID_ARGUMENT, "outside the vocabulary");
  EXPECT_FAILS_WITH(eaglevk_batch_start(b, nullptr, 0, &p, nullptr, nullptr, &id), EAGLEVK_ERROR_INVALID_ARGUMENT,
                    "empty");

  // Two running sequences fill the batch, the second with other sampling settings (each row
  // samples with its own); a third is refused.
  uint32_t a = 0, c = 0;
  ASSERT_STATUS_OK(eaglevk_batch_start(b, prompt.data(), prompt.size(), &p, nullptr, nullptr, &a));
  eaglevk_sequence_params hot = greedy(8);
  hot.temperature = 0.5f;
  hot.seed = 11;
  ASSERT_STATUS_OK(eaglevk_batch_start(b, prompt.data(), prompt.size(), &hot, nullptr, nullptr, &c));
  EXPECT_NE(a, c);
  EXPECT_FAILS_WITH(eaglevk_batch_start(b, prompt.data(), prompt.size(), &p, nullptr, nullptr, &id),
                    EAGLEVK_ERROR_INVALID_ARGUMENT, "in use");
  // Taking a running sequence, or an id that is not there.
  EXPECT_FAILS_WITH(eaglevk_batch_take(b, a, nullptr, 0, nullptr, nullptr), EAGLEVK_ERROR_INVALID_ARGUMENT,
                    "has not finished");
  EXPECT_FAILS_WITH(eaglevk_batch_take(b, 7, nullptr, 0, nullptr, nullptr), EAGLEVK_ERROR_INVALID_ARGUMENT,
                    "no sequence 7");
  EXPECT_FAILS_WITH(eaglevk_batch_cancel(b, 7), EAGLEVK_ERROR_INVALID_ARGUMENT, "no sequence 7");
  std::vector<uint32_t> done(2);
  EXPECT_FAILS_WITH(eaglevk_batch_step(b, done.data(), 1, nullptr), EAGLEVK_ERROR_BUFFER_TOO_SMALL, "finished_ids");
  // Run them out; a short out buffer takes nothing and says the count.
  size_t finished = 0;
  std::vector<uint32_t> ids;
  for (int guard = 0; guard < 100 && ids.size() < 2; ++guard) {
    size_t count = 0;
    ASSERT_STATUS_OK(eaglevk_batch_step(b, done.data(), done.size(), &count));
    ids.insert(ids.end(), done.begin(), done.begin() + count);
    finished += count;
  }
  ASSERT_EQ(finished, 2u);
  std::vector<int32_t> small(3);
  size_t count = 0;
  EXPECT_FAILS_WITH(eaglevk_batch_take(b, ids[0], small.data(), small.size(), &count, nullptr),
                    EAGLEVK_ERROR_BUFFER_TOO_SMALL, "out_tokens");
  EXPECT_EQ(count, 8u);
  std::vector<int32_t> enough(8);
  EXPECT_STATUS(eaglevk_batch_take(b, ids[0], enough.data(), enough.size(), &count, nullptr), EAGLEVK_OK);
  EXPECT_STATUS(eaglevk_batch_take(b, ids[1], nullptr, 0, &count, nullptr), EAGLEVK_OK);
  EXPECT_EQ(count, 8u);
  // Now one with other sampling settings may start.
  EXPECT_STATUS(eaglevk_batch_start(b, prompt.data(), prompt.size(), &hot, nullptr, nullptr, &c), EAGLEVK_OK);
  eaglevk_batch_free(b);
  eaglevk_batch_free(nullptr);
}

}  // namespace
}  // namespace eaglevk::testing
