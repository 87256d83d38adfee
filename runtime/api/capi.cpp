// The C API (eaglevk.h) over the facade (eaglevk.hpp). Every entry point catches everything:
// no exception crosses into C. Handles are heap structs owning facade objects.
// The library defines the exported functions the header wraps inline for programs.
#define EAGLEVK_BUILDING_LIBRARY
#include <eaglevk/eaglevk.h>

#include <algorithm>
#include <cstddef>
#include <cmath>
#include <cstring>
#include <new>
#include <string>

#include <eaglevk/eaglevk.hpp>

#include "runtime/api/capi_support.h"
#include "runtime/api/errors.h"

#ifndef EAGLEVK_VERSION_STRING
#define EAGLEVK_VERSION_STRING "unknown"
#endif

namespace api = eaglevk::api;

struct eaglevk_session {
  std::unique_ptr<api::Session> session;
  eaglevk::engine::SpecStats last_stats;  // of the last generate
  uint64_t last_output_tokens = 0;
  std::vector<eaglevk::engine::TokenLogprobs> last_logprobs;
};

using namespace eaglevk::api::c_api;
using api::ErrorKind;
using api::fail_as;

namespace eaglevk::api {
const Device& device_of(const eaglevk_runtime* runtime) { return *runtime->runtime.device; }
const Device& device_of(const eaglevk_model* model) { return *model->model->device; }
}  // namespace eaglevk::api

