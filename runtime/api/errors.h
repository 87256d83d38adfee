#pragma once
// Classifying eaglevk::Error for the facade. A failed Vulkan call or allocation
// (vk::VulkanError) is classified by its VkResult whatever stage hit it (a model too big for the
// GPU fails while loading); any other Error takes the kind of the stage that was running:
// `within(kind, body)` turns it into an ApiError of that kind, and leaves ApiErrors (already
// classified) alone.
#include <new>
#include <utility>

#include <eaglevk/eaglevk.hpp>

#include "runtime/vk/check.h"

namespace eaglevk::api {

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
    throw ApiError(stage, e.what(), e.setting);
  }
}

}  // namespace eaglevk::api
