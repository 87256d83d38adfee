#include "runtime/engine/generate.h"

#include <algorithm>

#include <eaglevk/error.h>


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

}  // namespace eaglevk::engine
