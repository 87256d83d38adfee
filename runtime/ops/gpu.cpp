#include "runtime/ops/gpu.h"

#include <algorithm>
#include <string>

#include <fmt/format.h>

#include <eaglevk/error.h>

#include "runtime/ops/lattice_grids.h"
#include "shaders/shared_constants.h"

namespace eaglevk::ops {

Gpu::Gpu(const vk::ContextOptions& options)
    : ctx(options), pipelines(ctx), dummy(ctx, 256, vk::MemoryKind::Device, "dummy binding"),
      lattice_grids(upload_lattice_grids(ctx)), profile(device_profile(ctx.info)) {
  if (profile.matvec_set) matvec_shape_override = profile.matvec;
  norm_workgroup = profile.norm_workgroup;
  attention_max_group = profile.attention_group;
  attention_max_rows = profile.attention_rows;
  fold_norms = profile.fold_norms;
  fold_rope = profile.fold_rope;
  coopmat_gemm = profile.gemm_coopmat;
  gemm_block = profile.gemm_block;
  gemm_f16_inputs = profile.gemm_f16_inputs;
  gemm_prefetch = profile.gemm_prefetch;
  gemm_tile_k = profile.gemm_tile_k;
  // A k tile the device cannot hold fails here, before any work, rather than at the first prefill.
  if (coopmat_gemm && gemm_block == 128 && gemm_tile_k != GEMM_COOPMAT_TILE_K)
    coopmat_gemm_spec(*this, coopmat_kernel(ctx, 128), 128);
}

uint32_t gemm_block_for(uint32_t vendor_id, bool block128_runs) {
  // NVIDIA: the 128 block prefilled an 8B Q4_K_M at 1.056x the 64 one's pp512 (H200, 2026-11-29,
  // docs/perf.md). Other vendors keep 64 until a measurement says otherwise.
  return vendor_id == vk::vendor::kNvidia && block128_runs ? 128 : 64;
}

uint32_t coopmat128_shared_bytes(uint32_t mm, uint32_t mn, uint32_t tile_k, bool lo_terms) {
  const uint32_t s = GEMM_COOPMAT128_SUBGROUPS;
  const uint32_t lo_rows = lo_terms ? s * mm + s * mn : 2;
  const uint32_t stride = tile_k + (GEMM_COOPMAT_STRIDE - GEMM_COOPMAT_TILE_K);
  return (s * mm + s * mn + lo_rows) * stride * 2 + s * mm * mn * 4;
}

std::string coopmat_unavailable(const vk::Context& ctx, uint32_t block) { return coopmat_unavailable(ctx.info, block); }

std::string coopmat_unavailable(const vk::DeviceInfo& info, uint32_t block) {
  const auto& f = info.features;
  if (!vk::PipelineCache::has_shader("gemm_f16_coopmat"))
    return "this build has no cooperative-matrix kernels (its glslc did not know GL_KHR_cooperative_matrix)";
  if (!f.coopmat_m)
    return fmt::format("device '{}' lacks VK_KHR_cooperative_matrix with f16 matrices of 8 or 16 and f32 sums at "
                       "subgroup scope (or f16 arithmetic, or the Vulkan memory model)",
                       info.name);
  // Four subgroups of one known size a workgroup, each taking a quadrant of the block.
  if (f.min_subgroup_size != f.max_subgroup_size)
    return fmt::format("device '{}' picks subgroup sizes per shader and cannot require one", info.name);
  if (4 * f.subgroup_size > f.max_workgroup_invocations || f.max_compute_shared_memory < GEMM_COOPMAT_SHARED_BYTES)
    return fmt::format("device '{}' cannot run workgroups of {} invocations with {} bytes of shared memory",
                       info.name, 4 * f.subgroup_size, GEMM_COOPMAT_SHARED_BYTES);
  if (block == 128) {
    const uint32_t invocations = GEMM_COOPMAT128_SUBGROUPS * f.subgroup_size;
    const uint32_t bytes = coopmat128_shared_bytes(f.coopmat_m, f.coopmat_n);
    if (invocations > f.max_workgroup_invocations || bytes > f.max_compute_shared_memory)
      return fmt::format("device '{}' cannot run the 128 block's workgroups of {} invocations with {} bytes of shared "
                         "memory (it allows {} and {}); gemm.block=64 runs the 64 block",
                         info.name, invocations, bytes, f.max_workgroup_invocations, f.max_compute_shared_memory);
  }
  return {};
}

CoopmatKernel coopmat_kernel(const vk::Context& ctx, uint32_t block) {
  const auto& f = ctx.info.features;
  if (block != 128)
    return {{4 * f.subgroup_size, f.coopmat_m, f.coopmat_n, f.coopmat_k}, 4 * f.coopmat_m, 4 * f.coopmat_n};
  if (const std::string missing = coopmat_unavailable(ctx, 128); !missing.empty())
    fail("the coopmat GEMM's 128 block: {}", missing);
  const uint32_t s = GEMM_COOPMAT128_SUBGROUPS;
  return {{s * f.subgroup_size, f.coopmat_m, f.coopmat_n, f.coopmat_k}, s * f.coopmat_m, s * f.coopmat_n,
          "_coopmat128"};
}

std::vector<uint32_t> coopmat_gemm_spec(const Gpu& gpu, const CoopmatKernel& kernel, uint32_t block) {
  std::vector<uint32_t> spec = kernel.spec;
  const bool prefetch = gpu.gemm_prefetch && block == 128;
  const uint32_t tile_k = block == 128 ? gpu.gemm_tile_k : GEMM_COOPMAT_TILE_K;
  if (tile_k != GEMM_COOPMAT_TILE_K) {
    const auto& f = gpu.ctx.info.features;
    const uint32_t bytes = coopmat128_shared_bytes(f.coopmat_m, f.coopmat_n, tile_k, !gpu.gemm_f16_inputs);
    if (bytes > f.max_compute_shared_memory)
      fail("gemm.tile_k={}: the 128 block would need {} bytes of shared memory with {} inputs, and device '{}' "
           "allows {}{}",
           tile_k, bytes, gpu.gemm_f16_inputs ? "f16" : "split", gpu.ctx.info.name, f.max_compute_shared_memory,
           gpu.gemm_f16_inputs ? "" : " (gemm.precision=f16 stages half as much)");
  }
  // Constants are given by position: LO_TERMS (4) goes in where it is off or a later one follows.
  const bool later = prefetch || tile_k != GEMM_COOPMAT_TILE_K;
  if (gpu.gemm_f16_inputs || later) spec.push_back(/*LO_TERMS=*/gpu.gemm_f16_inputs ? 0u : 1u);
  if (later) spec.push_back(/*PREFETCH=*/prefetch ? 1u : 0u);
  if (tile_k != GEMM_COOPMAT_TILE_K) spec.push_back(/*TILE_K=*/tile_k);
  return spec;
}

uint32_t norm_workgroup_for(bool cpu_device, uint32_t max_invocations, uint32_t min_subgroup_size) {
  // CPU devices: one subgroup of lavapipe's 8. llvmpipe runs a workgroup's subgroups as
  // coroutines that switch at every barrier; Llama-4's per-head norms of 32-element rows took
  // 37 ms of an 80-token prefill with 64 invocations a row, 7 ms with 8 (docs/perf.md).
  if (cpu_device) return 8;
  uint32_t limit = std::min(max_invocations, 64u * std::max(min_subgroup_size, 1u));
  uint32_t wg = 512;
  while (wg > 64 && wg > limit) wg /= 2;
  return wg;
}

Grid linear_grid(const vk::Context& ctx, uint64_t threads, uint32_t local, const char* name) {
  const uint64_t groups = (threads + local - 1) / local;
  const uint64_t max_x = ctx.max_workgroups[0], max_y = ctx.max_workgroups[1];
  if (groups <= max_x) return Grid{uint32_t(std::max<uint64_t>(groups, 1)), 1};
  const uint64_t y = (groups + max_x - 1) / max_x;
  if (y > max_y)
    fail("{}: {} workgroups do not fit the device's grid of {} x {}", name, groups, max_x, max_y);
  // Rows of equal width: at most max_x - 1 idle groups, all in the last row.
  return Grid{uint32_t((groups + y - 1) / y), uint32_t(y)};
}

}  // namespace eaglevk::ops
