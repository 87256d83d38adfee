#include "runtime/api/sequence_text.h"

#include "runtime/api/errors.h"
#include "runtime/engine/sampler.h"

namespace eaglevk::api {

bool SequenceText::push(int32_t token) {
  std::string piece = text_.push(token);
  if (on_piece_ && !on_piece_(token, piece)) stopped_by_caller_ = true;
  return !stopped_by_caller_ && !text_.stopped();
}

void SequenceText::finish() {
  if (!on_piece_ || stopped_by_caller_) return;
  std::string rest = text_.finish();
  if (!rest.empty()) on_piece_(-1, rest);
}

void fill_output(GenerateOutput& out, engine::GenerationResult&& r, const SequenceText& text) {
  out.tokens = std::move(r.tokens);
  out.stopped_at_eos = r.stopped_at_eos;
  out.stopped_at_context = r.stopped_at_context;
  out.reused_tokens = r.reused_tokens;
  out.prompt_tokens = uint32_t(r.prompt.size());
  out.logprobs = std::move(r.logprobs);
  out.prefill_seconds = r.prefill_seconds;
  out.decode_seconds = r.decode_seconds;
  out.stopped_by_caller = text.stopped_by_caller();
  out.stopped_at_stop_string = text.stopped_at_stop_string();
}

void check_generation_settings(const engine::SamplingParams& sampling, uint32_t logprobs,
                               const std::vector<std::string>& stop) {
  within(ErrorKind::InvalidArgument, [&] {
    engine::check_sampling(sampling);
    engine::check_logprobs(logprobs);
    for (size_t i = 0; i < stop.size(); ++i)
      if (stop[i].empty()) fail_setting(Setting::StopStrings, "stop string {} is empty", i);
  });
}

void check_prompt_ids(const Model& model, std::span<const int32_t> prompt, const char* what) {
  if (prompt.empty()) fail_as(ErrorKind::InvalidArgument, "the prompt is empty");
  const int32_t vocab = model.vocab_size();
  for (size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] < 0 || prompt[i] >= vocab)
      fail_as(ErrorKind::InvalidArgument, "{} {} (position {}) is outside the vocabulary of {}", what, prompt[i], i, vocab);
}

}  // namespace eaglevk::api
