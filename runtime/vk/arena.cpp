#include "runtime/vk/arena.h"

#include "runtime/vk/switches.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <numeric>

#include <eaglevk/error.h>

namespace eaglevk::vk {
namespace {

uint64_t padded(const ArenaPlan& p, const ArenaPlan::Tensor& t) {
  return (std::max<uint64_t>(t.bytes, 1) + p.alignment - 1) / p.alignment * p.alignment;
}

bool meet(const std::vector<LiveRange>& a, const std::vector<LiveRange>& b) {
  for (const LiveRange& x : a)
    for (const LiveRange& y : b)
      if (x.first <= y.last && y.first <= x.last) return true;
  return false;
}

}  // namespace

uint32_t ArenaPlan::add(std::string name, uint64_t bytes, Lifetime lifetime) {
  if (passes_derived) fail("arena tensor '{}' added after lifetimes were derived", name);
  tensors.push_back({std::move(name), bytes, lifetime, 0});
  return uint32_t(tensors.size() - 1);
}

std::vector<std::vector<LiveRange>> live_ranges(const ArenaPlan& plan, const Buffer& layout, const CommandLog& pass) {
  const size_t n = plan.tensors.size();
  std::vector<std::vector<LiveRange>> ranges(n);
  std::vector<uint8_t> read_in_range(n, 0);
  for (const CommandLog::Entry& e : pass.entries) {
    if (e.access.buffer != &layout) continue;
    for (size_t i = 0; i < n; ++i) {
      const ArenaPlan::Tensor& t = plan.tensors[i];
      if (!overlaps(e.access, Access{&layout, t.offset, t.bytes, t.bytes, 1, true, false})) continue;
      std::vector<LiveRange>& r = ranges[i];
      if (e.access.read) {
        if (r.empty()) {
          if (t.lifetime == Lifetime::Pass)
            fail("arena tensor '{}' is read by command {} before the pass writes it", t.name, e.command);
          r.push_back({0, e.command});
        }
        r.back().last = std::max(r.back().last, e.command);
        read_in_range[i] = 1;
      } else if (r.empty() || read_in_range[i]) {
        // A write after the range's reads: the value read so far is dead, a new one starts.
        r.push_back({e.command, e.command});
        read_in_range[i] = 0;
      } else {
        r.back().last = std::max(r.back().last, e.command);  // another part of the same value
      }
    }
  }
  for (size_t i = 0; i < n; ++i) {
    const Lifetime l = plan.tensors[i].lifetime;
    if (l == Lifetime::Carried) ranges[i] = {{0, pass.commands}};
    if (l == Lifetime::Output && !ranges[i].empty()) ranges[i].back().last = pass.commands;
  }
  return ranges;
}

void ArenaPlan::derive(const Buffer& layout, const CommandLog& pass) {
  const size_t n = tensors.size();
  if (conflicts.size() != n * n) conflicts.assign(n * n, 0);
  const std::vector<std::vector<LiveRange>> ranges = live_ranges(*this, layout, pass);
  for (size_t i = 0; i < n; ++i)
    for (size_t j = i + 1; j < n; ++j)
      if (meet(ranges[i], ranges[j])) conflicts[i * n + j] = conflicts[j * n + i] = 1;
  if (touched.size() != n) touched.assign(n, 0);
  for (size_t i = 0; i < n; ++i) touched[i] |= !ranges[i].empty();
  ++passes_derived;
}

bool ArenaPlan::conflict(uint32_t a, uint32_t b) const {
  const size_t n = tensors.size();
  if (a == b) return true;
  const bool unknown = touched.size() != n || !touched[a] || !touched[b];
  return unknown || conflicts[size_t(a) * n + b];
}

void ArenaPlan::plan(bool reuse) {
  total_bytes = 0;
  if (!reuse) {
    for (Tensor& t : tensors) {
      t.offset = total_bytes;
      total_bytes += padded(*this, t);
    }
    return;
  }
  if (!passes_derived) fail("arena reuse needs lifetimes derived from a recorded pass");
  std::vector<uint32_t> order(tensors.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return tensors[a].bytes > tensors[b].bytes; });
  std::vector<uint32_t> placed;
  std::vector<std::pair<uint64_t, uint64_t>> busy;
  for (uint32_t id : order) {
    Tensor& t = tensors[id];
    const uint64_t size = padded(*this, t);
    busy.clear();
    for (uint32_t other : placed)
      if (conflict(id, other)) busy.push_back({tensors[other].offset, tensors[other].offset + padded(*this, tensors[other])});
    std::sort(busy.begin(), busy.end());
    uint64_t offset = 0;
    for (auto [begin, end] : busy) {
      if (offset + size <= begin) break;
      offset = std::max(offset, end);
    }
    t.offset = offset;
    total_bytes = std::max(total_bytes, offset + size);
    placed.push_back(id);
  }
}

std::vector<std::pair<uint32_t, uint32_t>> ArenaPlan::aliased() const {
  std::vector<std::pair<uint32_t, uint32_t>> out;
  for (uint32_t i = 0; i < tensors.size(); ++i)
    for (uint32_t j = i + 1; j < tensors.size(); ++j) {
      const Tensor &a = tensors[i], &b = tensors[j];
      const bool share = a.offset < b.offset + padded(*this, b) && b.offset < a.offset + padded(*this, a);
      if (share && conflict(i, j)) out.push_back({i, j});
    }
  return out;
}

bool arena_reuse_from_env() { return switch_bool("EAGLEVK_ARENA_REUSE"); }

void Arena::allocate(const Context& ctx, bool reuse, const std::string& name) {
  plan.plan(reuse);
  buffer = Buffer(ctx, std::max<uint64_t>(plan.total_bytes, 256), MemoryKind::Device, name);
}

void Arena::lay_out_dry(const Context& ctx, const std::string& name) {
  plan.plan(false);
  DryAllocations dry;
  buffer = Buffer(ctx, std::max<uint64_t>(plan.total_bytes, 256), MemoryKind::Device, name);
}

}  // namespace eaglevk::vk
