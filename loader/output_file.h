#pragma once
// Writing a file the user named (run --dump-taps, eval --json, eval-merge -o, written
// checkpoints): one definition for every writer.
//
// A regular file, or a name where nothing is yet, is written atomically: into a temporary file
// in the same folder, flushed to disk (fsync), then renamed over the name, so that a reader
// never sees half a file and a failed write leaves the old file as it was. Anything else is
// written in place, through it: renaming over a FIFO, a character device (/dev/stdout,
// /dev/null) or a symbolic link would replace it with a regular file. The process's own
// /dev/stdout and /dev/stderr go to the open descriptor, after what was printed before. A
// folder, a socket and a block device are refused.
#include <filesystem>
#include <functional>
#include <ostream>
#include <string>
#include <string_view>

namespace eaglevk::loader {

// The reason `path` cannot be written, or "": it is a folder, a socket or a block device, or
// its folder does not exist. `what` (may be empty) names the path's role in the message, as
// in loader/input_path.h. Commands check their output paths with it before the work that
// fills them.
std::string output_problem(const std::filesystem::path& path, std::string_view what = {});

// Writes `path` through `write`, as above. Errors (eaglevk::Error) name the file; an exception
// from `write` removes the temporary file and propagates.
void write_output_file(const std::filesystem::path& path, const std::function<void(std::ostream&)>& write);

}  // namespace eaglevk::loader
