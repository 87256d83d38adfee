#pragma once
#include <optional>
#include <string>
#include <vector>

// What every op needs: the device, the pipeline cache, and a small dummy buffer that fills
// optional bindings (no mask, no d2t). Ops record into a Recorder the caller owns.
#include "runtime/vk/buffer.h"
#include "runtime/vk/context.h"
#include "runtime/vk/pipeline.h"
#include "runtime/vk/recorder.h"

namespace eaglevk::ops {

// The matrix-vector kernel's shape: workgroup size, outputs per workgroup, whether the
// workgroup is one subgroup (no shared-memory reduction), whether activations and weights are
// read through texel buffers where they are aligned for it (CPU devices: shaders/common.glsl
// says why). Chosen per device (matvec_shape); neither the texel choice nor the outputs per
// workgroup change a bit.
struct MatvecShape {
  uint32_t workgroup, outs, one_subgroup;
  uint32_t texel_loads = 0;
  // Outputs per workgroup for block-quantized weights: they do more arithmetic per byte, and
  // on an H100 four outputs beat two for every block format while two stay best for f16 at one
  // row (docs/perf.md, 2026-11-27). EAGLEVK_MATVEC_SHAPE sets both to its OUTPUTS.
  uint32_t block_outs = 4;
  // Outputs per workgroup of a dispatch of several activation rows (a verify pass's), where the
  // accumulators and x registers grow with the rows; 0 keeps the one-row choice. The k order of
  // a dot product depends on the workgroup and the split only, so this never changes a bit.
  // EAGLEVK_MATVEC_ROWS_OUTS sets it, for tuning (docs/gpu-check.md).
  uint32_t rows_outs = 0;
  uint32_t outs_for(bool quantized, uint32_t rows) const {
    if (rows > 1 && rows_outs) return rows_outs;
    return quantized ? block_outs : outs;
  }
  // The attention kernel's workgroup: 64 invocations exchanging through shared memory, or, on
  // CPU devices with a fixed subgroup of 8, one subgroup that exchanges by shuffles, with no
  // barrier (shaders/attention.comp). It sets the block of keys the online
  // softmax takes at a time, so it changes the bits, as a device's choice does.
  uint32_t attention_workgroup = 64;
  // Rows of one expert a mixture-of-experts workgroup takes (matvec.comp's EXPERTS; at most
  // MATVEC_MAX_ROWS): on GPUs up to 8, so that verify passes read each expert's weights once
  // per 8 of its rows. 1 on CPU devices: llvmpipe pays for a workgroup's unused row slots as for
  // used ones (a decode step's experts took twice as long with 8, docs/perf.md). Never changes a
  // bit. EAGLEVK_EXPERT_ROWS sets it, for tuning.
  uint32_t expert_rows = 8;
  // Matrices with few rows split each dot product over several subgroups (the workgroup's
  // fixed-order shared-memory sum), so that a 4096-row matrix still gives a GPU thousands of
  // subgroups with loads in flight; matrices with many rows keep one subgroup per output group.
  // split_workgroup 0: never (CPU devices, AMD as llama.cpp chooses). Chosen from the matrix
  // (rows, columns), never from a pass's row count: a verify row keeps the decode step's bits.
  uint32_t split_workgroup = 0;
  uint32_t split_max_rows = 8192;   // at most this many output features
  uint32_t split_min_cols = 1024;   // and at least this many inputs
};

// EAGLEVK_MATVEC_SHAPE=WORKGROUP,OUTPUTS (e.g. 64,2) replaces the device's matrix-vector
// shape, for tuning on a new device (one workgroup for every matrix), EAGLEVK_EXPERT_ROWS=N its
// expert_rows, EAGLEVK_MATVEC_ROWS_OUTS=N its rows_outs, and EAGLEVK_GPU_SHAPES=1 runs a GPU's
// shapes on a CPU device (the test suite's GPU configuration); nullopt when none is set. A
// value the device cannot run is an error that names the limits.
std::optional<MatvecShape> matvec_shape_from_env(const vk::Context& ctx);
// Whether EAGLEVK_GPU_SHAPES=1 asks for a GPU's shapes (an error for a value other than 0 or 1).
bool gpu_shapes_from_env();

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
  // Tests set it to run the configurations other vendors' devices get on this one; the
  // environment can set it for tuning (EAGLEVK_MATVEC_SHAPE, matvec_shape_from_env).
  std::optional<MatvecShape> matvec_shape_override;
  // Invocations of a row normalisation's workgroup (norm_workgroup_for); tests set others.
  uint32_t norm_workgroup = 64;
  // Most query heads one attention workgroup serves (those of one KV head: attention.comp's
  // GROUP, at most 8); tests set 1, one head per workgroup, as the reference for the bits.
  uint32_t attention_max_group = 8;
  // Most rows one attention workgroup serves (a verify pass's or a prefill's, sharing each
  // block's keys and values; attention.comp's ROWS, at most ATTENTION_MAX_ROWS); tests set 1 as
  // the reference for the bits, EAGLEVK_ATTENTION_ROWS for tuning.
  uint32_t attention_max_rows = 8;
  // Fold RMSNorms into the products that consume them where ops::norm_folds allows
  // (EAGLEVK_FOLD_NORMS=1; tests set it). Off by default: on lavapipe it saves 17 of a tiny
  // model's 71 dispatches per token but not time (every product workgroup reads its x rows a
  // second time for the norm's sums; docs/perf.md), and on a GPU it is not measured yet.
  bool fold_norms = false;
  // Fold rope_kv_write into the q | k | v product where ops::rope_folds allows (a dispatch fewer
  // a layer), and run Llama-4's rope, QK norm and kv_write as one ops::rope_norm_kv_write;
  // EAGLEVK_FOLD_ROPE=0 turns both off, for comparisons (tests set it).
  bool fold_rope = true;
  // Prefill products with more than MATVEC_MAX_ROWS rows run the GEMM's cooperative-matrix
  // kernel (shaders/gemm_coopmat.comp) where coopmat_unavailable() is empty. EAGLEVK_COOPMAT=1
  // asks for it (an error naming what is missing where it cannot run), 0 turns it off; unset,
  // it is on for NVIDIA and AMD GPUs, off for Intel's (untested; gpu.cpp says why) and for CPU
  // devices, which emulate the matrices one lane at a time.
  bool coopmat_gemm = false;
  // Outputs a side of the coopmat kernel's block on NVIDIA: 64 (four subgroups) or 128 (eight
  // subgroups with wide staging loads, gemm_coopmat.comp's BLOCK128; expert products keep 64).
  // The device's choice is gemm_block_for's; EAGLEVK_GEMM_BLOCK sets it (gemm_block_from_env),
  // for A/B timing; tests set both.
  uint32_t gemm_block = 64;
  // The coopmat GEMM's inputs as f16 hi and lo halves (about 21 bits a product, the default) or
  // as their nearest f16 alone (llama.cpp's precision, a third of the products): EAGLEVK_GEMM_PRECISION
  // (gemm_f16_inputs_from_env); tests set it. Expert products keep the halves.
  bool gemm_f16_inputs = false;
  // The 128 block's k loop software-pipelined (gemm_coopmat128.glsl's PREFETCH): each invocation
  // loads the next k tile into registers before the current tile's matrix products and stages it
  // after them, so that the global loads overlap the math. The same products in the same order,
  // so the same bits. EAGLEVK_GEMM_PREFETCH (gemm_prefetch_from_env); off until a GPU measures
  // it; tests set it. The 64 block and expert products keep the plain loop.
  bool gemm_prefetch = false;
  // k staged 32 (one quantized group) or 64 at a time by the 128 block (gemm_coopmat.comp's
  // TILE_K): 64 halves the barriers per k. The products run in the same k order, so the bits are
  // the same (a K padded further adds products of zeros). With f16 hi and lo halves 64 needs
  // 81,920 bytes of shared memory on 16 x 16 matrices, past NVIDIA's 48 KiB: there it needs
  // gemm_f16_inputs (45,344 bytes). EAGLEVK_GEMM_TILE_K (gemm_tile_k_from_env); unmeasured, 32
  // until a GPU times it; tests set it. The 64 block and expert products keep 32.
  uint32_t gemm_tile_k = 32;

  explicit Gpu(const vk::ContextOptions& options = vk::ContextOptions::from_env());
};

// EAGLEVK_GEMM_BLOCK: 64 or 128; 0 when unset or empty (the device's choice); an error naming
// both otherwise.
uint32_t gemm_block_from_env();
// The device's coopmat block: 128 on NVIDIA where the device can run it, 64 elsewhere.
uint32_t gemm_block_for(uint32_t vendor_id, bool block128_runs);
// EAGLEVK_GEMM_PRECISION: "split" (also when unset or empty: f16 hi and lo halves) gives false,
// "f16" (the inputs' nearest f16 alone) true; an error naming both otherwise.
bool gemm_f16_inputs_from_env();
// EAGLEVK_GEMM_PREFETCH: "1" gives true, "0" (also when unset or empty) false; an error naming
// both otherwise.
bool gemm_prefetch_from_env();
// EAGLEVK_GEMM_TILE_K: 32 (also when unset or empty) or 64; an error naming both otherwise.
uint32_t gemm_tile_k_from_env();

// Why this build and device cannot run the GEMM's coopmat kernel in the given block
// configuration (64 or 128); empty where they can.
std::string coopmat_unavailable(const vk::Context& ctx, uint32_t block = 64);
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
