// The C API's batches (eaglevk.h, "batches") over api::BatchSession.
#define EAGLEVK_BUILDING_LIBRARY
#include <eaglevk/eaglevk.h>

#include <algorithm>
#include <cstring>

#include <eaglevk/eaglevk.hpp>

#include "runtime/api/capi_support.h"

struct eaglevk_batch {
  std::unique_ptr<eaglevk::api::BatchSession> session;
};

namespace {

namespace api = eaglevk::api;
using namespace eaglevk::api::c_api;
using api::ErrorKind;
using api::fail_as;

eaglevk_batch_params batch_defaults() {
  const api::BatchParams d;
  return eaglevk_batch_params{d.sequences, d.context, d.k, d.greedy_drafts ? 1 : 0};
}

eaglevk_sequence_params sequence_defaults() {
  const api::SequenceParams d;
  eaglevk_sequence_params p{};
  p.temperature = d.sampling.temperature;
  p.top_k = d.sampling.top_k;
  p.top_p = d.sampling.top_p;
  p.seed = d.sampling.seed;
  p.max_new_tokens = d.max_new_tokens;
  p.ignore_eos = d.ignore_eos ? 1 : 0;
  return p;
}

// The first version of each struct: a caller's size below it predates the API.
constexpr size_t kBatchParamsSizeV1 = sizeof(eaglevk_batch_params);
constexpr size_t kSequenceParamsSizeV1 = sizeof(eaglevk_sequence_params);

}  // namespace

void eaglevk_batch_params_init(eaglevk_batch_params* params, size_t size) {
  if (!params) return;
  const eaglevk_batch_params d = batch_defaults();
  std::memcpy(params, &d, std::min(size, sizeof d));
}

void eaglevk_sequence_params_init(eaglevk_sequence_params* params, size_t size) {
  if (!params) return;
  const eaglevk_sequence_params d = sequence_defaults();
  std::memcpy(params, &d, std::min(size, sizeof d));
}

eaglevk_status eaglevk_batch_create_sized(eaglevk_model* model, const eaglevk_batch_params* params, size_t size,
                                          eaglevk_batch** out) {
  return guarded(
      [&] {
        require(out, "out");
        *out = nullptr;
        require(model, "model");
        if (params && size < kBatchParamsSizeV1)
          fail_as(ErrorKind::InvalidArgument, "eaglevk_batch_params of {} bytes: older than any version", size);
        eaglevk_batch_params p = batch_defaults();
        if (params) std::memcpy(&p, params, std::min(size, sizeof p));
        api::BatchParams bp;
        bp.sequences = p.sequences;
        bp.context = p.context;
        bp.k = p.k;
        bp.greedy_drafts = p.greedy_drafts != 0;
        auto handle = std::make_unique<eaglevk_batch>();
        handle->session = std::make_unique<api::BatchSession>(model->model, bp);
        *out = handle.release();
      },
      Fields::Batch);
}

void eaglevk_batch_free(eaglevk_batch* batch) { delete batch; }

eaglevk_status eaglevk_batch_start_sized(eaglevk_batch* batch, const int32_t* prompt, size_t prompt_count,
                                         const eaglevk_sequence_params* params, size_t size,
                                         eaglevk_token_callback callback, void* user, uint32_t* out_id) {
  return guarded(
      [&] {
        require(batch, "batch");
        require(out_id, "out_id");
        if (prompt_count) require(prompt, "prompt");
        if (params && size < kSequenceParamsSizeV1)
          fail_as(ErrorKind::InvalidArgument, "eaglevk_sequence_params of {} bytes: older than any version", size);
        eaglevk_sequence_params p = sequence_defaults();
        if (params) std::memcpy(&p, params, std::min(size, sizeof p));
        api::SequenceParams sp;
        sp.sampling = {p.temperature, p.top_k, p.top_p, p.seed};
        sp.max_new_tokens = p.max_new_tokens;
        sp.ignore_eos = p.ignore_eos != 0;
        if (p.stop_count && !p.stop_strings)
          fail_as(ErrorKind::InvalidArgument, "stop_strings is NULL but stop_count is {}", p.stop_count);
        for (size_t i = 0; i < p.stop_count; ++i) {
          if (!p.stop_strings[i]) fail_as(ErrorKind::InvalidArgument, "stop_strings[{}] is NULL", i);
          sp.stop.emplace_back(p.stop_strings[i]);
        }
        api::PieceCallback on_piece;
        if (callback)
          on_piece = [callback, user](int32_t token, std::string_view piece) {
            std::string text(piece);  // NUL-terminated for C
            return callback(token, text.c_str(), user) == 0;
          };
        *out_id = batch->session->start(std::span<const int32_t>(prompt, prompt_count), sp, std::move(on_piece));
      },
      Fields::Batch);
}

eaglevk_status eaglevk_batch_step(eaglevk_batch* batch, uint32_t* finished_ids, size_t capacity, size_t* out_count) {
  return guarded([&] {
    if (out_count) *out_count = 0;
    require(batch, "batch");
    const size_t sequences = batch->session->params().sequences;
    if (finished_ids && capacity < sequences)
      fail_as(ErrorKind::BufferTooSmall, "finished_ids holds {} but the batch has {} sequences", capacity, sequences);
    if (!finished_ids && capacity) fail_as(ErrorKind::InvalidArgument, "finished_ids is NULL but its capacity is {}", capacity);
    const std::vector<uint32_t> done = batch->session->step();
    if (finished_ids && !done.empty()) std::memcpy(finished_ids, done.data(), done.size() * sizeof(uint32_t));
    if (out_count) *out_count = done.size();
  });
}

eaglevk_status eaglevk_batch_running(const eaglevk_batch* batch, int* out_running) {
  return guarded([&] {
    require(batch, "batch");
    require(out_running, "out_running");
    *out_running = batch->session->running() ? 1 : 0;
  });
}

eaglevk_status eaglevk_batch_take(eaglevk_batch* batch, uint32_t id, int32_t* out_tokens, size_t capacity,
                                  size_t* out_count, eaglevk_spec_stats* stats) {
  return guarded([&] {
    require(batch, "batch");
    if (!batch->session->finished(id))
      fail_as(ErrorKind::InvalidArgument, "sequence {} has not finished (eaglevk_batch_step reports it when it has)",
              id);
    const size_t count = batch->session->output_tokens(id);
    if (out_count) *out_count = count;
    if (out_tokens) require_capacity(out_tokens, capacity, count, "out_tokens");
    const api::GenerateOutput r = batch->session->take(id);
    if (out_tokens && !r.tokens.empty()) std::memcpy(out_tokens, r.tokens.data(), r.tokens.size() * sizeof(int32_t));
    if (stats) {
      const eaglevk::engine::SpecStats& s = r.stats;
      *stats = eaglevk_spec_stats{s.num_drafts,      s.num_draft_tokens,         s.num_accepted_tokens,
                                  r.tokens.size(), s.mean_acceptance_length(), s.accepted_at.size()};
    }
  });
}

eaglevk_status eaglevk_batch_cancel(eaglevk_batch* batch, uint32_t id) {
  return guarded([&] {
    require(batch, "batch");
    batch->session->cancel(id);
  });
}
