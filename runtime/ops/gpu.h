#pragma once
#include <optional>
#include <string>
#include <vector>

// What every op needs: the device, the pipeline cache, and a small dummy buffer that fills
// optional bindings (no mask, no d2t). Ops record into a Recorder the caller owns.
#include "runtime/ops/device_profile.h"
#include "runtime/vk/buffer.h"
#include "runtime/vk/context.h"
#include "runtime/vk/pipeline.h"
#include "runtime/vk/recorder.h"

namespace eaglevk::ops {

// The workgroup size of norm.comp on a device: 8 on CPU devices (one llvmpipe subgroup, whose
// lanes run as one vector, with no barrier to switch at); 512 on GPUs, where one workgroup of 64 walks a
// 4096-wide row in 64 steps of dependent loads (36 us per call on an H100, docs/perf.md).
// Never more than the device's invocation limit or 64 subgroups (norm.comp's shared array).
uint32_t norm_workgroup_for(bool cpu_device, uint32_t max_invocations, uint32_t min_subgroup_size);

struct Gpu {
  vk::Context ctx;
  vk::PipelineCache pipelines;
  vk::Buffer dummy;
  // The lattice formats' grids (lattice_grids.h), bound by the kernels that read such weights.
  vk::Buffer lattice_grids;
  // The device's kernel choices (device_profile.h), worked out when the Gpu is made, with
  // EAGLEVK_PROFILE_OVERRIDE's and EAGLEVK_PROFILE_FILE's keys applied. The fields below start
  // as its values; tests change them per case.
  DeviceProfile profile;
  // Tests set it to run the configurations other vendors' devices get on this one; the profile's
  // matvec.* keys and shapes=gpu set it (profile.matvec) for tuning and the tests' GPU shapes.
  std::optional<MatvecShape> matvec_shape_override;
  // Invocations of a row normalisation's workgroup (norm.workgroup, norm_workgroup_for); tests set others.
  uint32_t norm_workgroup = 64;
  // Most query heads one attention workgroup serves (those of one KV head: attention.comp's
  // GROUP, at most 8; attention.group); tests set 1, one head per workgroup, as the reference for the bits.
  uint32_t attention_max_group = 8;
  // Most rows one attention workgroup serves (a verify pass's or a prefill's, sharing each
  // block's keys and values; attention.comp's ROWS, at most ATTENTION_MAX_ROWS); tests set 1 as
  // the reference for the bits, attention.rows for tuning.
  uint32_t attention_max_rows = 8;
  // Fold RMSNorms into the products that consume them where ops::norm_folds allows
  // (fold.norms=on; tests set it). Off by default: on lavapipe it saves 17 of a tiny
  // model's 71 dispatches per token but not time (every product workgroup reads its x rows a
  // second time for the norm's sums; docs/perf.md), and on a GPU it is not measured yet.
  bool fold_norms = false;
  // Fold rope_kv_write into the q | k | v product where ops::rope_folds allows (a dispatch fewer
  // a layer), and run Llama-4's rope, QK norm and kv_write as one ops::rope_norm_kv_write;
  // fold.rope=off turns both off, for comparisons (tests set it).
  bool fold_rope = true;
  // Prefill products with more than MATVEC_MAX_ROWS rows run the GEMM's cooperative-matrix
  // kernel (shaders/gemm_coopmat.comp) where coopmat_unavailable() is empty. gemm.coopmat=on
  // asks for it (an error naming what is missing where it cannot run), off turns it off; unset,
  // it is on for NVIDIA and AMD GPUs, off for Intel's (untested; gpu.cpp says why) and for CPU
  // devices, which emulate the matrices one lane at a time.
  bool coopmat_gemm = false;
  // Outputs a side of the coopmat kernel's block on NVIDIA: 64 (four subgroups) or 128 (eight
  // subgroups with wide staging loads, gemm_coopmat.comp's BLOCK128; expert products keep 64).
  // The device's choice is gemm_block_for's; gemm.block sets it, for A/B timing; tests set both.
  uint32_t gemm_block = 64;
  // The coopmat GEMM's inputs as f16 hi and lo halves (about 21 bits a product, the default) or
  // as their nearest f16 alone (llama.cpp's precision, a third of the products): gemm.precision;
  // tests set it. Expert products keep the halves.
  bool gemm_f16_inputs = false;
  // The 128 block's k loop software-pipelined (gemm_coopmat128.glsl's PREFETCH): each invocation
  // loads the next k tile into registers before the current tile's matrix products and stages it
  // after them, so that the global loads overlap the math. The same products in the same order,
  // so the same bits. gemm.prefetch; off until a GPU measures
  // it; tests set it. The 64 block and expert products keep the plain loop.
  bool gemm_prefetch = false;
  // k staged 32 (one quantized group) or 64 at a time by the 128 block (gemm_coopmat.comp's
  // TILE_K): 64 halves the barriers per k. The products run in the same k order, so the bits are
  // the same (a K padded further adds products of zeros). With f16 hi and lo halves 64 needs
  // 81,920 bytes of shared memory on 16 x 16 matrices, past NVIDIA's 48 KiB: there it needs
  // gemm_f16_inputs (45,344 bytes). gemm.tile_k; unmeasured, 32
  // until a GPU times it; tests set it. The 64 block and expert products keep 32.
  uint32_t gemm_tile_k = 32;

