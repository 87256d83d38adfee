#pragma once
// What a generation is asked for and what it returns, for every decoding mode (decoder.h).
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "runtime/engine/prompt_images.h"
#include "runtime/engine/sampler.h"

namespace eaglevk::engine {

// Rows of one prefill pass (longer prompts go in chunks), as the CLI and the C API run them.
constexpr uint32_t kPrefillRows = 128;

// The end-of-sequence ids generation stops at: the model config's, then the tokenizer's
// (generation_config.json, GGUF eos/eot) that the config does not list.
std::vector<int32_t> merge_eos_ids(std::vector<int32_t> config_ids, const std::vector<int32_t>& tokenizer_ids);

struct GenerationOptions {
  uint32_t n_predict = 64;
  bool ignore_eos = false;
  std::vector<int32_t> eos_ids;
  SamplingParams sampling;
  uint32_t top_logits = 0;      // report the k largest logits at the last prompt position
  bool prompt_argmax = false;   // report the argmax at every prompt position
  const PromptImages* images = nullptr;  // image features of the prompt's <|patch|> tokens
  // Continue from the KV caches of the previous generation in the same decoder slot:
  // positions whose tokens equal the previous prompt and output are not computed again (a
  // chat's next turn prefills only what is new). Off: every generation is a new sequence.
  // Ignored with images or the prompt argmax report.
  bool reuse_prefix = false;
  // Report each generated token's log-probability and the `logprobs` most likely tokens at
  // its step (0: off). Reads one logits row back per step.
  uint32_t logprobs = 0;
  // Chain drafting: this sequence's draft tokens a round, 1 up to the decoder's k (0: the
  // decoder's k). Sequences of one batch may each draft their own number.
  uint32_t draft_tokens = 0;
};

struct GenerationResult {
  std::vector<int32_t> prompt;
  std::vector<int32_t> tokens;
  std::vector<std::pair<int32_t, float>> prompt_top_logits;
  std::vector<int32_t> prompt_argmax;
  double prefill_seconds = 0;
  double decode_seconds = 0;
  bool stopped_at_eos = false;
  bool stopped_at_context = false;
  uint32_t reused_tokens = 0;  // prompt positions taken from the previous generation's caches
  std::vector<TokenLogprobs> logprobs;  // one per token, with GenerationOptions::logprobs
};

// Why a generation ended, as run and eval report it: "stop" (the caller's stop text, which
// the generation itself does not know of), "eos", "context" or "length".
const char* stop_reason(const GenerationResult& result, bool stopped_by_text);

// on_token returns false to stop generation.
using TokenCallback = std::function<bool(int32_t)>;

// Refuses a prompt that cannot run: empty, as long as the context or longer, a token id
// outside the vocabulary (the embedding shader would skip the row and leave stale memory as
// its hidden state), options that do not go together, images that do not fit the prompt.
// The decoder calls it before anything is recorded.
void check_prompt(const std::vector<int32_t>& prompt, uint32_t context, int32_t vocab, const GenerationOptions& options);

// How many leading positions of `prompt` can keep the KV rows computed for `cached` (the
// tokens of the rows a runner holds): the common prefix, less one so that at least the
// prompt's last position runs and gives the next token's logits.
uint32_t reusable_prefix(const std::vector<int32_t>& prompt, const std::vector<int32_t>& cached);

}  // namespace eaglevk::engine
