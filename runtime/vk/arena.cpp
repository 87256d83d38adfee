#include "runtime/vk/arena.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <numeric>

#include <eaglevk/error.h>

namespace eaglevk::vk {

uint32_t ArenaPlan::add(std::string name, uint64_t bytes, uint32_t first_use, uint32_t last_use) {
  if (last_use < first_use) fail("arena tensor '{}' dies before it is born", name);
  tensors.push_back({std::move(name), bytes, first_use, last_use, 0});
  return uint32_t(tensors.size() - 1);
}

void ArenaPlan::plan(bool reuse) {
  auto round_up = [&](uint64_t x) { return (x + alignment - 1) / alignment * alignment; };
  total_bytes = 0;
  if (!reuse) {
    for (Tensor& t : tensors) {
      t.offset = total_bytes;
      total_bytes += round_up(std::max<uint64_t>(t.bytes, 1));
    }
    return;
  }
  // Greedy by size, largest first: place each tensor at the lowest offset that does not
  // overlap a placed tensor whose lifetime meets its own.
  std::vector<uint32_t> order(tensors.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return tensors[a].bytes > tensors[b].bytes; });
  std::vector<uint32_t> placed;
  for (uint32_t id : order) {
    Tensor& t = tensors[id];
    uint64_t size = round_up(std::max<uint64_t>(t.bytes, 1));
    std::vector<std::pair<uint64_t, uint64_t>> busy;
    for (uint32_t other : placed) {
      const Tensor& o = tensors[other];
      if (o.first_use <= t.last_use && t.first_use <= o.last_use)
        busy.push_back({o.offset, o.offset + round_up(std::max<uint64_t>(o.bytes, 1))});
    }
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

bool arena_reuse_from_env() {
  const char* v = std::getenv("EAGLEVK_ARENA_REUSE");
  return !(v && std::strcmp(v, "0") == 0);
}

void Arena::allocate(const Context& ctx, bool reuse, const std::string& name) {
  plan.plan(reuse);
  buffer = Buffer(ctx, std::max<uint64_t>(plan.total_bytes, 256), MemoryKind::Device, name);
}

}  // namespace eaglevk::vk
