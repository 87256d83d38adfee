#pragma once
// Reading a whole text file (JSON, templates, prompts, datasets): one definition for every
// loader and command, with a size cap checked before anything is read, so that a huge or
// hostile file is refused instead of loaded into memory.
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace eaglevk::loader {

// Fails with "'PATH' does not exist", "'PATH' is a FIFO, not a file" (any type but a regular
// file: loader/input_path.h), "cannot open PATH", "PATH: N bytes is over the M-byte limit for
// WHAT" or "cannot read PATH".
std::string read_text_file(const std::filesystem::path& path, uint64_t max_bytes = UINT64_MAX,
                           std::string_view what = "this file");

}  // namespace eaglevk::loader
