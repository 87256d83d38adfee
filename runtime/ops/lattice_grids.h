#pragma once
// The grids of ggml's lattice formats (IQ1_S ... IQ3_S) as a device buffer that their kernels
// bind. A table of 0.5-4 KB indexed per element is not a constant array in the shaders: as one,
// llvmpipe compiled each lattice kernel for 1-114 s (measured; the array becomes a per-invocation
// copy), and GPU compilers commonly place such arrays in per-thread local memory (not measured
// here). A storage buffer this small stays in the cache.
#include <span>
#include <vector>

#include "runtime/ops/tensor.h"
#include "runtime/vk/buffer.h"
#include "runtime/vk/context.h"
#include "runtime/vk/recorder.h"

namespace eaglevk::ops {

struct Gpu;

// Every format's grid (shaders/iq_grids.h) in one buffer, each at a 256-byte aligned offset
// (the largest minStorageBufferOffsetAlignment Vulkan allows).
vk::Buffer upload_lattice_grids(const vk::Context& ctx);

// `args`, then, for a lattice weight type, its grid: quant.glsl's IqGrid, which every kernel
// that reads such weights declares as its last binding.
std::vector<vk::Arg> with_lattice_grid(const Gpu& gpu, WeightType type, std::span<const vk::Arg> args);
inline std::vector<vk::Arg> with_lattice_grid(const Gpu& gpu, WeightType type, std::initializer_list<vk::Arg> args) {
  return with_lattice_grid(gpu, type, std::span<const vk::Arg>(args.begin(), args.size()));
}

}  // namespace eaglevk::ops
