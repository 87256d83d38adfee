#pragma once
// EAGLEVK_VALIDATION_IGNORE: validation messages, by their messageIdNumber, that are printed but
// not counted as errors. For a validation layer older than the driver: it reports the newer
// extensions it does not know (unknown pNext structures, SPIR-V capabilities) as errors, and
// those would fail every test that counts errors while hiding the real ones.
#include <cstdint>
#include <vector>

namespace eaglevk::vk {

// Parses a comma-separated list of message IDs, each hexadecimal (0x...) or decimal, as the
// layer prints them ("MessageID = 0xdd73dbcf"). Null or empty gives none; anything else that
// is not such a list throws eaglevk::Error naming EAGLEVK_VALIDATION_IGNORE.
std::vector<uint32_t> ignored_validation_ids(const char* list);

// The process's list, from EAGLEVK_VALIDATION_IGNORE, parsed once (on first use: the Context
// asks before creating its instance, so a malformed list fails there, not in the callback).
const std::vector<uint32_t>& ignored_validation_ids_in_process();

}  // namespace eaglevk::vk
