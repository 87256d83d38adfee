#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include <eaglevk/error.h>

#include "runtime/ops/lattice_grids.h"
#include "runtime/ops/ops.h"
#include "shaders/shared_constants.h"

namespace eaglevk::ops {

uint64_t ExpertWeights::expert_bytes() const { return uint64_t(rows) * weight_row_bytes(type, cols); }

vk::BufferRange ExpertWeights::expert_range(uint32_t e) const {
  if (e >= experts) fail("expert {} of {}", e, experts);
  const uint64_t bytes = expert_bytes();
  vk::BufferRange where = data;
  uint64_t begin = uint64_t(e) * bytes;
  if (!groups.empty()) {
    where = groups.at(e / per_group);
    begin = uint64_t(e % per_group) * bytes;
  }
  return where.sub(begin, std::min<uint64_t>((bytes + 3) / 4 * 4, where.bytes - begin));
}

WeightMatrix ExpertWeights::expert(uint32_t e) const {
  if (k_major) fail("expert {}: a k-major expert tensor is not an [N, K] matrix", e);
  return WeightMatrix{expert_range(e), type, rows, cols};
}

void moe_route(OpContext& oc, Act logits, Act x, uint32_t rows, uint32_t experts, uint32_t k, uint32_t dim,
               IntVec ids, Act xs) {
  if (rows == 0) return;
  if (k == 0 || k > 8 || k > experts) fail("moe_route: {} experts per token of {} (1..8)", k, experts);
  const vk::Kernel& kernel = oc.gpu.pipelines.get("moe_route");
  struct {
    uint32_t rows, experts, k, dim, logits_offset, logits_stride, x_offset, x_stride;
  } push{rows, experts, k, dim, logits.offset, logits.stride, x.offset, x.stride};
  if (xs.offset != 0 || xs.stride != dim) fail("moe_route: expert inputs must be dense [rows * k, dim]");
  vk::Arg id_out = vk::writes(ids.range.sub(uint64_t(ids.offset) * 4, uint64_t(rows) * k * 4));
  id_out.bind = ids.range;
  if (ids.offset) fail("moe_route: ids must start at offset 0");
  oc.rec.dispatch(kernel, {logits.reads(rows, experts), x.reads(rows, dim), id_out, xs.writes(rows * k, dim)}, push,
                  rows, 1, 1, "moe_route");
}

bool expert_rows_grouped(uint32_t rows, MatmulPath path) { return path == MatmulPath::Auto && rows > MATVEC_MAX_ROWS; }

uint64_t moe_row_lists_bytes(uint32_t rows, uint32_t experts) { return uint64_t(experts) * (rows + 1) * 4; }

void group_rows_by_expert(OpContext& oc, IntVec ids, uint32_t rows, uint32_t experts, IntVec lists) {
  if (rows == 0) return;
  if (lists.range.bytes < uint64_t(lists.offset) * 4 + moe_row_lists_bytes(rows, experts))
    fail("group_rows_by_expert: {} bytes of lists for {} rows of {} experts", lists.range.bytes, rows, experts);
  struct {
    uint32_t rows, experts, ids_offset, lists_offset, list_stride;
  } push{rows, experts, ids.offset, lists.offset, rows + 1};
  oc.rec.dispatch(oc.gpu.pipelines.get("moe_rows"), {vk::reads(ids.range), vk::writes(lists.range)}, push,
                  (experts + 63) / 64, 1, 1, "moe_rows");
}

namespace {

// matmul_id's grouped GEMM (gemm.comp's ROW_IDS): one dispatch over all experts where they fit
// one binding, else one per expert; false (nothing recorded) where an expert alone does not fit.
bool matmul_id_grouped(OpContext& oc, Act x, const ExpertWeights& w, IntVec lists, Act y, uint32_t rows,
                       uint32_t slots, uint32_t slot, bool accumulate, const char* name) {
  const vk::Context& ctx = oc.gpu.ctx;
  const uint64_t expert_bytes = w.expert_bytes();
  const uint64_t all_bytes = (uint64_t(w.experts) * expert_bytes + 3) / 4 * 4;
  const bool together = w.groups.size() <= 1 && all_bytes <= ctx.max_binding_range;
  if (!together && (expert_bytes + 3) / 4 * 4 > ctx.max_binding_range) return false;
  if (lists.range.bytes < uint64_t(lists.offset) * 4 + moe_row_lists_bytes(rows, w.experts))
    fail("{}: {} bytes of row lists for {} rows of {} experts", name, lists.range.bytes, rows, w.experts);
  const bool coopmat = oc.gpu.coopmat_gemm;
  const CoopmatKernel cm = coopmat ? coopmat_kernel(ctx) : CoopmatKernel{};
  const MatvecShape shape = matvec_shape(oc.gpu);
  const uint32_t out_rows = (rows + slots - 1) / slots;
  struct {
    uint32_t K, N, rows, x_offset, x_stride, y_offset, y_stride, accumulate, slots, slot, expert_base, expert_stride,
        lists_offset, list_stride;
  } push{w.cols, w.rows, rows, x.offset, x.stride, y.offset, y.stride, accumulate ? 1u : 0u, slots, slot, 0,
         uint32_t(expert_bytes), lists.offset, rows + 1};
  vk::Arg out = accumulate ? y.updates(out_rows, w.rows) : y.writes(out_rows, w.rows);
  auto record = [&](vk::BufferRange weights, uint32_t base, uint32_t count) {
    push.expert_base = base;
    const bool texel = !coopmat && shape.texel_loads && x.texel_aligned() &&
                       (weight_type_quantized(w.type) || w.cols % 8 == 0) &&
                       vk::texel_view_possible(weights, weight_texel_format(w.type));
    const std::string shader =
        fmt::format("gemm_id_{}{}", weight_type_name(w.type), coopmat ? "_coopmat" : texel ? "_texel" : "");
    // K_MAJOR follows the coopmat kernel's shape constants (0..3), or is the scalar GEMM's 0;
    // given only where set: the quantized variants have no such constant (k_major is float-only).
    std::vector<uint32_t> spec = cm.spec;
    if (w.k_major) spec.push_back(1u);
    const uint32_t tile_m = coopmat ? cm.block_rows : texel ? 32 : 64;
    const uint32_t tile_n = coopmat ? cm.block_outs : texel ? 32 : 64;
    const std::vector<vk::Arg> args =
        with_lattice_grid(oc.gpu, w.type, {x.reads(rows, w.cols), vk::reads(weights), out, vk::reads(lists.range)});
    oc.rec.dispatch(oc.gpu.pipelines.get(shader, spec), std::span<const vk::Arg>(args), &push, uint32_t(sizeof(push)),
                    (w.rows + tile_n - 1) / tile_n, (rows + tile_m - 1) / tile_m, count, name);
  };
  if (together) {
    vk::BufferRange all = w.groups.empty() ? w.data : w.groups[0];
    record(all.sub(0, std::min<uint64_t>(all_bytes, all.bytes)), 0, w.experts);
  } else {
    for (uint32_t e = 0; e < w.experts; ++e) record(w.expert_range(e), e, 1);
  }
  return true;
}

}  // namespace

namespace {

// matvec.comp's EXPERTS variant over all rows (decode steps, verify passes, and prefills whose
// experts cannot be grouped). With `glu`, y = swiglu of the gate and up halves of w's outputs
// (matvec.comp's GLU: their bits, one dispatch); false, with nothing recorded, where that cannot
// be: an odd number of outputs per workgroup, or an expert split over several bindings.
bool expert_products(OpContext& oc, Act x, const ExpertWeights& w, IntVec ids, Act y, uint32_t rows, uint32_t slots,
                     uint32_t slot, bool accumulate, bool glu, const char* name) {
  const vk::Context& ctx = oc.gpu.ctx;
  const MatvecShape shape = matvec_shape(oc.gpu);
  // The one-row outputs whatever the rows (rows_outs is not tuned for expert groups yet).
  const uint32_t outs = w.k_major ? 1 : shape.outs_for(weight_type_quantized(w.type), 1);
  const uint64_t expert_bytes = w.expert_bytes();
  const uint64_t all_bytes = (uint64_t(w.experts) * expert_bytes + 3) / 4 * 4;
  const bool together = w.groups.size() <= 1 && all_bytes <= ctx.max_binding_range;
  if (glu && (w.rows % 2 || (!w.k_major && outs % 2) || (!together && (expert_bytes + 3) / 4 * 4 > ctx.max_binding_range)))
    return false;
  // matvec.comp's EXPERTS variant: a workgroup takes up to ROWS rows of one expert. An expert has
  // at most one row per token in a slot, so ROWS need not exceed the tokens.
  const uint32_t out_rows = (rows + slots - 1) / slots;
  const uint32_t group_rows = std::clamp<uint32_t>(std::min(shape.expert_rows, out_rows), 1, MATVEC_MAX_ROWS);
  // Quantized variants compile K_MAJOR away (SPIR-V keeps only the constants a shader uses), so
  // the last constant is given only where it is set.
  std::vector<uint32_t> spec{shape.workgroup, outs, shape.one_subgroup, glu ? 1u : 0u, /*NORM_WG=*/0, group_rows};
  if (w.k_major) spec.push_back(1u);
  const std::string shader = fmt::format("matvec_id_{}", weight_type_name(w.type));
  struct {
    uint32_t K, N, rows, x_offset, x_stride, y_offset, y_stride, accumulate, glu_up;
    float eps;
    uint32_t slots, slot, expert_base, expert_count, expert_stride, ids_offset;
  } push{};
  // GLU: N counts the gate outputs (pairs), the up outputs start at glu_up.
  const uint32_t pairs = w.rows / 2, glu_up = glu ? pairs : 0u;
  // Row-major [N, K]: outputs [n0, n0 + n) of the bound rows over all of K. K-major [K, N]:
  // every output over the bound k rows [k0, k0 + n), which accumulate onto earlier chunks.
  auto record = [&](vk::BufferRange weights, uint32_t first, uint32_t n, uint32_t base, uint32_t count) {
    // The stride is only used between experts bound together, so it fits the 32-bit binding.
    uint32_t stride = count > 1 ? uint32_t(expert_bytes) : 0u;
    Act xc = w.k_major ? x.cols(first) : x;
    Act yc = w.k_major || glu ? y : y.cols(first);
    uint32_t K = w.k_major ? n : w.cols, N = glu ? pairs : w.k_major ? w.rows : n;
    bool add = !glu && (accumulate || (w.k_major && first > 0));
    push = {K, N, rows, xc.offset, xc.stride, yc.offset, yc.stride, add ? 1u : 0u, glu_up, 0.0f, slots, slot, base,
            count, stride, ids.offset};
    vk::Arg o = add ? yc.updates(out_rows, N) : yc.writes(out_rows, N);
    // Texel loads (CPU devices) where x and the bound experts can be viewed so: same bits.
    const bool texel = shape.texel_loads && xc.texel_aligned() && (weight_type_quantized(w.type) || K % 8 == 0) &&
                       vk::texel_view_possible(weights, weight_texel_format(w.type));
    const vk::Kernel& kernel = oc.gpu.pipelines.get(shader + (texel ? "_texel" : ""), spec);
    const uint32_t per_group = w.k_major ? shape.workgroup : glu ? outs / 2 : outs;
    const uint32_t groups_x = (N + per_group - 1) / per_group;
    if (groups_x > ctx.info.features.max_workgroup_count[0])
      fail("{}: {} outputs need {} workgroups, more than this device's {}", name, N, groups_x,
           ctx.info.features.max_workgroup_count[0]);
    const std::vector<vk::Arg> args =
        with_lattice_grid(oc.gpu, w.type, {xc.reads(rows, K), vk::reads(weights), o, vk::reads(ids.range)});
    oc.rec.dispatch(kernel, std::span<const vk::Arg>(args), &push, uint32_t(sizeof(push)), groups_x, rows, 1, name);
  };
  const uint32_t span = w.k_major ? w.cols : w.rows;  // what a binding chunks: N rows or K rows
  if (together) {
    vk::BufferRange all = w.groups.empty() ? w.data : w.groups[0];
    record(all.sub(0, std::min<uint64_t>(all_bytes, all.bytes)), 0, span, 0, w.experts);
    return true;
  }
  // The experts do not fit one binding: one dispatch per expert and row chunk (one chunk with
  // GLU, checked above); rows routed elsewhere return at once.
  for (uint32_t e = 0; e < w.experts; ++e) {
    // A k-major expert is a [K, N] matrix of rows along k.
    WeightMatrix m = w.k_major ? WeightMatrix{w.expert_range(e), w.type, w.cols, w.rows} : w.expert(e);
    uint32_t chunk = glu ? span : m.chunk_rows(ctx.max_binding_range, ctx.info.features.min_storage_buffer_offset_alignment);
    for (uint32_t first = 0; first < span; first += chunk) {
      uint32_t n = std::min(chunk, span - first);
      record(m.rows_range(first, n), first, n, e, 1);
    }
  }
  return true;
}

void check_expert_weights(const ExpertWeights& w, const char* name) {
  if (w.k_major && weight_type_quantized(w.type))
    fail("{}: k-major expert weights must be f32, f16 or bf16, not {}", name, weight_type_name(w.type));
  check_whole_blocks(w.type, w.cols, name);
}

}  // namespace

void matmul_id(OpContext& oc, Act x, const ExpertWeights& w, IntVec ids, Act y, uint32_t rows, uint32_t slots,
               uint32_t slot, bool accumulate, const char* name, const IntVec* row_lists) {
  if (rows == 0) return;
  check_expert_weights(w, name);
  if (row_lists && rows > MATVEC_MAX_ROWS &&
      matmul_id_grouped(oc, x, w, *row_lists, y, rows, slots, slot, accumulate, name))
    return;
  expert_products(oc, x, w, ids, y, rows, slots, slot, accumulate, false, name);
}

void matmul_id_swiglu(OpContext& oc, Act x, const ExpertWeights& gate_up, IntVec ids, Act gu, Act out, uint32_t rows,
                      const char* name, const IntVec* row_lists) {
  if (rows == 0) return;
  check_expert_weights(gate_up, name);
  // A grouped prefill (matmul_id's GEMM per expert) keeps swiglu apart.
  const bool grouped = row_lists && rows > MATVEC_MAX_ROWS;
  if (!grouped && expert_products(oc, x, gate_up, ids, out, rows, 1, 0, false, true, name)) return;
  const uint32_t width = gate_up.rows / 2;
  matmul_id(oc, x, gate_up, ids, gu, rows, 1, 0, false, name, row_lists);
  swiglu(oc, gu, gu.cols(width), out, rows, width);
}

}  // namespace eaglevk::ops
