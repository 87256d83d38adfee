#include "runtime/engine/generate.h"

#include <algorithm>
#include <chrono>
#include <span>

#include <eaglevk/error.h>

#include "runtime/engine/elapsed.h"
#include "runtime/engine/prefill.h"

namespace eaglevk::engine {

std::vector<int32_t> merge_eos_ids(std::vector<int32_t> config_ids, const std::vector<int32_t>& tokenizer_ids) {
  for (int32_t id : tokenizer_ids)
    if (std::find(config_ids.begin(), config_ids.end(), id) == config_ids.end()) config_ids.push_back(id);
  return config_ids;
}

void check_prompt(const std::vector<int32_t>& prompt, uint32_t context, int32_t vocab, const GenerationOptions& o) {
  if (prompt.empty()) fail("the prompt is empty");
  if (prompt.size() >= context)
    fail_setting(Setting::Context, "the prompt has {} tokens but the context holds {}", prompt.size(), context);
  for (size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] < 0 || prompt[i] >= vocab)
      fail("prompt token {} (position {}) is outside the vocabulary of {}", prompt[i], i, vocab);
  if (o.prompt_argmax && !o.sampling.greedy()) fail("the prompt argmax report is for greedy decoding only");
  check_logprobs(o.logprobs);
  if (o.images) o.images->check(prompt);
}

const char* stop_reason(const GenerationResult& r, bool stopped_by_text) {
  if (stopped_by_text) return "stop";
  if (r.stopped_at_eos) return "eos";
  if (r.stopped_at_context) return "context";
  return "length";
}

uint32_t reusable_prefix(const std::vector<int32_t>& prompt, const std::vector<int32_t>& cached) {
  const size_t limit = std::min(cached.size(), prompt.size() - 1);
  size_t same = 0;
  while (same < limit && prompt[same] == cached[same]) ++same;
  return uint32_t(same);
}

GenerationResult generate(TargetRunner& runner, std::vector<int32_t> prompt, const GenerationOptions& o,
                          const TokenCallback& on_token) {
  check_prompt(prompt, runner.context(), runner.model().config().vocab_size, o);
  GenerationResult result;
  result.prompt = prompt;
  const uint32_t n_prompt = uint32_t(prompt.size());
  const bool need_logits = o.top_logits > 0 || o.logprobs > 0;
  auto start = std::chrono::steady_clock::now();
  const bool reuse = o.reuse_prefix && !o.images && !o.prompt_argmax;
  const uint32_t from = reuse ? reusable_prefix(prompt, runner.cached_tokens()) : 0;
  result.reused_tokens = from;

  // Prefill in chunks of at most max_rows; logits only where asked for.
  PassOutput out;
  for (const PrefillChunk& chunk : prefill_chunks(n_prompt, from, runner.max_rows(), o.prompt_argmax)) {
    PassRequest req;
    req.ids = std::span<const int32_t>(prompt).subspan(chunk.begin, chunk.rows);
    req.start = chunk.begin;
    req.logits_from = chunk.logits_from;
    req.read_logits = chunk.last && need_logits;
    req.sampling = &o.sampling;  // applies to the last row of the last chunk (the others have no logits)
    if (o.prompt_argmax) req.sampling = nullptr;
    models::EmbeddingOverride image_rows;
    if (o.images) {
      image_rows = o.images->override_for(chunk.begin, chunk.rows);
      req.embeddings = &image_rows;
    }
    runner.run(req, out);
    // Row r decided the token at position begin + logits_from + r + 1.
    for (size_t r = 0; r < out.argmax.size(); ++r)
      check_row_token(out.argmax[r], chunk.begin + chunk.logits_from + r + 1);
    if (o.prompt_argmax) result.prompt_argmax.insert(result.prompt_argmax.end(), out.argmax.begin(), out.argmax.end());
  }
  const int32_t vocab = runner.model().config().vocab_size;
  std::span<const float> last_logits;
  if (need_logits) last_logits = std::span<const float>(out.logits).subspan(out.logits.size() - vocab, vocab);
  if (o.top_logits) result.prompt_top_logits = top_logits(last_logits, o.top_logits);
  int32_t next = out.argmax.back();
  // The logits row `next` was decided by (with logprobs).
  std::vector<float> next_logits;
  if (o.logprobs) next_logits.assign(last_logits.begin(), last_logits.end());
  result.prefill_seconds = seconds_since(start);

  start = std::chrono::steady_clock::now();
  uint32_t pos = n_prompt;
  while (result.tokens.size() < o.n_predict) {
    result.tokens.push_back(next);
    if (o.logprobs) result.logprobs.push_back(token_logprobs(next_logits, next, o.logprobs));
    bool keep_going = !on_token || on_token(next);
    bool is_eos = std::find(o.eos_ids.begin(), o.eos_ids.end(), next) != o.eos_ids.end();
    if (is_eos && !o.ignore_eos) {
      result.stopped_at_eos = true;
      break;
    }
    if (!keep_going || result.tokens.size() == o.n_predict) break;
    if (pos + 1 > runner.context()) {
      result.stopped_at_context = true;
      break;
    }
    PassRequest req;
    req.ids = std::span<const int32_t>(&next, 1);
    req.start = pos;
    req.logits_from = 0;
    req.read_logits = o.logprobs > 0;
    req.sampling = &o.sampling;
    runner.run(req, out);
    ++pos;
    next = out.argmax[0];
    check_row_token(next, pos);
    if (o.logprobs) next_logits = std::move(out.logits);
  }
  // The rows now in the cache: the prompt and every output token but the last, which was
  // not run. Rows computed from image features are not described by their token ids.
  std::vector<int32_t> cached;
  if (!o.images) {
    cached = std::move(prompt);
    if (!result.tokens.empty()) cached.insert(cached.end(), result.tokens.begin(), result.tokens.end() - 1);
  }
  runner.set_cached_tokens(std::move(cached));
  result.decode_seconds = seconds_since(start);
  return result;
}

}  // namespace eaglevk::engine
