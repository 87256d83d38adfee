#include "loader/text_file.h"

#include <fstream>
#include <sstream>

#include <eaglevk/error.h>

#include "loader/input_path.h"

namespace eaglevk::loader {

std::string read_text_file(const std::filesystem::path& path, uint64_t max_bytes, std::string_view what) {
  require_file(path);  // a FIFO or a device would block the read or never end
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open {}", path.string());
  std::error_code ec;
  if (const auto size = std::filesystem::file_size(path, ec); !ec && size > max_bytes)
    fail("{}: {} bytes is over the {}-byte ({} MiB) limit for {}", path.string(), size, max_bytes, max_bytes >> 20,
         what);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) fail("cannot read {}", path.string());
  return buffer.str();
}

}  // namespace eaglevk::loader
