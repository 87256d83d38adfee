#include <algorithm>
#include <span>

#include <fmt/format.h>

#include <eaglevk/error.h>

#include "runtime/ops/lattice_grids.h"
#include "runtime/ops/ops.h"
#include "shaders/shared_constants.h"

namespace eaglevk::ops {
namespace {

struct GemmPush {
  uint32_t K, N, rows, x_offset, x_stride, y_offset, y_stride, accumulate;
};
struct MatvecPush {
  GemmPush common;
  uint32_t glu_up = 0;  // matvec.comp's GLU variant only
  float eps = 0;        // its NORM_WG variants only
};

// matvec.comp's ROPE_KV push constants, after MatvecPush.
struct RopeKvPush {
  uint32_t head_dim, q_dim, kv_dim, first, pos_offset, table_rows, slot_offset, capacity;
};
struct MatvecRopePush {
  MatvecPush matvec;
  RopeKvPush rope;
};

std::string shader_name(const char* family, WeightType t) { return fmt::format("{}_{}", family, weight_type_name(t)); }

}  // namespace

MatvecShape matvec_shape_for(uint32_t subgroup_size, uint32_t min_subgroup_size, uint32_t max_subgroup_size,
                             bool cpu_device, uint32_t vendor_id) {
  // One subgroup per workgroup: the reduction needs no shared memory or barrier. Devices
  // with small subgroups (lavapipe: 8) get eight float outputs per workgroup to amortise loads
  // and each workgroup's start (lavapipe: a 4096 x 4096 f16 product 12 ms against 16 with four,
  // docs/perf.md); block formats keep four there (eight gained at most 5% and take llvmpipe
  // twice as long to compile). A workgroup is known to be one subgroup only where the driver
  // cannot pick another subgroup size for the shader (min == max); elsewhere the shared-memory
  // reduction runs.
  uint32_t sg = std::max(subgroup_size, 1u);
  bool fixed = min_subgroup_size == max_subgroup_size;
  MatvecShape shape{fixed ? sg : std::max(sg, 64u), sg <= 8 ? 8u : 2u, fixed ? 1u : 0u, cpu_device ? 1u : 0u};
  // CPU devices' attention: one subgroup of 8 (no barriers, which llvmpipe pays for by
  // switching coroutines); a GPU with subgroups of 8 would get too few invocations per row.
  if (cpu_device && fixed && sg == 8) shape.attention_workgroup = 8;
  if (cpu_device) shape.expert_rows = 1;
  // GPUs other than AMD's (llama.cpp keeps AMD at one subgroup a workgroup) split the columns
  // of matrices with at most 8192 rows and at least 1024 columns over four subgroups, as
  // llama.cpp's matrix-vector kernels do on NVIDIA and Intel (docs/gpu-check.md).
  if (!cpu_device && vendor_id != vk::vendor::kAmd) shape.split_workgroup = 4 * shape.workgroup;
  return shape;
}

MatvecShape matvec_shape(const Gpu& gpu) {
  return gpu.matvec_shape_override ? *gpu.matvec_shape_override : gpu.profile.matvec;
}

MatvecShape matvec_shape(const Gpu& gpu, const WeightMatrix& w) {
  MatvecShape shape = matvec_shape(gpu);
  if (shape.split_workgroup && w.rows <= shape.split_max_rows && w.cols >= shape.split_min_cols) {
    shape.workgroup = shape.split_workgroup;
    shape.one_subgroup = 0;
  }
  return shape;
}

bool matvec_texel_loads(Act x, const WeightMatrix& w, vk::BufferRange wchunk) {
  // Float rows are read 8 elements (one 16-byte quad) at a time only when K is a multiple of 8.
  if (!weight_type_quantized(w.type) && w.cols % 8) return false;
  return x.texel_aligned() && vk::texel_view_possible(wchunk, weight_texel_format(w.type));
}

namespace {

bool vector_path(uint32_t rows, MatmulPath path) {
  return path == MatmulPath::Vector || (path == MatmulPath::Auto && rows <= MATVEC_MAX_ROWS);
}

// The folded norm's weight binding (a dummy without one) and the kernel's NORM_WG.
vk::BufferRange norm_binding(const Gpu& gpu, const NormFold* norm) { return norm ? norm->weight : vk::BufferRange(gpu.dummy); }
uint32_t norm_wg(const Gpu& gpu, const NormFold* norm) { return norm ? gpu.norm_workgroup : 0u; }

// A matrix-vector dispatch's bindings: x, W, y, and for float weights the norm weight (the
// block-format variants never read it, so their SPIR-V has no such binding).
void dispatch_matvec(OpContext& oc, const vk::Kernel& kernel, WeightType type, vk::Arg x, vk::Arg w, vk::Arg y,
                     const NormFold* norm, const MatvecPush& push, Grid g, const char* name) {
  const vk::Arg args[] = {x, w, y, norm ? vk::reads(norm->weight) : vk::unused(oc.gpu.dummy)};
  const std::vector<vk::Arg> bound =
      with_lattice_grid(oc.gpu, type, std::span<const vk::Arg>(args, weight_type_quantized(type) ? 3 : 4));
  oc.rec.dispatch(kernel, std::span<const vk::Arg>(bound), &push, uint32_t(sizeof(push)), g.x, g.y, 1, name);
}

void check_norm_fold(const Gpu& gpu, const WeightMatrix& w, uint32_t rows, MatmulPath path, const NormFold* norm,
                     const char* name) {
  if (!norm) return;
  if (!norm_folds(gpu, w, rows, path)) fail("{}: the norm in front of it cannot be folded here (ops::norm_folds)", name);
  if (norm->weight.bytes < uint64_t(w.cols) * 4)
    fail("{}: a norm weight of {} bytes for rows of {}", name, norm->weight.bytes, w.cols);
}

}  // namespace

bool norm_folds(const Gpu& gpu, const WeightMatrix& w, uint32_t rows, MatmulPath path) {
  const auto& f = gpu.ctx.info.features;
  const MatvecShape shape = matvec_shape(gpu, w);
  const uint32_t sg = f.subgroup_size;
  // The product's workgroup plays the norm's: its subgroups must be the norm's subgroups
  // (one fixed size, contiguous lanes), and the norm's invocations a whole number of its own.
  return gpu.fold_norms && vector_path(rows, path) && !weight_type_quantized(w.type) && w.cols % 8 == 0 && sg > 0 &&
         f.min_subgroup_size == f.max_subgroup_size && shape.workgroup % sg == 0 &&
         gpu.norm_workgroup % shape.workgroup == 0 && gpu.norm_workgroup / sg <= 64;
}

void matmul(OpContext& oc, Act x, const WeightMatrix& w, Act y, uint32_t rows, bool accumulate, MatmulPath path,
            const char* name, const NormFold* norm) {
  if (rows == 0) return;
  check_whole_blocks(w.type, w.cols, name);
  check_norm_fold(oc.gpu, w, rows, path, norm, name);
  const vk::Context& ctx = oc.gpu.ctx;
  bool vector = vector_path(rows, path);
  const MatvecShape shape = matvec_shape(oc.gpu, w);
  uint32_t chunk = w.chunk_rows(ctx.max_binding_range, ctx.info.features.min_storage_buffer_offset_alignment);
  for (uint32_t n0 = 0; n0 < w.rows; n0 += chunk) {
    uint32_t n = std::min(chunk, w.rows - n0);
    vk::BufferRange wchunk = w.rows_range(n0, n);
    // The texel variants of both kernels (CPU devices) need the same alignment and give the bits
    // of their storage-buffer variants; the GEMM's works on 32 x 32 blocks instead of 64 x 64.
    const bool texel = shape.texel_loads && matvec_texel_loads(x, w, wchunk) &&
                       vk::texel_view_possible(norm_binding(oc.gpu, norm), VK_FORMAT_R32G32B32A32_SFLOAT);
    const std::string variant = texel ? "_texel" : "";
    const uint32_t gemm_tile = texel ? 32 : 64;
    uint32_t step = vector ? MATVEC_MAX_ROWS : rows;
    for (uint32_t r0 = 0; r0 < rows; r0 += step) {
      uint32_t r = std::min(step, rows - r0);
      const uint32_t outs = shape.outs_for(weight_type_quantized(w.type), r);
      Act xr = x.row(r0), yr = y.row(r0).cols(n0);
      GemmPush push{w.cols, n, r, xr.offset, xr.stride, yr.offset, yr.stride, accumulate ? 1u : 0u};
      vk::Arg out = accumulate ? yr.updates(r, n) : yr.writes(r, n);
      if (vector) {
        const vk::Kernel& kernel = oc.gpu.pipelines.get(
            shader_name("matvec", w.type) + variant, {/*WG=*/shape.workgroup, /*OUTS=*/outs,
                                                      /*ONE_SUBGROUP=*/shape.one_subgroup, /*GLU=*/0,
                                                      /*NORM_WG=*/norm_wg(oc.gpu, norm), /*ROWS=*/r});
        uint32_t groups = (n + outs - 1) / outs;
        const Grid g = linear_grid(ctx, groups, 1, name);  // a 202,048-token lm_head needs y
        dispatch_matvec(oc, kernel, w.type, xr.reads(r, w.cols), vk::reads(wchunk), out, norm,
                        MatvecPush{push, 0, norm ? norm->eps : 0.0f}, g, name);
      } else if (oc.gpu.coopmat_gemm) {
        const CoopmatKernel cm = coopmat_kernel(ctx, oc.gpu.gemm_block);
        const vk::Kernel& kernel = oc.gpu.pipelines.get(shader_name("gemm", w.type) + cm.suffix,
                                                        coopmat_gemm_spec(oc.gpu, cm, oc.gpu.gemm_block));
        const std::vector<vk::Arg> args =
            with_lattice_grid(oc.gpu, w.type, {xr.reads(r, w.cols), vk::reads(wchunk), out});
        oc.rec.dispatch(kernel, std::span<const vk::Arg>(args), &push, uint32_t(sizeof(push)),
                        (n + cm.block_outs - 1) / cm.block_outs, (r + cm.block_rows - 1) / cm.block_rows, 1, name);
      } else {
        const vk::Kernel& kernel = oc.gpu.pipelines.get(shader_name("gemm", w.type) + variant);
        const std::vector<vk::Arg> args =
            with_lattice_grid(oc.gpu, w.type, {xr.reads(r, w.cols), vk::reads(wchunk), out});
        oc.rec.dispatch(kernel, std::span<const vk::Arg>(args), &push, uint32_t(sizeof(push)),
                        (n + gemm_tile - 1) / gemm_tile, (r + gemm_tile - 1) / gemm_tile, 1, name);
      }
    }
  }
}

bool swiglu_fuses(const Gpu& gpu, const WeightMatrix& gate_up, uint32_t rows, MatmulPath path) {
  const vk::Context& ctx = gpu.ctx;
  const bool vector = vector_path(rows, path);
  // The one-row outputs decide, so that a verify pass fuses where its decode step does (the
  // several-row dispatches round theirs up to whole pairs: glu_outs).
  const uint32_t outs = matvec_shape(gpu).outs_for(weight_type_quantized(gate_up.type), 1);
  // Gate and up rows in one binding, and a workgroup that holds whole pairs.
  return vector && outs % 2 == 0 && gate_up.rows % 2 == 0 &&
         gate_up.chunk_rows(ctx.max_binding_range, ctx.info.features.min_storage_buffer_offset_alignment) >= gate_up.rows;
}

void matmul_swiglu(OpContext& oc, Act x, const WeightMatrix& gate_up, Act gu, Act out, uint32_t rows, MatmulPath path,
                   const char* name, const NormFold* norm) {
  if (rows == 0) return;
  const uint32_t width = gate_up.rows / 2;
  if (!swiglu_fuses(oc.gpu, gate_up, rows, path)) {
    matmul(oc, x, gate_up, gu, rows, false, path, name, norm);
    swiglu(oc, gu, gu.cols(width), out, rows, width);
    return;
  }
  check_whole_blocks(gate_up.type, gate_up.cols, name);
  check_norm_fold(oc.gpu, gate_up, rows, path, norm, name);
  const MatvecShape shape = matvec_shape(oc.gpu, gate_up);
  vk::BufferRange wrange = gate_up.rows_range(0, gate_up.rows);
  const bool texel = shape.texel_loads && matvec_texel_loads(x, gate_up, wrange) &&
                     vk::texel_view_possible(norm_binding(oc.gpu, norm), VK_FORMAT_R32G32B32A32_SFLOAT);
  for (uint32_t r0 = 0; r0 < rows; r0 += MATVEC_MAX_ROWS) {
    const uint32_t r = std::min<uint32_t>(MATVEC_MAX_ROWS, rows - r0);
    // Whole gate/up pairs a workgroup: rows_outs rounded up to even (the one-row outputs are,
    // swiglu_fuses checks; MATVEC_MAX_OUTS is even).
    const uint32_t outs = (shape.outs_for(weight_type_quantized(gate_up.type), r) + 1) / 2 * 2;
    const vk::Kernel& kernel = oc.gpu.pipelines.get(shader_name("matvec", gate_up.type) + (texel ? "_texel" : ""),
                                                    {/*WG=*/shape.workgroup, /*OUTS=*/outs,
                                                     /*ONE_SUBGROUP=*/shape.one_subgroup, /*GLU=*/1,
                                                     /*NORM_WG=*/norm_wg(oc.gpu, norm), /*ROWS=*/r});
    Act xr = x.row(r0), yr = out.row(r0);
    MatvecPush push{{gate_up.cols, width, r, xr.offset, xr.stride, yr.offset, yr.stride, 0}, width,
                    norm ? norm->eps : 0.0f};
    const Grid g = linear_grid(oc.gpu.ctx, (width + outs / 2 - 1) / (outs / 2), 1, name);
    dispatch_matvec(oc, kernel, gate_up.type, xr.reads(r, gate_up.cols), vk::reads(wrange), yr.writes(r, width), norm,
                    push, g, name);
  }
}

bool rope_folds(const Gpu& gpu, const WeightMatrix& w, uint32_t first, uint32_t rows, MatmulPath path,
                const RopeKv& rope) {
  const vk::Context& ctx = gpu.ctx;
  const uint32_t hd = rope.head_dim, row_width = rope.q_heads * hd + 2 * rope.kv.kv_dim;
  // Whole heads of whole quads (each holds two rotation pairs and two cache words).
  return gpu.fold_rope && vector_path(rows, path) && hd > 0 && hd % 4 == 0 && rope.kv.kv_dim % hd == 0 &&
         first % hd == 0 && w.rows % hd == 0 && uint64_t(first) + w.rows <= row_width &&
         w.chunk_rows(ctx.max_binding_range, ctx.info.features.min_storage_buffer_offset_alignment) >= w.rows;
}

void matmul_rope_kv(OpContext& oc, Act x, const WeightMatrix& w, uint32_t first, Act qkv, uint32_t rows,
                    MatmulPath path, const char* name, const RopeKv& rope, const NormFold* norm) {
  if (rows == 0) return;
  if (!rope_folds(oc.gpu, w, first, rows, path, rope))
    fail("{}: rope and the cache write cannot be folded into it here (ops::rope_folds)", name);
  check_whole_blocks(w.type, w.cols, name);
  check_norm_fold(oc.gpu, w, rows, path, norm, name);
  const MatvecShape shape = matvec_shape(oc.gpu, w);
  const bool quantized = weight_type_quantized(w.type);
  const vk::BufferRange wrange = w.rows_range(0, w.rows);
  const bool texel = shape.texel_loads && matvec_texel_loads(x, w, wrange) &&
                     vk::texel_view_possible(norm_binding(oc.gpu, norm), VK_FORMAT_R32G32B32A32_SFLOAT);
  const uint32_t q_dim = rope.q_heads * rope.head_dim, kv_dim = rope.kv.kv_dim, last = first + w.rows;
  // The caches this part writes; the other is bound but untouched (no hazard with the other
  // parts' dispatches, which may then run together).
  const bool writes_k = first < q_dim + kv_dim && last > q_dim, writes_v = last > q_dim + kv_dim;
  const bool rotates = rope.pairing != RopePairing::None;  // else the positions and the table go unread
  for (uint32_t r0 = 0; r0 < rows; r0 += MATVEC_MAX_ROWS) {
    const uint32_t r = std::min<uint32_t>(MATVEC_MAX_ROWS, rows - r0);
    // Whole quads a workgroup: the device's outputs (for r rows) rounded up to a multiple of
    // four (the bits do not depend on it).
    const uint32_t outs = std::min<uint32_t>(MATVEC_MAX_OUTS, (shape.outs_for(quantized, r) + 3) / 4 * 4);
    const uint64_t cache_row_bytes = uint64_t(r) * kv_dim * 2;  // f16
    const vk::Arg k_arg = writes_k ? vk::writes_scattered(rope.kv.k, cache_row_bytes) : vk::unused(rope.kv.k);
    const vk::Arg v_arg = writes_v ? vk::writes_scattered(rope.kv.v, cache_row_bytes) : vk::unused(rope.kv.v);
    const vk::Kernel& kernel = oc.gpu.pipelines.get(
        shader_name("matvec_rope", w.type) + (texel ? "_texel" : ""),
        {/*WG=*/shape.workgroup, /*OUTS=*/outs, /*ONE_SUBGROUP=*/shape.one_subgroup, /*GLU=*/0,
         /*NORM_WG=*/norm_wg(oc.gpu, norm), /*ROWS=*/r, /*K_MAJOR=*/0, /*PAIRING=*/uint32_t(rope.pairing)});
    Act xr = x.row(r0), yr = qkv.row(r0).cols(first);
    const GemmPush product{w.cols, w.rows, r, xr.offset, xr.stride, yr.offset, yr.stride, 0};
    MatvecRopePush push{{product, 0, norm ? norm->eps : 0.0f},
                        {rope.head_dim, q_dim, kv_dim, first, rope.positions.offset + r0, rope.table_positions,
                         rope.slots.offset + r0, rope.kv.capacity}};
    // x, W, y, the norm weight (float weights only: the block formats' kernels have no such
    // binding), then the rotation's and the caches'.
    std::vector<vk::Arg> args{xr.reads(r, w.cols), vk::reads(wrange), yr.writes(r, w.rows)};
    if (!quantized) args.push_back(norm ? vk::reads(norm->weight) : vk::unused(oc.gpu.dummy));
    for (const vk::Arg& arg : {rotates ? vk::reads(rope.positions.range) : vk::unused(oc.gpu.dummy),
                               rotates ? vk::reads(rope.table) : vk::unused(oc.gpu.dummy), vk::reads(rope.slots.range),
                               k_arg, v_arg})
      args.push_back(arg);
    args = with_lattice_grid(oc.gpu, w.type, args);
    const Grid g = linear_grid(oc.gpu.ctx, (w.rows + outs - 1) / outs, 1, name);
    oc.rec.dispatch(kernel, std::span<const vk::Arg>(args), &push, uint32_t(sizeof(push)), g.x, g.y, 1, name);
  }
}

}  // namespace eaglevk::ops
