#pragma once
// Short, safe text for JSON values taken from the files being loaded. Such a value may be
// huge or nested 100,000 deep; nlohmann's dump() recurses once per level and writes all of it,
// which exhausts the stack on such input, so messages and notes go through these instead.
#include <cstddef>
#include <exception>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace eaglevk::loader {

// The value in dump()'s compact form when it is at most 3 levels deep and about `max_chars`
// long (so small values read exactly as dump() writes them); deeper levels and the rest are
// elided as "...". Never throws (invalid UTF-8 in a string becomes U+FFFD) and never recurses
// more than 3 levels, whatever the value.
std::string json_text(const nlohmann::json& value, size_t max_chars = 80);

// For error messages: the JSON type name, then json_text: `string "abc"`, `number 8.5`,
// `array [1,[2,[...]],...]`, `object {"a":1}`, `null`.
std::string json_excerpt(const nlohmann::json& value, size_t max_chars = 80);

// Whether `value` nests arrays and objects more than `limit` levels deep (a scalar is depth 0,
// [1] depth 1). Walks with an explicit stack, so any depth is safe to ask about.
bool json_nested_deeper_than(const nlohmann::json& value, size_t limit);

// nlohmann's parse error without the text it quotes ("last read: '...'"): the position and
// what was wrong, never the file's bytes (which may be huge, or anything the user can read).
std::string json_parse_error_text(const std::exception& error);

}  // namespace eaglevk::loader
