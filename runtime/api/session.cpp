// The facade's session: one sequence's device state (an engine::Decoder, plain or speculative)
// and the generation loop around it.
#include <algorithm>
#include <cmath>

#include <eaglevk/eaglevk.hpp>

#include "models/eagle3.h"
#include "models/target.h"
#include "runtime/api/errors.h"
#include "runtime/engine/generate.h"
#include "runtime/engine/prompt_images.h"
#include "runtime/engine/decoder.h"
#include "runtime/engine/stop_text.h"
#include "runtime/ops/gpu.h"

namespace eaglevk::api {
namespace {

// Rows of one prefill pass, as the CLI uses.
constexpr uint32_t kMaxRows = kSessionMaxRows;

void check_params(const SessionParams& p) {
  // The C API's own field names in its messages; engine::check_sampling holds the same rules.
  const engine::SamplingParams& s = p.sampling;
  if (!std::isfinite(s.temperature) || s.temperature < 0)
    fail_as(ErrorKind::InvalidArgument, "temperature must be a finite number >= 0, got {}", s.temperature);
  if (s.top_k < 0) fail_as(ErrorKind::InvalidArgument, "top_k must be >= 0, got {}", s.top_k);
  if (!(s.top_p > 0 && s.top_p <= 1)) fail_as(ErrorKind::InvalidArgument, "top_p must be in (0, 1], got {}", s.top_p);
  if (p.context < 2) fail_as(ErrorKind::InvalidArgument, "context must hold at least 2 tokens, got {}", p.context);
  if (p.logprobs > engine::kMaxLogprobs)
    fail_as(ErrorKind::InvalidArgument, "logprobs is at most {}, got {}", engine::kMaxLogprobs, p.logprobs);
  for (size_t i = 0; i < p.stop.size(); ++i)
    if (p.stop[i].empty()) fail_as(ErrorKind::InvalidArgument, "stop_strings[{}] is empty", i);
}

}  // namespace

Session::Session(std::shared_ptr<const Model> model, const SessionParams& params)
    : model_(std::move(model)), params_(params) {
  if (!model_) fail_as(ErrorKind::InvalidArgument, "no model");
  check_params(params_);
  context_ = std::min(params_.context, model_->max_context());
  if (params_.tree.enabled()) {
    if (params_.tree.topk == 0) params_.tree.topk = 1;
    if (params_.tree.draft_tokens == 0 && params_.tree.topk == 1) params_.tree.draft_tokens = params_.tree.steps + 1;
    within(ErrorKind::InvalidArgument, [&] { engine::check_tree_params(params_.tree); });
    if (params_.tree.draft_tokens >= context_)
      fail_as(ErrorKind::InvalidArgument, "spec_draft_tokens = {} does not fit a context of {} tokens",
              params_.tree.draft_tokens, context_);
  }
  const bool speculate = model_->draft && (params_.k > 0 || params_.tree.enabled());
  if (speculate && !params_.tree.enabled() && params_.k + 1 >= context_)
    fail_as(ErrorKind::InvalidArgument, "k = {} does not fit a context of {} tokens", params_.k, context_);

  within(ErrorKind::Device, [&] { engine::choose_context(model_->memory, context_, nullptr); });

  Device& device = *model_->device;
  std::lock_guard lock(device.queue_mutex);
  within(ErrorKind::Device, [&] {
    engine::DecoderConfig config;
    config.context = context_;
    config.max_rows = kMaxRows;
    if (speculate) {
      config.k = params_.tree.enabled() ? 0 : params_.k;
      config.tree = params_.tree;
    }
    decoder_ = engine::make_decoder(*device.gpu, *model_->target, speculate ? model_->draft.get() : nullptr, config,
                                    params_.greedy_drafts);
  });
}

Session::~Session() = default;

bool Session::speculative() const { return decoder_->speculative(); }

GenerateOutput Session::generate(std::span<const int32_t> prompt, const PieceCallback& on_piece,
                                 std::span<const loader::RgbImage> images) {
  if (prompt.empty()) fail_as(ErrorKind::InvalidArgument, "the prompt is empty");
  if (!images.empty() && !model_->images)
    throw ApiError(ErrorKind::Model, fmt::format("this model cannot take images: {}", model_->no_images_reason),
                   model_->no_images_setting);
  const int32_t vocab = model_->vocab_size();
  for (size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] < 0 || prompt[i] >= vocab)
      fail_as(ErrorKind::InvalidArgument, "prompt token {} (at {}) is outside the vocabulary of {}", prompt[i], i,
              vocab);
  // Images: expand their placeholders and run the vision tower (on the device queue).
  engine::ImagePrompt image_prompt;
  if (!images.empty()) {
    std::lock_guard lock(model_->device->queue_mutex);
    image_prompt = within(ErrorKind::InvalidArgument, [&] {
      return engine::build_image_prompt(*model_->device->gpu, *model_->images, prompt, images);
    });
    prompt = image_prompt.ids;
  }
  if (prompt.size() >= context_)
    fail_as(ErrorKind::ContextFull,
            "the prompt has {} tokens but the context holds {} (one more is needed for the first new token)",
            prompt.size(), context_);

