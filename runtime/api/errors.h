#pragma once
// Classifying eaglevk::Error for the facade. The runtime throws one exception type, so the
// kind comes from the stage that was running: `within(kind, body)` turns a plain Error thrown
// by `body` into an ApiError of that kind, and leaves ApiErrors (already classified) alone.
#include <string_view>
#include <utility>

#include <eaglevk/eaglevk.hpp>

#include "runtime/vk/check.h"

namespace eaglevk::api {

// Allocation and Vulkan call failures are device failures whatever stage hit them (a model too
// big for the GPU fails while loading). Their messages come from runtime/vk/check.h and
// runtime/vk/buffer.cpp.
inline ErrorKind refine(ErrorKind stage, std::string_view message) {
  if (message.starts_with("Vulkan call ") || message.starts_with("cannot allocate ")) return ErrorKind::Device;
  return stage;
}

template <typename Body>
decltype(auto) within(ErrorKind stage, Body&& body) {
  try {
    return std::forward<Body>(body)();
  } catch (const ApiError&) {
    throw;
  } catch (const vk::VulkanError& e) {
    // Whatever the stage: a lost (or hung) device and exhausted memory have their own kinds.
    throw ApiError(e.device_lost() ? ErrorKind::DeviceLost : e.out_of_memory() ? ErrorKind::OutOfMemory : ErrorKind::Device,
                   e.what());
  } catch (const std::bad_alloc&) {
    throw ApiError(ErrorKind::OutOfMemory, "out of host memory");
  } catch (const Error& e) {
    throw ApiError(refine(stage, e.what()), e.what());
  }
}

}  // namespace eaglevk::api
