#pragma once
// What every C entry point shares (capi.cpp, capi_batch.cpp): the thread's last error, the
// status of each error kind, the C names of settings, and `guarded`, which runs a call's body
// so that no exception crosses into C.
#include <eaglevk/eaglevk.h>

#include <cstring>
#include <new>
#include <string>

#include <eaglevk/eaglevk.hpp>

#include "runtime/vk/check.h"

// The handles both files open.
struct eaglevk_runtime {
  eaglevk::api::Runtime runtime;
  std::vector<double> split;  // eaglevk_runtime_create_split's shares: every model loaded on it
};

struct eaglevk_model {
  std::shared_ptr<const eaglevk::api::Model> model;
};

namespace eaglevk::api::c_api {

inline std::string& last_error() {
  thread_local std::string message;
  return message;
}

inline eaglevk_status status_of(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::InvalidArgument: return EAGLEVK_ERROR_INVALID_ARGUMENT;
    case ErrorKind::Io: return EAGLEVK_ERROR_IO;
    case ErrorKind::Model: return EAGLEVK_ERROR_MODEL;
    case ErrorKind::Device: return EAGLEVK_ERROR_DEVICE;
    case ErrorKind::ContextFull: return EAGLEVK_ERROR_CONTEXT_FULL;
    case ErrorKind::BufferTooSmall: return EAGLEVK_ERROR_BUFFER_TOO_SMALL;
    case ErrorKind::Internal: return EAGLEVK_ERROR_INTERNAL;
    case ErrorKind::DeviceLost: return EAGLEVK_ERROR_DEVICE_LOST;
    case ErrorKind::OutOfMemory: return EAGLEVK_ERROR_OUT_OF_MEMORY;
  }
  return EAGLEVK_ERROR_INTERNAL;
}

// Which C structs a call's settings come from: a session's, or a batch's and its sequences'.
enum class Fields { Session, Batch };

// The C API's words for the settings errors are about: the field or argument that sets it.
inline const char* field_of(eaglevk::Setting setting, Fields fields) {
  using eaglevk::Setting;
  const bool batch = fields == Fields::Batch;
  switch (setting) {
    case Setting::None: return "";
    case Setting::Context: return batch ? "eaglevk_batch_params.context" : "eaglevk_session_params.context";
    case Setting::ChainDraftTokens: return batch ? "eaglevk_batch_params.k" : "eaglevk_session_params.k";
    case Setting::Batch: return batch ? "eaglevk_batch_params.sequences" : "";
    case Setting::TreeSteps: return "eaglevk_session_params.spec_steps";
    case Setting::TreeTopK: return "eaglevk_session_params.spec_topk";
    case Setting::TreeDraftTokens: return "eaglevk_session_params.spec_draft_tokens";
    case Setting::TapLayers: return "";  // the C API takes the draft config's tap layers
    case Setting::VisionProjector: return "eaglevk_model_load_with_mmproj's mmproj";
    case Setting::Temperature: return batch ? "eaglevk_sequence_params.temperature" : "eaglevk_session_params.temperature";
    case Setting::TopK: return batch ? "eaglevk_sequence_params.top_k" : "eaglevk_session_params.top_k";
    case Setting::TopP: return batch ? "eaglevk_sequence_params.top_p" : "eaglevk_session_params.top_p";
    case Setting::Logprobs: return "eaglevk_session_params.logprobs";
    case Setting::StopStrings:
      return batch ? "eaglevk_sequence_params.stop_strings" : "eaglevk_session_params.stop_strings";
    case Setting::ExpertsInHost: return "";  // the C API has no load options: the memory plan chooses
    case Setting::Devices: return "eaglevk_runtime_create_split's devices";
    case Setting::LayerSplit: return "eaglevk_runtime_create_split's shares";
  }
  return "";
}

// field: what the C API calls the setting the message is about ("" for none), put first.
inline eaglevk_status failed(eaglevk_status status, const char* message, const char* field = "") noexcept {
  try {
    last_error() = *field ? fmt::format("{}: {}", field, message) : std::string(message);
  } catch (...) {
    // No memory for the message: the status still says what kind of failure it was.
  }
  return status;
}

// Runs one API call's body; exceptions become a status and the last-error message.
template <typename Body>
inline eaglevk_status guarded(Body&& body, Fields fields = Fields::Session) noexcept {
  try {
    last_error().clear();
    body();
    return EAGLEVK_OK;
  } catch (const api::ApiError& e) {
    return failed(status_of(e.kind), e.what(), field_of(e.setting, fields));
  } catch (const eaglevk::vk::VulkanError& e) {
    return failed(e.device_lost()     ? EAGLEVK_ERROR_DEVICE_LOST
                  : e.out_of_memory() ? EAGLEVK_ERROR_OUT_OF_MEMORY
                                      : EAGLEVK_ERROR_DEVICE,
                  e.what());
  } catch (const eaglevk::Error& e) {
    // Thrown outside every classified stage: a bug.
    return failed(EAGLEVK_ERROR_INTERNAL, e.what(), field_of(e.setting, fields));
  } catch (const std::bad_alloc&) {
    return failed(EAGLEVK_ERROR_OUT_OF_MEMORY, "out of host memory");
  } catch (const std::exception& e) {
    return failed(EAGLEVK_ERROR_INTERNAL, e.what());
  } catch (...) {
    return failed(EAGLEVK_ERROR_INTERNAL, "unknown exception");
  }
}

template <typename T>
inline void require(const T* pointer, const char* name) {
  if (!pointer) fail_as(ErrorKind::InvalidArgument, "{} is NULL", name);
}

// The buffer protocol: `needed` items must fit `capacity`, else nothing is written.
inline void require_capacity(const void* buffer, size_t capacity, size_t needed, const char* name) {
  if (!buffer && capacity) fail_as(ErrorKind::InvalidArgument, "{} is NULL but its capacity is {}", name, capacity);
  if (capacity < needed)
    fail_as(ErrorKind::BufferTooSmall, "{} holds {} but {} are needed", name, capacity, needed);
}

// Text out: the capacity counts the terminating NUL, *out_length does not.
inline void write_text(const std::string& text, char* buffer, size_t capacity, size_t* out_length) {
  require(out_length, "out_length");
  *out_length = text.size();
  require_capacity(buffer, capacity, text.size() + 1, "the text buffer");
  std::memcpy(buffer, text.data(), text.size());
  buffer[text.size()] = '\0';
}


}  // namespace eaglevk::api::c_api
