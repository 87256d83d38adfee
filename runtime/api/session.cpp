// The facade's session: one sequence's device state (an engine::Decoder, plain or speculative)
// and the generation loop around it.
#include <algorithm>
#include <cmath>

#include <eaglevk/eaglevk.hpp>

#include "models/eagle3.h"
#include "models/target.h"
#include "runtime/api/errors.h"
#include "runtime/api/sequence_text.h"
#include "runtime/engine/generate.h"
#include "runtime/engine/prompt_images.h"
#include "runtime/engine/decoder.h"
#include "runtime/engine/stop_text.h"
#include "runtime/ops/gpu.h"

namespace eaglevk::api {
namespace {

void check_params(const SessionParams& p) {
  check_generation_settings(p.sampling, p.logprobs, p.stop);
  if (p.context < 2)
    throw ApiError(ErrorKind::InvalidArgument, fmt::format("the context must hold at least 2 tokens, got {}", p.context),
                   Setting::Context);
  if (p.max_rows == 0) fail_as(ErrorKind::InvalidArgument, "a prefill pass needs at least 1 row");
}

}  // namespace

Session::Session(std::shared_ptr<const Model> model, const SessionParams& params)
    : model_(std::move(model)), params_(params) {
  if (!model_) fail_as(ErrorKind::InvalidArgument, "no model");
  check_params(params_);
  context_ = std::min(params_.context, model_->max_context());
  // A round's drafts must fit the context with the token before them: one policy for every
  // front door (`run` built its decoders itself before and let the decoder clip such rounds).
  if (params_.tree.enabled()) {
    params_.tree = engine::tree_with_defaults(params_.tree);
    within(ErrorKind::InvalidArgument, [&] { engine::check_tree_params(params_.tree); });
    if (params_.tree.draft_tokens >= context_)
      throw ApiError(ErrorKind::InvalidArgument,
                     fmt::format("spec_draft_tokens = {} does not fit a context of {} tokens", params_.tree.draft_tokens,
                                 context_),
                     Setting::TreeDraftTokens);
  }
  const bool speculate = model_->draft && (params_.k > 0 || params_.tree.enabled());
  if (speculate && !params_.tree.enabled() && params_.k + 1 >= context_)
    throw ApiError(ErrorKind::InvalidArgument,
                   fmt::format("k = {} does not fit a context of {} tokens", params_.k, context_),
                   Setting::ChainDraftTokens);

  within(ErrorKind::Device, [&] { engine::choose_context(model_->memory, context_, nullptr); });

  Device& device = *model_->device;
  std::lock_guard lock(device.queue_mutex);
  within(ErrorKind::Device, [&] {
    engine::DecoderConfig config;
    config.context = context_;
    config.max_rows = params_.max_rows;
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

ImagePrompt prepare_images(const Model& m, std::span<const int32_t> prompt, std::span<const loader::RgbImage> images) {
  check_prompt_ids(m, prompt);
  if (!m.images)
    throw ApiError(ErrorKind::Model, fmt::format("this model cannot take images: {}", m.no_images_reason),
                   m.no_images_setting);
  // Expand the placeholders and run the vision tower (on the queue of its device, the first of
  // a split model, where the features replace embedding rows).
  Device& tower = *m.devices.front();
  std::lock_guard lock(tower.queue_mutex);
  engine::ImagePrompt built = within(ErrorKind::InvalidArgument, [&] {
    return engine::build_image_prompt(*tower.gpu, *m.images, prompt, images);
  });
  ImagePrompt out{std::move(built.ids), std::move(built.images)};
  out.tiles = uint32_t(out.images.patch_positions.size() / m.images->tokens.tokens_per_tile);
  return out;
}

GenerateOutput Session::generate(std::span<const int32_t> prompt, const PieceCallback& on_piece,
                                 std::span<const loader::RgbImage> images) {
  if (!images.empty()) return generate(prepare_images(*model_, prompt, images), on_piece);
  check_prompt_ids(*model_, prompt);
  check_fits(prompt.size());
  return run(std::vector<int32_t>(prompt.begin(), prompt.end()), on_piece, nullptr, /*reuse=*/false);
}

GenerateOutput Session::generate(const ImagePrompt& prompt, const PieceCallback& on_piece) {
  check_fits(prompt.ids.size());
  return run(prompt.ids, on_piece, &prompt.images, /*reuse=*/false);
}

GenerateOutput Session::generate_reusing_prefix(std::span<const int32_t> prompt, const PieceCallback& on_piece) {
  check_prompt_ids(*model_, prompt);
  check_fits(prompt.size());
  return run(std::vector<int32_t>(prompt.begin(), prompt.end()), on_piece, nullptr, /*reuse=*/true);
}

void Session::check_fits(size_t prompt_tokens) const {
  if (prompt_tokens >= context_)
    fail_as(ErrorKind::ContextFull,
            "the prompt has {} tokens but the context holds {} (one more is needed for the first new token)",
            prompt_tokens, context_);
}

void Session::set_tap_callback(TapCallback on_taps) {
  if (!on_taps) {
    decoder_->set_tap_sink({});
    return;
  }
  decoder_->set_tap_sink([on_taps = std::move(on_taps)](const engine::TapRows& t) {
    on_taps(t.tokens, t.positions, t.hidden);
  });
}

GenerateOutput Session::continue_sequence(std::span<const int32_t> next, const PieceCallback& on_piece) {
  if (next.empty()) fail_as(ErrorKind::InvalidArgument, "nothing to append: the next turn is empty");
  if (sequence_.empty()) return generate(next, on_piece);
  check_prompt_ids(*model_, next, "token");
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
  o.top_logits = params_.top_logits;
  o.prompt_argmax = params_.prompt_argmax;

  GenerateOutput out;
  SequenceText text(model_->tokenizer, params_.stop, on_piece);
  engine::TokenCallback stream;
  if (text.needed()) stream = [&](int32_t id) { return text.push(id); };

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
  text.finish();
  if (!images) {
    sequence_ = std::move(prompt);
    sequence_.insert(sequence_.end(), r.tokens.begin(), r.tokens.end());
  }
  out.prompt_top_logits = std::move(r.prompt_top_logits);
  out.prompt_argmax = std::move(r.prompt_argmax);
  out.prefill_seconds = r.prefill_seconds;
  out.decode_seconds = r.decode_seconds;
  out.prompt_ids = r.prompt;
  fill_output(out, std::move(r), text);
  return out;
}

std::vector<engine::TokenLogprobs> Session::logprobs_so_far(size_t from) const {
  if (!decoder_->running(0) && !decoder_->finished(0)) return {};  // between calls: no sequence
  const std::vector<engine::TokenLogprobs>& all = decoder_->logprobs_so_far(0);
  if (from >= all.size()) return {};
  return {all.begin() + std::ptrdiff_t(from), all.end()};
}

void check_stop_strings(const std::vector<std::string>& stop) {
  within(ErrorKind::InvalidArgument, [&] { engine::StopText check(stop); });
}

const char* stop_reason(const GenerateOutput& out) {
  engine::GenerationResult r;
  r.stopped_at_eos = out.stopped_at_eos;
  r.stopped_at_context = out.stopped_at_context;
  return engine::stop_reason(r, out.stopped_at_stop_string);
}

}  // namespace eaglevk::api
