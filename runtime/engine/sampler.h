#pragma once
// Sampling settings, their device form, and the host's definition of the filtered
// distribution (HF's order) that the device sampler is tested against.
#include <cstdint>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include <eaglevk/error.h>

#include "runtime/ops/ops.h"
#include "shaders/shared_constants.h"

namespace eaglevk::engine {

struct SamplingParams {
  float temperature = 0;  // 0: greedy
  int32_t top_k = 0;      // 0: off
  float top_p = 1;        // 1: off
  uint64_t seed = 0;
  bool greedy() const { return temperature <= 0; }
  bool operator==(const SamplingParams&) const = default;
};

// Fails unless the temperature is finite and >= 0, top-k >= 0 and top-p in (0, 1]: an
// infinite or NaN temperature would otherwise read as "not greedy" and sample garbage, or as
// greedy and silently ignore the setting.
void check_sampling(const SamplingParams& p);

// The speculative scheme, for every front door: at temperature > 0 chain drafts are drawn from
// the draft's own distribution (accepted with min(1, p/q)) unless the caller asks for greedy
// drafts; a tree's children are the draft's top-K, never drawn; at temperature 0 drafts are
// the draft's argmax.
inline bool draws_drafts(bool tree, bool greedy_drafts) { return !tree && !greedy_drafts; }
inline bool draws_drafts(const SamplingParams& sampling, bool tree, bool greedy_drafts) {
  return !sampling.greedy() && draws_drafts(tree, greedy_drafts);
}

// The most alternatives a generated token's log-probability report may list (the OpenAI API's
// limit): every front door checks it with check_logprobs.
constexpr uint32_t kMaxLogprobs = 20;
void check_logprobs(uint32_t n);

// The token id the argmax and sampling kernels give a logits row that holds a NaN or an
// infinity: no token. Every decoder checks the ids it reads back with check_row_token.
constexpr int32_t kNonFiniteRow = NON_FINITE_ROW_ID;

// What a decoder throws for such a row; the C API reports it as a model error (the weights, or
// activations they blew up, are not finite), not a device error.
struct NonFiniteLogits : Error {
  using Error::Error;
};

// Throws NonFiniteLogits naming the position whose token `id` was to be when it is
// kNonFiniteRow. `whose`: "target" or "draft".
void check_row_token(int32_t id, uint64_t position, std::string_view whose = "target");
[[noreturn]] void fail_non_finite_row(uint64_t position, std::string_view whose);

// The device sampler's parameters for a logits row deciding the token at `position`.
ops::SampleParams device_params(const SamplingParams& p, uint32_t position);
// The same settings as a per-row record of the device sampler (SAMPLE_ROW_WORDS words), the
// floats by their bits: a row sampled from its record gets the bits device_params' would give.
void write_row_settings(const SamplingParams& p, int32_t* record);

// The filtered, normalised distribution HF's generate uses: logits / T, then top-k, then
// top-p (the smallest set of most likely tokens whose mass reaches p), renormalised. Tokens
// tied with the last one kept by top-k or top-p are kept too, as the device sampler's
// thresholds keep them.
// Returns (id, probability) pairs of the kept tokens, most likely first.
std::vector<std::pair<int32_t, double>> filtered_distribution(std::span<const float> logits, const SamplingParams& p);

// The k largest logits, ties to the lower id, as (id, value).
std::vector<std::pair<int32_t, float>> top_logits(std::span<const float> logits, uint32_t k);

// A generated token's log-probability under the model (the log-softmax of its raw logits,
// before temperature and filtering, as vLLM and the OpenAI API report it) and the `n` most
// likely tokens at that step with theirs.
struct TokenLogprobs {
  int32_t token = 0;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;
};
TokenLogprobs token_logprobs(std::span<const float> logits, int32_t token, uint32_t n);

}  // namespace eaglevk::engine
