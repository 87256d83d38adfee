#pragma once
// Activation memory planned per pass: every intermediate gets an offset from its lifetime,
// so tensors whose lifetimes do not overlap share bytes. With reuse off every intermediate
// gets its own range, which tests use to show that reuse changes no result.
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/vk/buffer.h"

namespace eaglevk::vk {

struct Context;

struct ArenaPlan {
  struct Tensor {
    std::string name;
    uint64_t bytes = 0;
    uint32_t first_use = 0;  // step of the pass that writes it first
    uint32_t last_use = 0;   // step of the pass that reads it last
    uint64_t offset = 0;     // set by plan()
  };
  std::vector<Tensor> tensors;
  uint64_t total_bytes = 0;
  uint64_t alignment = 256;

  // Returns the tensor's id in this plan.
  uint32_t add(std::string name, uint64_t bytes, uint32_t first_use, uint32_t last_use);
  void plan(bool reuse);
};

bool arena_reuse_from_env();  // EAGLEVK_ARENA_REUSE=0 turns reuse off

// A planned arena backed by one device buffer.
struct Arena {
  ArenaPlan plan;
  Buffer buffer;

  void allocate(const Context& ctx, bool reuse, const std::string& name);
  BufferRange operator[](uint32_t id) const {
    return {buffer, plan.tensors[id].offset, plan.tensors[id].bytes};
  }
};

}  // namespace eaglevk::vk