extern "C" {

const char* eaglevk_version(void) { return EAGLEVK_VERSION_STRING; }

const char* eaglevk_status_string(eaglevk_status status) {
  switch (status) {
    case EAGLEVK_OK: return "EAGLEVK_OK";
    case EAGLEVK_ERROR_INVALID_ARGUMENT: return "EAGLEVK_ERROR_INVALID_ARGUMENT";
    case EAGLEVK_ERROR_IO: return "EAGLEVK_ERROR_IO";
    case EAGLEVK_ERROR_MODEL: return "EAGLEVK_ERROR_MODEL";
    case EAGLEVK_ERROR_DEVICE: return "EAGLEVK_ERROR_DEVICE";
    case EAGLEVK_ERROR_CONTEXT_FULL: return "EAGLEVK_ERROR_CONTEXT_FULL";
    case EAGLEVK_ERROR_BUFFER_TOO_SMALL: return "EAGLEVK_ERROR_BUFFER_TOO_SMALL";
    case EAGLEVK_ERROR_INTERNAL: return "EAGLEVK_ERROR_INTERNAL";
    case EAGLEVK_ERROR_DEVICE_LOST: return "EAGLEVK_ERROR_DEVICE_LOST";
    case EAGLEVK_ERROR_OUT_OF_MEMORY: return "EAGLEVK_ERROR_OUT_OF_MEMORY";
  }
  return "unknown eaglevk_status";
}

const char* eaglevk_last_error(void) { return last_error().c_str(); }

eaglevk_status eaglevk_runtime_create(const char* device, eaglevk_runtime** out) {
  return guarded([&] {
    require(out, "out");
    *out = nullptr;
    auto handle = std::make_unique<eaglevk_runtime>();
    handle->runtime = api::open_runtime(device ? device : "");
    *out = handle.release();
  });
}

eaglevk_status eaglevk_runtime_create_split(const char* const* devices, const double* shares, size_t count,
                                            eaglevk_runtime** out) {
  return guarded([&] {
    require(out, "out");
    *out = nullptr;
    require(devices, "devices");
    if (count == 0) fail_as(ErrorKind::InvalidArgument, "count is 0: name at least one device");
    std::vector<std::string> names;
    for (size_t i = 0; i < count; ++i) {
      if (!devices[i]) fail_as(ErrorKind::InvalidArgument, "devices[{}] is NULL", i);
      names.emplace_back(devices[i]);
    }
    auto handle = std::make_unique<eaglevk_runtime>();
    if (shares) {
      for (size_t i = 0; i < count; ++i)
        if (!std::isfinite(shares[i]) || shares[i] <= 0)
          fail_as(ErrorKind::InvalidArgument, "shares[{}] is {}: each device's share is a positive number", i, shares[i]);
      handle->split.assign(shares, shares + count);
    }
    handle->runtime = api::open_runtime(std::span<const std::string>(names));
    *out = handle.release();
  });
}

void eaglevk_runtime_destroy(eaglevk_runtime* runtime) { delete runtime; }

const char* eaglevk_runtime_device_name(const eaglevk_runtime* runtime) {
  return runtime ? runtime->runtime.device_name.c_str() : nullptr;
}

eaglevk_status eaglevk_model_load(eaglevk_runtime* runtime, const char* target_dir, const char* draft_dir,
                                  eaglevk_model** out) {
  return guarded([&] {
    require(out, "out");
    *out = nullptr;
    require(runtime, "runtime");
    require(target_dir, "target_dir");
    if (draft_dir && !*draft_dir) fail_as(ErrorKind::InvalidArgument, "draft_dir is empty (pass NULL for no draft)");
    api::LoadOptions options;
    options.draft = draft_dir ? draft_dir : "";
    options.split = runtime->split;
    auto handle = std::make_unique<eaglevk_model>();
    handle->model = api::load_model(runtime->runtime, api::plan_load(runtime->runtime, target_dir, options));
    *out = handle.release();
  });
}

eaglevk_status eaglevk_model_load_with_mmproj(eaglevk_runtime* runtime, const char* target, const char* draft_dir,
                                              const char* mmproj, eaglevk_model** out) {
  return guarded([&] {
    require(out, "out");
    *out = nullptr;
    require(runtime, "runtime");
    require(target, "target");
    if (draft_dir && !*draft_dir) fail_as(ErrorKind::InvalidArgument, "draft_dir is empty (pass NULL for no draft)");
    if (mmproj && !*mmproj) fail_as(ErrorKind::InvalidArgument, "mmproj is empty (pass NULL for none)");
    api::LoadOptions options;
    options.draft = draft_dir ? draft_dir : "";
    options.mmproj = mmproj ? mmproj : "";
    options.split = runtime->split;
    auto handle = std::make_unique<eaglevk_model>();
    handle->model = api::load_model(runtime->runtime, api::plan_load(runtime->runtime, target, options));
    *out = handle.release();
  });
}

void eaglevk_model_free(eaglevk_model* model) { delete model; }

eaglevk_status eaglevk_model_get_info(const eaglevk_model* model, eaglevk_model_info* out) {
  return guarded([&] {
    require(model, "model");
    require(out, "out");
    const api::Model& m = *model->model;
    *out = eaglevk_model_info{m.vocab_size(), int32_t(m.max_context()), m.tokenizer.bos_id(), m.draft ? 1 : 0,
                              m.chat ? 1 : 0};
  });
}

eaglevk_status eaglevk_tokenize(const eaglevk_model* model, const char* text, int add_bos, int32_t* ids,
                                size_t capacity, size_t* out_count) {
  return guarded([&] {
    require(model, "model");
    require(text, "text");
    require(out_count, "out_count");
    std::vector<int32_t> tokens = api::tokenize(*model->model, text, add_bos != 0);
    *out_count = tokens.size();
    require_capacity(ids, capacity, tokens.size(), "ids");
    if (!tokens.empty()) std::memcpy(ids, tokens.data(), tokens.size() * sizeof(int32_t));
  });
}

eaglevk_status eaglevk_detokenize(const eaglevk_model* model, const int32_t* ids, size_t count, int skip_special,
                                  char* text, size_t capacity, size_t* out_length) {
  return guarded([&] {
    require(model, "model");
    if (count) require(ids, "ids");
    std::string s = api::detokenize(*model->model, std::span<const int32_t>(ids, count), skip_special != 0);
    write_text(s, text, capacity, out_length);
  });
}

eaglevk_status eaglevk_apply_chat_template(const eaglevk_model* model, const eaglevk_chat_message* messages,
                                           size_t count, int add_generation_prompt, char* text, size_t capacity,
                                           size_t* out_length) {
  return guarded([&] {
    require(model, "model");
    if (count) require(messages, "messages");
    std::vector<eaglevk::loader::ChatMessage> conversation;
    for (size_t i = 0; i < count; ++i) {
      if (!messages[i].role || !messages[i].content)
        fail_as(ErrorKind::InvalidArgument, "message {} has a NULL role or content", i);
      conversation.push_back({messages[i].role, messages[i].content});
    }
    std::string s = api::apply_chat_template(*model->model, conversation, add_generation_prompt != 0);
    write_text(s, text, capacity, out_length);
  });
}

namespace {

// The struct as version 0.1 had it (8 fields): programs built against that header call the two
// exported functions below, which still read and write exactly this much.
constexpr size_t kParamsSizeV1 = offsetof(eaglevk_session_params, spec_steps);

eaglevk_session_params full_defaults() {
  api::SessionParams d;
  eaglevk_session_params p{};
  p.context = d.context;
  p.k = d.k;
  p.temperature = d.sampling.temperature;
  p.top_k = d.sampling.top_k;
  p.top_p = d.sampling.top_p;
  p.seed = d.sampling.seed;
  p.max_new_tokens = d.max_new_tokens;
  p.ignore_eos = d.ignore_eos ? 1 : 0;
  p.spec_steps = d.tree.steps;
  p.spec_topk = d.tree.topk;
  p.spec_draft_tokens = d.tree.draft_tokens;
  p.greedy_drafts = d.greedy_drafts ? 1 : 0;
  p.stop_strings = nullptr;
  p.stop_count = 0;
  p.logprobs = d.logprobs;
  return p;
}

}  // namespace

void eaglevk_session_params_init(eaglevk_session_params* params, size_t size) {
  if (!params) return;
  const eaglevk_session_params d = full_defaults();
  std::memcpy(params, &d, std::min(size, sizeof d));
}

eaglevk_status eaglevk_session_create_sized(eaglevk_model* model, const eaglevk_session_params* params, size_t size,
                                            eaglevk_session** out) {
  return guarded([&] {
    require(out, "out");
    *out = nullptr;
    require(model, "model");
    if (params && size < kParamsSizeV1)
      fail_as(api::ErrorKind::InvalidArgument, "eaglevk_session_params of {} bytes: older than any version", size);
    eaglevk_session_params p = full_defaults();
    if (params) std::memcpy(&p, params, std::min(size, sizeof p));
    api::SessionParams sp;
    sp.context = p.context;
    sp.k = p.k;
    sp.sampling = {p.temperature, p.top_k, p.top_p, p.seed};
    sp.max_new_tokens = p.max_new_tokens;
    sp.ignore_eos = p.ignore_eos != 0;
    sp.tree = eaglevk::engine::TreeParams{p.spec_steps, p.spec_topk, p.spec_draft_tokens};
    sp.greedy_drafts = p.greedy_drafts != 0;
    sp.logprobs = p.logprobs;
    if (p.stop_count && !p.stop_strings)
      fail_as(api::ErrorKind::InvalidArgument, "stop_strings is NULL but stop_count is {}", p.stop_count);
    for (size_t i = 0; i < p.stop_count; ++i) {
      if (!p.stop_strings[i]) fail_as(api::ErrorKind::InvalidArgument, "stop_strings[{}] is NULL", i);
      sp.stop.emplace_back(p.stop_strings[i]);
    }
    auto handle = std::make_unique<eaglevk_session>();
    handle->session = std::make_unique<api::Session>(model->model, sp);
    *out = handle.release();
  });
}

// Version 0.1's exports, kept for programs built against its header (where these were plain
// functions on the 8-field struct).
extern "C" EAGLEVK_API eaglevk_status eaglevk_session_create(eaglevk_model* model, const eaglevk_session_params* params,
                                                             eaglevk_session** out) {
  return eaglevk_session_create_sized(model, params, kParamsSizeV1, out);
}

struct SessionParamsV1 {
  uint32_t context, k;
  float temperature;
  int32_t top_k;
  float top_p;
  uint64_t seed;
  uint32_t max_new_tokens;
  int32_t ignore_eos;
};
static_assert(sizeof(SessionParamsV1) == 40 && kParamsSizeV1 == 40, "version 0.1's layout");

extern "C" EAGLEVK_API SessionParamsV1 eaglevk_session_params_default(void) {
  SessionParamsV1 v1;
  eaglevk_session_params d = full_defaults();
  std::memcpy(&v1, &d, sizeof v1);
  return v1;
}

void eaglevk_session_free(eaglevk_session* session) { delete session; }

namespace {

// A C image as the loader's RGB image: decoded from PNG/JPEG bytes, or copied from pixels.
eaglevk::loader::RgbImage image_from_c(const eaglevk_image& image, size_t index) {
  using eaglevk::api::ErrorKind;
  using eaglevk::api::fail_as;
  if (!image.data) fail_as(ErrorKind::InvalidArgument, "images[{}].data is NULL", index);
  if (image.width == 0 && image.height == 0)
    return eaglevk::api::within(ErrorKind::InvalidArgument, [&] {
      return eaglevk::loader::decode_image(std::span<const uint8_t>(image.data, image.size), {},
                                           fmt::format("images[{}]", index));
    });
  const uint64_t pixels = uint64_t(image.width) * image.height;
  if (image.width == 0 || image.height == 0 || pixels > eaglevk::loader::ImageLimits{}.max_pixels)
    fail_as(ErrorKind::InvalidArgument, "images[{}]: {} x {} pixels (at most {} in all, neither side 0)", index,
            image.width, image.height, eaglevk::loader::ImageLimits{}.max_pixels);
  if (image.size != pixels * 3)
    fail_as(ErrorKind::InvalidArgument, "images[{}]: {} bytes for {} x {} RGB pixels (expected {})", index, image.size,
            image.width, image.height, pixels * 3);
  return eaglevk::loader::RgbImage{image.width, image.height, std::vector<uint8_t>(image.data, image.data + image.size)};
}

eaglevk_status generate_impl(eaglevk_session* session, const int32_t* prompt, size_t prompt_count,
                             const eaglevk_image* images, size_t image_count, eaglevk_token_callback callback,
                             void* user, int32_t* out_tokens, size_t capacity, size_t* out_count,
                             bool append = false) {
  return guarded([&] {
    if (out_count) *out_count = 0;
    require(session, "session");
    session->last_stats = {};
    session->last_output_tokens = 0;
    session->last_logprobs.clear();
    if (prompt_count) require(prompt, "prompt");
    const size_t max_new = session->session->params().max_new_tokens;
    if (out_tokens && capacity < max_new) {
      if (out_count) *out_count = max_new;
      fail_as(ErrorKind::BufferTooSmall, "out_tokens holds {} but max_new_tokens is {}", capacity, max_new);
    }
    api::PieceCallback on_piece;
    if (callback)
      on_piece = [&](int32_t token, std::string_view piece) {
        std::string text(piece);  // NUL-terminated for C
        return callback(token, text.c_str(), user) == 0;
      };
    if (image_count) require(images, "images");
    std::vector<eaglevk::loader::RgbImage> decoded;
    for (size_t i = 0; i < image_count; ++i) decoded.push_back(image_from_c(images[i], i));
    const std::span<const int32_t> ids(prompt, prompt_count);
    api::GenerateOutput r = append ? session->session->continue_sequence(ids, on_piece)
                                   : session->session->generate(ids, on_piece, decoded);
    session->last_stats = r.stats;
    session->last_logprobs = std::move(r.logprobs);
    session->last_output_tokens = r.tokens.size();
    if (out_tokens && !r.tokens.empty()) std::memcpy(out_tokens, r.tokens.data(), r.tokens.size() * sizeof(int32_t));
    if (out_count) *out_count = r.tokens.size();
  });
}

}  // namespace

eaglevk_status eaglevk_generate(eaglevk_session* session, const int32_t* prompt, size_t prompt_count,
                                eaglevk_token_callback callback, void* user, int32_t* out_tokens, size_t capacity,
                                size_t* out_count) {
  return generate_impl(session, prompt, prompt_count, nullptr, 0, callback, user, out_tokens, capacity, out_count);
}

eaglevk_status eaglevk_continue(eaglevk_session* session, const int32_t* next, size_t next_count,
                                eaglevk_token_callback callback, void* user, int32_t* out_tokens, size_t capacity,
                                size_t* out_count) {
  return generate_impl(session, next, next_count, nullptr, 0, callback, user, out_tokens, capacity, out_count,
                       /*append=*/true);
}

eaglevk_status eaglevk_generate_with_images(eaglevk_session* session, const int32_t* prompt, size_t prompt_count,
                                            const eaglevk_image* images, size_t image_count,
                                            eaglevk_token_callback callback, void* user, int32_t* out_tokens,
                                            size_t capacity, size_t* out_count) {
  return generate_impl(session, prompt, prompt_count, images, image_count, callback, user, out_tokens, capacity,
                       out_count);
}

eaglevk_status eaglevk_model_supports_images(const eaglevk_model* model, int* out_supported) {
  return guarded([&] {
    if (out_supported) *out_supported = 0;
    require(model, "model");
    require(out_supported, "out_supported");
    const api::Model& m = *model->model;
    if (!m.images)
      throw api::ApiError(api::ErrorKind::Model, fmt::format("this model cannot take images: {}", m.no_images_reason),
                          m.no_images_setting);
    *out_supported = 1;
  });
}

eaglevk_status eaglevk_session_get_stats(const eaglevk_session* session, eaglevk_spec_stats* out, double* acceptance,
                                         size_t capacity) {
  return guarded([&] {
    require(session, "session");
    require(out, "out");
    if (!acceptance && capacity)
      fail_as(ErrorKind::InvalidArgument, "acceptance is NULL but its capacity is {}", capacity);
    const eaglevk::engine::SpecStats& s = session->last_stats;
    std::vector<double> rates = s.acceptance_per_position();
    *out = eaglevk_spec_stats{s.num_drafts,      s.num_draft_tokens, s.num_accepted_tokens, session->last_output_tokens,
                              s.mean_acceptance_length(), rates.size()};
    for (size_t i = 0; i < rates.size() && i < capacity; ++i) acceptance[i] = rates[i];
  });
}

eaglevk_status eaglevk_session_get_logprobs(const eaglevk_session* session, size_t index, float* logprob,
                                            int32_t* top_ids, float* top_logprobs, size_t capacity, size_t* out_count) {
  return guarded([&] {
    if (out_count) *out_count = 0;
    require(session, "session");
    const uint32_t n = session->session->params().logprobs;
    if (n == 0) fail_as(ErrorKind::InvalidArgument, "this session does not record logprobs (params.logprobs is 0)");
    if (capacity && (!top_ids || !top_logprobs))
      fail_as(ErrorKind::InvalidArgument, "top_ids or top_logprobs is NULL but the capacity is {}", capacity);
    const auto& all = session->last_logprobs;
    if (index >= all.size())
      fail_as(ErrorKind::InvalidArgument, "token {} of a generation of {} tokens", index, all.size());
    const eaglevk::engine::TokenLogprobs& t = all[index];
    if (logprob) *logprob = t.logprob;
    for (size_t i = 0; i < t.top.size() && i < capacity; ++i) {
      top_ids[i] = t.top[i].first;
      top_logprobs[i] = t.top[i].second;
    }
    if (out_count) *out_count = t.top.size();
  });
}

}  // extern "C"
