#pragma once
// Which buffer bytes a command touches, and whether two such sets overlap. Accesses may be
// strided (every row of one half of a [T, 2H] buffer) so that two dispatches writing the
// two halves of the same rows are seen as independent.
#include <cstdint>
#include <vector>

namespace eaglevk::vk {

struct Buffer;

struct Access {
  const Buffer* buffer = nullptr;
  uint64_t offset = 0;  // absolute byte offset of the first row
  uint64_t bytes = 0;   // bytes per row
  uint64_t stride = 0;  // bytes between rows (ignored when rows == 1)
  uint32_t rows = 1;
  bool read = false;
  bool write = false;
};

bool overlaps(const Access& a, const Access& b);

// Accesses recorded since the last barrier.
struct HazardSet {
  std::vector<Access> reads;
  std::vector<Access> writes;

  // True when `next` conflicts with something recorded since the last barrier:
  // read-after-write, write-after-write or write-after-read.
  bool conflicts(const Access& next) const;
  void add(const Access& a);
  void clear() {
    reads.clear();
    writes.clear();
  }
};

}  // namespace eaglevk::vk
