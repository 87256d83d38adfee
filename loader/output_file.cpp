#include "loader/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <streambuf>

#include <fmt/format.h>

#include <eaglevk/error.h>

#include "loader/input_path.h"

namespace eaglevk::loader {
namespace {

// A std::streambuf over a file descriptor, so that a writer streams (a checkpoint may be larger
// than memory) and the file can be fsync'ed before it is renamed. tellp() works (the gguf
// writer checks each tensor's size with it): it is the count of bytes written.
class FdOutput : public std::streambuf {
 public:
  explicit FdOutput(int fd) : fd_(fd) { setp(buffer_, buffer_ + sizeof buffer_); }
  int error() const { return error_; }

 protected:
  int_type overflow(int_type c) override {
    if (!drain()) return traits_type::eof();
    if (!traits_type::eq_int_type(c, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(c);
      pbump(1);
    }
    return traits_type::not_eof(c);
  }
  std::streamsize xsputn(const char* data, std::streamsize n) override {
    if (n < std::streamsize(sizeof buffer_) / 2) return std::streambuf::xsputn(data, n);
    // A large block (a tensor) goes straight to the file.
    if (!drain() || !write_all(data, size_t(n))) return 0;
    return n;
  }
  int sync() override { return drain() ? 0 : -1; }
  pos_type seekoff(off_type off, std::ios_base::seekdir dir, std::ios_base::openmode which) override {
    if (off != 0 || dir != std::ios_base::cur || !(which & std::ios_base::out)) return pos_type(off_type(-1));
    return pos_type(off_type(written_ + uint64_t(pptr() - pbase())));
  }

 private:
  bool drain() {
    const size_t n = size_t(pptr() - pbase());
    setp(buffer_, buffer_ + sizeof buffer_);
    return write_all(buffer_, n);
  }
  bool write_all(const char* data, size_t n) {
    while (n > 0 && error_ == 0) {
      const ssize_t done = ::write(fd_, data, n);
      if (done < 0 && errno == EINTR) continue;
      if (done <= 0) {
        error_ = done < 0 ? errno : EIO;
        break;
      }
      data += done;
      n -= size_t(done);
      written_ += uint64_t(done);
    }
    return error_ == 0;
  }

  int fd_;
  int error_ = 0;
  uint64_t written_ = 0;
  char buffer_[1 << 16];
};

// Runs `write` on `fd` and flushes; the errno of the first failure, or 0.
int stream_into(int fd, const std::function<void(std::ostream&)>& write) {
  FdOutput buffer(fd);
  std::ostream out(&buffer);
  write(out);
  out.flush();
  if (buffer.error()) return buffer.error();
  return out ? 0 : EIO;
}

// The process's own standard output or error named as a file: written to the open descriptor,
// after what stdio holds. Reopened, /proc/self/fd/1 would start at offset 0 (and O_TRUNC would
// empty the file the shell redirected it to), over the text printed before.
int own_stream(const std::filesystem::path& path) {
  const std::string p = path.lexically_normal().string();
  if (p == "/dev/stdout" || p == "/dev/fd/1" || p == "/proc/self/fd/1") return STDOUT_FILENO;
  if (p == "/dev/stderr" || p == "/dev/fd/2" || p == "/proc/self/fd/2") return STDERR_FILENO;
  return -1;
}

std::filesystem::path folder_of(const std::filesystem::path& path) {
  return path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
}

// A FIFO, a device or a symbolic link: opened and written as it is.
void write_in_place(const std::filesystem::path& path, const std::function<void(std::ostream&)>& write) {
  const std::string file = path.string();
  // O_TRUNC empties a linked regular file, and FIFOs and devices ignore it. Opening a FIFO
  // waits for its reader, as the shell's `>` does.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) fail("{}: cannot open for writing: {}", file, std::strerror(errno));
  int error = 0;
  try {
    error = stream_into(fd, write);
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (::close(fd) != 0 && error == 0) error = errno;
  if (error) fail("{}: write failed: {}", file, std::strerror(error));
}

// A regular file or a new name: a temporary file beside it, renamed over it.
void write_atomically(const std::filesystem::path& path, const std::function<void(std::ostream&)>& write) {
  const std::string file = path.string();
  // A name of its own per process and attempt: two writers of one file never share a temporary.
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; fd < 0; ++attempt) {
    tmp = fmt::format("{}.{}.{}.tmp", file, ::getpid(), attempt);
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && (errno != EEXIST || attempt >= 100))
      fail("{}: cannot open {} for writing: {}", file, tmp, std::strerror(errno));
  }
  auto discard = [&] {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
  };
  int error = 0;
  try {
    error = stream_into(fd, write);
  } catch (...) {
    discard();
    throw;
  }
  if (error == 0 && ::fsync(fd) != 0) error = errno;
  if (::close(fd) != 0 && error == 0) error = errno;
  fd = -1;
  if (error) {
    discard();
    fail("{}: write failed: {}", file, std::strerror(error));
  }
  if (::rename(tmp.c_str(), file.c_str()) != 0) {
    error = errno;
    discard();
    fail("{}: cannot rename the temporary file into place: {}", file, std::strerror(error));
  }
  // The rename itself reaches the disk with the folder's entry.
  if (const int dir = ::open(folder_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
}

}  // namespace

std::string output_problem(const std::filesystem::path& path, std::string_view what) {
  const std::string name = what.empty() ? fmt::format("'{}'", path.string()) : fmt::format("{} '{}'", what, path.string());
  int error = 0;
  const PathKind kind = path_kind(path, &error);
  switch (kind) {
    case PathKind::File:
    case PathKind::Fifo:
    case PathKind::CharDevice:
      return {};
    case PathKind::Unreadable:
      return fmt::format("{}: cannot write: {}", name, std::strerror(error));
    case PathKind::Missing: {
      const std::filesystem::path folder = folder_of(path);
      if (path_kind(folder) != PathKind::Folder)
        return fmt::format("{}: cannot open for writing: folder '{}' does not exist", name, folder.string());
      return {};
    }
    default:
      return fmt::format("{} is {}, not a file to write", name, path_kind_name(kind));
  }
}

void write_output_file(const std::filesystem::path& path, const std::function<void(std::ostream&)>& write) {
  if (const int fd = own_stream(path); fd >= 0) {
    std::fflush(fd == STDOUT_FILENO ? stdout : stderr);
    if (const int error = stream_into(fd, write)) fail("{}: write failed: {}", path.string(), std::strerror(error));
    return;
  }
  if (std::string problem = output_problem(path); !problem.empty()) fail("{}", problem);
  struct stat link {};
  const bool exists = ::lstat(path.c_str(), &link) == 0;
  if (exists && !S_ISREG(link.st_mode))
    write_in_place(path, write);
  else
    write_atomically(path, write);
}

}  // namespace eaglevk::loader