  return run(std::vector<int32_t>(prompt.begin(), prompt.end()), on_piece,
             images.empty() ? nullptr : &image_prompt.images, /*reuse=*/false);
}

GenerateOutput Session::continue_sequence(std::span<const int32_t> next, const PieceCallback& on_piece) {
  if (next.empty()) fail_as(ErrorKind::InvalidArgument, "nothing to append: the next turn is empty");
  if (sequence_.empty()) return generate(next, on_piece);
  const int32_t vocab = model_->vocab_size();
  for (size_t i = 0; i < next.size(); ++i)
    if (next[i] < 0 || next[i] >= vocab)
      fail_as(ErrorKind::InvalidArgument, "token {} (at {}) is outside the vocabulary of {}", next[i], i, vocab);
  std::vector<int32_t> ids = sequence_;
  ids.insert(ids.end(), next.begin(), next.end());
  if (ids.size() >= context_)
    fail_as(ErrorKind::ContextFull, "the sequence would hold {} tokens but the context holds {}", ids.size(), context_);
  return run(std::move(ids), on_piece, nullptr, /*reuse=*/true);
}

GenerateOutput Session::run(std::vector<int32_t> ids, const PieceCallback& on_piece,
                            const engine::PromptImages* images, bool reuse) {
  engine::GenerationOptions o;
  o.n_predict = params_.max_new_tokens;
  o.ignore_eos = params_.ignore_eos;
  o.eos_ids = model_->eos_ids;
  o.sampling = params_.sampling;
  o.images = images;
  o.reuse_prefix = reuse;
  o.logprobs = params_.logprobs;

  GenerateOutput out;
  engine::GeneratedText text(model_->tokenizer, params_.stop);
  engine::TokenCallback stream;
  if (on_piece || !params_.stop.empty())
    stream = [&](int32_t id) {
      std::string piece = text.push(id);
      if (on_piece && !on_piece(id, piece)) out.stopped_by_caller = true;
      out.stopped_at_stop_string = text.stopped();
      return !out.stopped_by_caller && !text.stopped();
    };

  sequence_.clear();  // until this call succeeds
  std::vector<int32_t> prompt = ids;
  engine::GenerationResult r;
  {
    std::lock_guard lock(model_->device->queue_mutex);
    within(ErrorKind::Device, [&] {
      try {
        r = decoder_->generate(std::move(ids), o, out.stats, stream);
      } catch (const engine::NonFiniteLogits& e) {
        throw ApiError(ErrorKind::Model, e.what());  // the model's numbers, not the device
      }
    });
  }
  if (on_piece && !out.stopped_by_caller) {
    std::string rest = text.finish();
    if (!rest.empty()) on_piece(-1, rest);
  }
  if (!images) {
    sequence_ = std::move(prompt);
    sequence_.insert(sequence_.end(), r.tokens.begin(), r.tokens.end());
  }
  out.tokens = std::move(r.tokens);
  out.stopped_at_eos = r.stopped_at_eos;
  out.stopped_at_context = r.stopped_at_context;
  out.reused_tokens = r.reused_tokens;
  out.logprobs = std::move(r.logprobs);
  return out;
}

}  // namespace eaglevk::api
