#include "loader/input_path.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include <eaglevk/error.h>

namespace eaglevk::loader {
namespace {

// `what 'path'`, or `'path'` when the role is not given.
std::string named(const std::filesystem::path& path, std::string_view what) {
  return what.empty() ? fmt::format("'{}'", path.string()) : fmt::format("{} '{}'", what, path.string());
}

std::string problem(const std::filesystem::path& path, std::string_view what, bool file_ok, bool folder_ok,
                    std::string_view wanted) {
  int error = 0;
  const PathKind kind = path_kind(path, &error);
  if ((kind == PathKind::File && file_ok) || (kind == PathKind::Folder && folder_ok)) return {};
  if (kind == PathKind::Missing) return fmt::format("{} does not exist", named(path, what));
  if (kind == PathKind::Unreadable) return fmt::format("{}: cannot read: {}", named(path, what), std::strerror(error));
  return fmt::format("{} is {}, not {}", named(path, what), path_kind_name(kind), wanted);
}

}  // namespace

PathKind path_kind(const std::filesystem::path& path, int* error) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return PathKind::Missing;
    if (error) *error = errno;
    return PathKind::Unreadable;
  }
  if (S_ISREG(st.st_mode)) return PathKind::File;
  if (S_ISDIR(st.st_mode)) return PathKind::Folder;
  if (S_ISFIFO(st.st_mode)) return PathKind::Fifo;
  if (S_ISCHR(st.st_mode)) return PathKind::CharDevice;
  if (S_ISBLK(st.st_mode)) return PathKind::BlockDevice;
  return PathKind::Socket;  // the one type stat() reports beside these
}

std::string_view path_kind_name(PathKind kind) {
  switch (kind) {
    case PathKind::Missing: return "missing";
    case PathKind::File: return "a regular file";
    case PathKind::Folder: return "a folder";
    case PathKind::Fifo: return "a FIFO";
    case PathKind::CharDevice: return "a character device";
    case PathKind::BlockDevice: return "a block device";
    case PathKind::Socket: return "a socket";
    case PathKind::Unreadable: return "unreadable";
  }
  return "?";
}

std::string file_problem(const std::filesystem::path& path, std::string_view what) {
  return problem(path, what, true, false, "a file");
}

std::string folder_problem(const std::filesystem::path& path, std::string_view what) {
  return problem(path, what, false, true, "a folder");
}

std::string model_problem(const std::filesystem::path& path, std::string_view what) {
  return problem(path, what, true, true, "a model folder or a GGUF file");
}

void require_file(const std::filesystem::path& path, std::string_view what) {
  if (std::string p = file_problem(path, what); !p.empty()) fail("{}", p);
}

void require_folder(const std::filesystem::path& path, std::string_view what) {
  if (std::string p = folder_problem(path, what); !p.empty()) fail("{}", p);
}

bool path_is_inside(const std::filesystem::path& path, const std::filesystem::path& folder) {
  std::error_code ec;
  auto resolved = [&](const std::filesystem::path& p) {
    const std::filesystem::path absolute = std::filesystem::absolute(p.empty() ? "." : p, ec);
    std::filesystem::path r = std::filesystem::weakly_canonical(absolute, ec);
    return ec ? absolute.lexically_normal() : r;
  };
  const std::filesystem::path relative = resolved(path).lexically_relative(resolved(folder));
  return !relative.empty() && *relative.begin() != ".." && relative != ".";
}

}  // namespace eaglevk::loader
