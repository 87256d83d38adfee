#pragma once
// What stands at a path the user gave, found with stat() before anything opens it. Opening a
// FIFO for reading blocks until a writer comes (forever, for a forgotten one), a character
// device such as /dev/zero never ends, and a folder where a file is expected fails later with
// a misleading reason: each is refused here with what the path is ("'x' is a FIFO, not a
// file"). The loaders, the facade and the CLI check every input path through these.
#include <filesystem>
#include <string>
#include <string_view>

namespace eaglevk::loader {

enum class PathKind { Missing, File, Folder, Fifo, CharDevice, BlockDevice, Socket, Unreadable };

// stat() of `path` (symbolic links followed); `error`, when given, receives errno for Unreadable.
PathKind path_kind(const std::filesystem::path& path, int* error = nullptr);

// "a regular file", "a folder", "a FIFO", "a character device", ... for messages.
std::string_view path_kind_name(PathKind kind);

// The reason `path` cannot be read as the wanted kind, or "" when it can. `what` (may be
// empty) names the path's role: "dataset '/tmp/x' is a FIFO, not a file".
// file_problem: a regular file. folder_problem: a folder. model_problem: a folder or a file
// (a GGUF file; the loaders say what else is wrong with it).
std::string file_problem(const std::filesystem::path& path, std::string_view what = {});
std::string folder_problem(const std::filesystem::path& path, std::string_view what = {});
std::string model_problem(const std::filesystem::path& path, std::string_view what = {});

// The same as eaglevk::Error when there is a problem.
void require_file(const std::filesystem::path& path, std::string_view what = {});
void require_folder(const std::filesystem::path& path, std::string_view what = {});

// Whether `path` lies inside `folder` once both are resolved (symbolic links followed, "." and
// ".." removed; an empty folder is the working directory). Image paths in a messages file or a
// dataset are confined this way: a file from elsewhere must not make eaglevk read any file the
// user can read ("../../home/me/.ssh/id_rsa", an absolute path).
bool path_is_inside(const std::filesystem::path& path, const std::filesystem::path& folder);

}  // namespace eaglevk::loader