  explicit Gpu(const vk::ContextOptions& options = vk::ContextOptions::from_env());
};

// The device's coopmat block: 128 on NVIDIA (vk::vendor::kNvidia) where the device can run it, 64 elsewhere.
uint32_t gemm_block_for(uint32_t vendor_id, bool block128_runs);

// Why this build and device cannot run the GEMM's coopmat kernel in the given block
// configuration (64 or 128); empty where they can.
std::string coopmat_unavailable(const vk::Context& ctx, uint32_t block = 64);
std::string coopmat_unavailable(const vk::DeviceInfo& info, uint32_t block = 64);
// Shared memory of the 128 block on this device's matrices: hi and lo halves of 8 MM rows of x
// and 8 MN rows of W at tile_k + 8 f16s (without lo_terms one row of each lo array), and one
// MM x MN f32 matrix per subgroup (49,152 bytes with 16 x 16 matrices and the defaults:
// NVIDIA's limit exactly).
uint32_t coopmat128_shared_bytes(uint32_t mm, uint32_t mn, uint32_t tile_k = 32,
                                 bool lo_terms = true);

// The coopmat kernel on this device (gemm_coopmat.comp): its specialization constants (four or
// eight subgroups, the matrix shape; coopmat_gemm_spec adds the switches), the block of rows x
// outputs a workgroup computes, and the suffix of its shader's name after gemm_<type>. A block
// of 128 the device cannot run is an error naming its limits.
struct CoopmatKernel {
  std::vector<uint32_t> spec;
  uint32_t block_rows = 0, block_outs = 0;
  std::string suffix = "_coopmat";
};
CoopmatKernel coopmat_kernel(const vk::Context& ctx, uint32_t block = 64);
// The plain (not expert) product's specialization constants: the kernel's, then LO_TERMS (4)
// where the f16-inputs switch or a later constant needs it, then for the 128 block PREFETCH (5)
// and TILE_K (6) where they are not the defaults. A k tile of 64 that the device's shared memory
// cannot hold with these inputs is an error naming both sizes.
std::vector<uint32_t> coopmat_gemm_spec(const Gpu& gpu, const CoopmatKernel& kernel, uint32_t block);

struct OpContext {
  Gpu& gpu;
  vk::Recorder& rec;
};

// Workgroups for `threads` invocations of a one-dimensional kernel with `local` per group: as
// many along x as the device allows (65,535 on Mesa), the rest folded into y, so that a
// 512-row prefill at width 14,336 still fits. Kernels recover the flat index with
// linear_invocation() (shaders/grid.glsl). An error names `name` when even x*y cannot hold it.
struct Grid {
  uint32_t x = 1, y = 1;
};
Grid linear_grid(const vk::Context& ctx, uint64_t threads, uint32_t local, const char* name);

}  // namespace eaglevk::ops
