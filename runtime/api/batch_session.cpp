// The facade's batch session: several sequences of one model in the engine's decoder, each with
// its own streamed text, stop strings and result; sequences join and leave between rounds.
#include <algorithm>
#include <optional>

#include <eaglevk/eaglevk.hpp>

#include "models/eagle3.h"
#include "models/target.h"
#include "runtime/api/errors.h"
#include "runtime/api/sequence_text.h"
#include "runtime/engine/decoder.h"
#include "runtime/ops/gpu.h"

namespace eaglevk::api {

std::string batch_memory_problem(const engine::MemoryPlan& memory, uint32_t sequences, uint32_t context) {
  if (uint64_t(sequences) * context > memory.binding_max_tokens)
    return fmt::format("{} contexts of {} tokens exceed one layer's KV binding of this device ({} tokens, "
                       "maxStorageBufferRange)",
                       sequences, context, memory.binding_max_tokens);
  const uint64_t need = memory.total(context) + memory.kv_per_token * context * (sequences - 1);
  if (need > memory.budget)
    return fmt::format("{} sequences of {} tokens need {} of device memory, {} is available ({})", sequences, context,
                       engine::format_bytes(need), engine::format_bytes(memory.budget), memory.budget_source);
  return {};
}

struct BatchSession::State {
  // Every sequence runs in the decoder's rounds: chain speculation with a draft and k > 0,
  // plain decoding (one row a sequence) otherwise.
  std::unique_ptr<engine::Decoder> decoder;
  struct Sequence {
    SequenceParams params;
    std::unique_ptr<SequenceText> text;
    GenerateOutput out;
    bool finished = false;  // no more rounds
    bool reported = false;  // step() has returned it
    bool cancelled = false;
    size_t emitted = 0;     // tokens the decoder has emitted
  };
  std::vector<std::optional<Sequence>> sequences;  // by id; empty: free
  bool broken = false;  // a round failed: the decoder's caches are in an unknown state

