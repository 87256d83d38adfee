#include "runtime/vk/hazard.h"

#include <algorithm>

namespace eaglevk::vk {
namespace {

bool is_contiguous(const Access& a) { return a.rows <= 1 || a.bytes >= a.stride; }

uint64_t span_end(const Access& a) {
  return a.rows <= 1 ? a.offset + a.bytes : a.offset + uint64_t(a.rows - 1) * a.stride + a.bytes;
}

// Does the interval [begin, end) meet any row of the strided access s?
bool interval_meets_rows(uint64_t begin, uint64_t end, const Access& s) {
  if (end <= s.offset || begin >= span_end(s)) return false;
  // Rows r with s.offset + r*stride < end and s.offset + r*stride + bytes > begin.
  uint64_t first = begin + 1 > s.offset + s.bytes ? (begin + 1 - s.offset - s.bytes + s.stride - 1) / s.stride : 0;
  uint64_t last = (end - 1 - s.offset) / s.stride;
  last = std::min<uint64_t>(last, s.rows - 1);
  return first <= last;
}

}  // namespace

bool overlaps(const Access& a, const Access& b) {
  if (a.buffer != b.buffer || a.bytes == 0 || b.bytes == 0) return false;
  if (span_end(a) <= b.offset || span_end(b) <= a.offset) return false;
  // Rows that touch or overlap (stride <= bytes, stride 0 included) cover one interval, so
  // only the strided case below divides by a stride, and that stride exceeds bytes >= 1.
  if (is_contiguous(a) && is_contiguous(b)) return true;  // both one interval, and the spans meet
  if (is_contiguous(a)) return interval_meets_rows(a.offset, span_end(a), b);
  if (is_contiguous(b)) return interval_meets_rows(b.offset, span_end(b), a);
  // Both strided: test each row of the shorter against the other.
  const Access& few = a.rows <= b.rows ? a : b;
  const Access& many = a.rows <= b.rows ? b : a;
  for (uint32_t r = 0; r < few.rows; ++r) {
    uint64_t begin = few.offset + uint64_t(r) * few.stride;
    if (interval_meets_rows(begin, begin + few.bytes, many)) return true;
  }
  return false;
}

bool HazardSet::conflicts(const Access& next) const {
  auto hit = [&](const std::vector<Access>& set) {
    return std::any_of(set.begin(), set.end(), [&](const Access& a) { return overlaps(a, next); });
  };
  if ((next.read || next.write) && hit(writes)) return true;  // RAW, WAW
  if (next.write && hit(reads)) return true;                   // WAR
  return false;
}

void HazardSet::add(const Access& a) {
  if (a.read) reads.push_back(a);
  if (a.write) writes.push_back(a);
}

}  // namespace eaglevk::vk
