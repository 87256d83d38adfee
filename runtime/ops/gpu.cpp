#include "runtime/ops/gpu.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>

#include <fmt/format.h>

#include <eaglevk/error.h>

#include "runtime/ops/lattice_grids.h"
#include "shaders/shared_constants.h"

namespace eaglevk::ops {

Gpu::Gpu(const vk::ContextOptions& options)
    : ctx(options), pipelines(ctx), dummy(ctx, 256, vk::MemoryKind::Device, "dummy binding"),
      lattice_grids(upload_lattice_grids(ctx)) {
  matvec_shape_override = matvec_shape_from_env(ctx);
  const auto& f = ctx.info.features;
  // EAGLEVK_GPU_SHAPES=1 gives the norms a GPU's workgroup too.
  const bool cpu_shapes = ctx.info.type == VK_PHYSICAL_DEVICE_TYPE_CPU && !gpu_shapes_from_env();
  norm_workgroup = norm_workgroup_for(cpu_shapes, f.max_workgroup_invocations, f.min_subgroup_size);
  const char* fold = std::getenv("EAGLEVK_FOLD_NORMS");
  fold_norms = fold && std::strcmp(fold, "1") == 0;
  if (const char* env = std::getenv("EAGLEVK_FOLD_ROPE"); env && *env) {
    if (std::strcmp(env, "0") != 0 && std::strcmp(env, "1") != 0)
      fail("EAGLEVK_FOLD_ROPE={}: expected 1 (rope and the cache write in the q/k/v product) or 0", env);
    fold_rope = std::strcmp(env, "1") == 0;
  }
  if (const char* env = std::getenv("EAGLEVK_ATTENTION_ROWS")) {
    char* end = nullptr;
    const unsigned long rows = std::strtoul(env, &end, 10);
    if (end == env || *end || rows < 1 || rows > ATTENTION_MAX_ROWS)
      fail("EAGLEVK_ATTENTION_ROWS={}: rows per attention workgroup must be 1..{}", env, ATTENTION_MAX_ROWS);
    attention_max_rows = uint32_t(rows);
  }
  const std::string coopmat_missing = coopmat_unavailable(ctx);
  const char* coopmat = std::getenv("EAGLEVK_COOPMAT");
  if (!coopmat || !*coopmat) {
    // Not by default on CPU devices (llvmpipe emulates the matrices one lane at a time) nor on
    // Intel's, whose drivers have run cooperative matrices slower than scalar code on some
    // generations (llama.cpp enables them per architecture) and which no test has reached.
    coopmat_gemm = coopmat_missing.empty() && ctx.info.type != VK_PHYSICAL_DEVICE_TYPE_CPU &&
                   ctx.info.vendor_id != 0x8086;
  } else if (std::strcmp(coopmat, "1") == 0) {
    if (!coopmat_missing.empty()) fail("EAGLEVK_COOPMAT=1: {}", coopmat_missing);
    coopmat_gemm = true;
  } else if (std::strcmp(coopmat, "0") != 0) {
    fail("EAGLEVK_COOPMAT={}: expected 1 (use cooperative matrices for prefill) or 0", coopmat);
  }
  gemm_block = gemm_block_from_env();
  if (gemm_block == 128 && coopmat_gemm) {
    const std::string missing = coopmat_unavailable(ctx, 128);
    if (!missing.empty()) fail("EAGLEVK_GEMM_BLOCK=128: {}", missing);
  }
  if (gemm_block == 0) gemm_block = gemm_block_for(ctx.info.vendor_id, coopmat_unavailable(ctx, 128).empty());
  gemm_f16_inputs = gemm_f16_inputs_from_env();
  gemm_prefetch = gemm_prefetch_from_env();
  gemm_tile_k = gemm_tile_k_from_env();
  // A k tile the device cannot hold fails here, before any work, rather than at the first prefill.
  if (coopmat_gemm && gemm_block == 128 && gemm_tile_k != GEMM_COOPMAT_TILE_K)
    coopmat_gemm_spec(*this, coopmat_kernel(ctx, 128), 128);
}

namespace {

// A value of an environment switch, and what it means (for the message refusing any other).
struct EnvChoice {
  const char* text;
  uint32_t value;
  const char* meaning;
};

// The switch `name`: unset or empty gives `unset`, one of `choices` its value, anything else an
// error naming every choice and what it means.
uint32_t env_choice(const char* name, uint32_t unset, std::initializer_list<EnvChoice> choices) {
  const char* env = std::getenv(name);
  if (!env || !*env) return unset;
  std::string expected;
  for (const EnvChoice& c : choices) {
    if (std::strcmp(env, c.text) == 0) return c.value;
    expected += fmt::format("{}{} ({})", expected.empty() ? "" : " or ", c.text, c.meaning);
  }
  fail("{}={}: expected {}", name, env, expected);
}

}  // namespace

uint32_t gemm_tile_k_from_env() {
  return env_choice("EAGLEVK_GEMM_TILE_K", 32,
                    {{"32", 32, "the coopmat GEMM's 128 block stages k 32 at a time, the default"},
                     {"64", 64, "64 at a time, half the barriers"}});
}

bool gemm_prefetch_from_env() {
  return env_choice("EAGLEVK_GEMM_PREFETCH", 0,
                    {{"1", 1,
                      "the coopmat GEMM's 128 block loads the next k tile into registers during the current tile's "
                      "products"},
                     {"0", 0, "the plain loop, the default"}}) != 0;
}

bool gemm_f16_inputs_from_env() {
  return env_choice("EAGLEVK_GEMM_PRECISION", 0,
                    {{"split", 0, "the coopmat GEMM's inputs as f16 hi and lo halves, the default"},
                     {"f16", 1, "their nearest f16 alone, as llama.cpp"}}) != 0;
}

uint32_t gemm_block_from_env() {
  return env_choice("EAGLEVK_GEMM_BLOCK", 0,
                    {{"64", 64, "the coopmat GEMM's 64 x 64 block"},
                     {"128", 128, "its 128 x 128 block of eight subgroups"}});
}

uint32_t gemm_block_for(uint32_t vendor_id, bool block128_runs) {
  // NVIDIA: the 128 block prefilled an 8B Q4_K_M at 1.056x the 64 one's pp512 (H200, 2026-11-29,
  // docs/perf.md). Other vendors keep 64 until a measurement says otherwise.
  return vendor_id == 0x10de && block128_runs ? 128 : 64;
}

uint32_t coopmat128_shared_bytes(uint32_t mm, uint32_t mn, uint32_t tile_k, bool lo_terms) {
  const uint32_t s = GEMM_COOPMAT128_SUBGROUPS;
  const uint32_t lo_rows = lo_terms ? s * mm + s * mn : 2;
  const uint32_t stride = tile_k + (GEMM_COOPMAT_STRIDE - GEMM_COOPMAT_TILE_K);
  return (s * mm + s * mn + lo_rows) * stride * 2 + s * mm * mn * 4;
}

std::string coopmat_unavailable(const vk::Context& ctx, uint32_t block) {
  const auto& f = ctx.info.features;
  if (!vk::PipelineCache::has_shader("gemm_f16_coopmat"))
    return "this build has no cooperative-matrix kernels (its glslc did not know GL_KHR_cooperative_matrix)";
  if (!f.coopmat_m)
    return fmt::format("device '{}' lacks VK_KHR_cooperative_matrix with f16 matrices of 8 or 16 and f32 sums at "
                       "subgroup scope (or f16 arithmetic, or the Vulkan memory model)",
                       ctx.info.name);
  // Four subgroups of one known size a workgroup, each taking a quadrant of the block.
  if (f.min_subgroup_size != f.max_subgroup_size)
    return fmt::format("device '{}' picks subgroup sizes per shader and cannot require one", ctx.info.name);
  if (4 * f.subgroup_size > f.max_workgroup_invocations || f.max_compute_shared_memory < GEMM_COOPMAT_SHARED_BYTES)
    return fmt::format("device '{}' cannot run workgroups of {} invocations with {} bytes of shared memory",
                       ctx.info.name, 4 * f.subgroup_size, GEMM_COOPMAT_SHARED_BYTES);
  if (block == 128) {
    const uint32_t invocations = GEMM_COOPMAT128_SUBGROUPS * f.subgroup_size;
    const uint32_t bytes = coopmat128_shared_bytes(f.coopmat_m, f.coopmat_n);
    if (invocations > f.max_workgroup_invocations || bytes > f.max_compute_shared_memory)
      return fmt::format("device '{}' cannot run the 128 block's workgroups of {} invocations with {} bytes of shared "
                         "memory (it allows {} and {}); EAGLEVK_GEMM_BLOCK=64 runs the 64 block",
                         ctx.info.name, invocations, bytes, f.max_workgroup_invocations, f.max_compute_shared_memory);
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
      fail("EAGLEVK_GEMM_TILE_K={}: the 128 block would need {} bytes of shared memory with {} inputs, and device '{}' "
           "allows {}{}",
           tile_k, bytes, gpu.gemm_f16_inputs ? "f16" : "split", gpu.ctx.info.name, f.max_compute_shared_memory,
           gpu.gemm_f16_inputs ? "" : " (EAGLEVK_GEMM_PRECISION=f16 stages half as much)");
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