  void check_usable() const {
    if (broken) fail_as(ErrorKind::Device, "an earlier round of this batch session failed; make a new one");
  }
  Sequence& sequence(uint32_t id) {
    if (id >= sequences.size() || !sequences[id]) fail_as(ErrorKind::InvalidArgument, "no sequence {} in this batch", id);
    return *sequences[id];
  }
};

namespace {

// The decoder's failures as the facade reports them: a non-finite logits row is the model's.
template <typename Body>
void decoding(Body&& body) {
  within(ErrorKind::Device, [&] {
    try {
      body();
    } catch (const engine::NonFiniteLogits& e) {
      throw ApiError(ErrorKind::Model, e.what());
    }
  });
}

}  // namespace

BatchSession::BatchSession(std::shared_ptr<const Model> model, const BatchParams& params)
    : model_(std::move(model)), params_(params), state_(std::make_unique<State>()) {
  if (!model_) fail_as(ErrorKind::InvalidArgument, "no model");
  if (params_.sequences == 0 || params_.sequences > engine::kMaxBatch)
    throw ApiError(ErrorKind::InvalidArgument,
                   fmt::format("the batch must hold 1..{} sequences, got {}", engine::kMaxBatch, params_.sequences),
                   Setting::Batch);
  if (params_.context < 2)
    throw ApiError(ErrorKind::InvalidArgument,
                   fmt::format("the context must hold at least 2 tokens, got {}", params_.context), Setting::Context);
  context_ = std::min(params_.context, model_->max_context());
  within(ErrorKind::Device, [&] { engine::choose_context(model_->memory, context_, nullptr); });
  if (std::string problem = batch_memory_problem(model_->memory, params_.sequences, context_); !problem.empty())
    throw ApiError(ErrorKind::Device, problem, Setting::Batch);
  state_->sequences.resize(params_.sequences);
  const bool speculate = model_->draft && params_.k > 0;
  if (speculate && (params_.k > engine::kMaxChainDraftTokens || params_.k + 1 >= context_))
    throw ApiError(ErrorKind::InvalidArgument,
                   fmt::format("{} draft tokens per round: 1..{}, and fewer than the context of {} tokens", params_.k,
                               engine::kMaxChainDraftTokens, context_),
                   Setting::ChainDraftTokens);
  Device& device = *model_->device;
  std::lock_guard lock(device.queue_mutex);
  within(ErrorKind::Device, [&] {
    engine::DecoderConfig config;
    config.context = context_;
    config.batch = params_.sequences;
    config.k = speculate ? params_.k : 0;
    state_->decoder = engine::make_decoder(*device.gpu, *model_->target, speculate ? model_->draft.get() : nullptr,
                                           config, params_.greedy_drafts);
  });
}

BatchSession::~BatchSession() = default;

bool BatchSession::speculative() const { return state_->decoder->speculative(); }

bool BatchSession::can_start(const SequenceParams&) const {
  const auto& seqs = state_->sequences;
  const bool free = std::any_of(seqs.begin(), seqs.end(), [](const auto& s) { return !s; });
  return free && !state_->broken;
}

uint32_t BatchSession::start(std::span<const int32_t> prompt, const SequenceParams& params, PieceCallback on_piece) {
  const auto& seqs = state_->sequences;
  const auto free = std::find_if(seqs.begin(), seqs.end(), [](const auto& s) { return !s; });
  return start_in(uint32_t(free - seqs.begin()), prompt, params, std::move(on_piece), /*reuse=*/false);
}

uint32_t BatchSession::start_at(uint32_t id, std::span<const int32_t> prompt, const SequenceParams& params,
                                bool reuse_prefix, PieceCallback on_piece) {
  if (id >= params_.sequences) fail_as(ErrorKind::InvalidArgument, "no sequence {} in this batch", id);
  if (state_->sequences[id])
    fail_as(ErrorKind::InvalidArgument, "sequence {} is in use: take it before starting another there", id);
  return start_in(id, prompt, params, std::move(on_piece), reuse_prefix);
}

// `id` is free, or sequences.size() when none is.
uint32_t BatchSession::start_in(uint32_t id, std::span<const int32_t> prompt, const SequenceParams& params,
                                PieceCallback on_piece, bool reuse) {
  State& st = *state_;
  st.check_usable();
  check_generation_settings(params.sampling, params.logprobs, params.stop);
  check_prompt_ids(*model_, prompt);
  if (prompt.size() >= context_)
    throw ApiError(ErrorKind::ContextFull,
                   fmt::format("the prompt has {} tokens but the context holds {} (one more is needed for the first "
                               "new token)",
                               prompt.size(), context_),
                   Setting::Context);
  if (id == st.sequences.size())
    fail_as(ErrorKind::InvalidArgument, "all {} sequences of the batch are in use: take a finished one first",
            params_.sequences);
  std::optional<State::Sequence>& slot = st.sequences[id];
  State::Sequence& seq = slot.emplace();
  seq.params = params;
  try {
    seq.text = std::make_unique<SequenceText>(model_->tokenizer, params.stop, std::move(on_piece));
    engine::GenerationOptions o;
    o.n_predict = params.max_new_tokens;
    o.ignore_eos = params.ignore_eos;
    o.eos_ids = model_->eos_ids;
    o.sampling = params.sampling;
    o.logprobs = params.logprobs;
    o.reuse_prefix = reuse;
    std::lock_guard lock(model_->device->queue_mutex);
    decoding([&] {
      st.decoder->start(id, std::vector<int32_t>(prompt.begin(), prompt.end()), o,
                        [&seq](int32_t token) {
                          ++seq.emitted;
                          return seq.text->push(token) && !seq.cancelled;
                        });
    });
  } catch (...) {
    slot.reset();
    throw;
  }
  return id;
}

std::vector<uint32_t> BatchSession::step() {
  State& st = *state_;
  st.check_usable();
  if (st.decoder->any_running()) {
    std::lock_guard lock(model_->device->queue_mutex);
    try {
      decoding([&] { st.decoder->round(); });
    } catch (...) {
      st.broken = true;
      throw;
    }
  }
  return collect();
}

std::vector<uint32_t> BatchSession::collect() {
  State& st = *state_;
  std::vector<uint32_t> done;
  for (uint32_t id = 0; id < st.sequences.size(); ++id) {
    auto& s = st.sequences[id];
    if (!s || s->reported) continue;
    if (st.decoder->finished(id) && !s->finished) {
      s->finished = true;
      s->text->finish();  // the held-back bytes, before the caller hears it finished
    }
    if (!s->finished) continue;
    s->reported = true;
    done.push_back(id);
  }
  return done;
}

bool BatchSession::running() const {
  const auto& seqs = state_->sequences;
  return std::any_of(seqs.begin(), seqs.end(), [](const auto& s) { return s && !s->reported; });
}

bool BatchSession::finished(uint32_t id) const { return state_->sequence(id).reported; }

size_t BatchSession::output_tokens(uint32_t id) const {
  const State::Sequence& s = state_->sequence(id);
  return s.emitted;
}

std::vector<engine::TokenLogprobs> BatchSession::logprobs(uint32_t id, size_t from) const {
  state_->sequence(id);  // checks the id
  const std::vector<engine::TokenLogprobs>& all = state_->decoder->logprobs_so_far(id);
  if (from >= all.size()) return {};
  return {all.begin() + std::ptrdiff_t(from), all.end()};
}

GenerateOutput BatchSession::take(uint32_t id) {
  State& st = *state_;
  State::Sequence& s = st.sequence(id);
  if (!s.reported) fail_as(ErrorKind::InvalidArgument, "sequence {} has not finished (step() reports it when it has)", id);
  GenerateOutput out = std::move(s.out);
  {
    engine::GenerationResult r;
    within(ErrorKind::Internal, [&] { r = st.decoder->take(id, out.stats); });
    fill_output(out, std::move(r), *s.text);
  }
  if (s.cancelled) out.stopped_by_caller = true;
  st.sequences[id].reset();
  return out;
}

void BatchSession::cancel(uint32_t id) { state_->sequence(id).cancelled = true; }

}  // namespace eaglevk::api
