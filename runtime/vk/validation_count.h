#pragma once
// Test-only adjustment of vk::validation_errors_in_process() (runtime/vk/context.h).
#include <cstdint>

namespace eaglevk::vk {

// Takes `count` errors back out of the process-wide count: for the one test that provokes
// errors on purpose, to show that synchronization validation catches a missing barrier.
void forgive_validation_errors(uint32_t count);

// Error messages EAGLEVK_VALIDATION_IGNORE listed (runtime/vk/validation_ignore.h): printed,
// not counted above; counted here so a test can tell "ignored" from "never reported".
uint32_t ignored_validation_errors_in_process();

}  // namespace eaglevk::vk
