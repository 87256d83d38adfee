#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include <eaglevk/error.h>

#include "runtime/ops/ops.h"

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

void matmul_id(OpContext& oc, Act x, const ExpertWeights& w, IntVec ids, Act y, uint32_t rows, uint32_t slots,
               uint32_t slot, bool accumulate, const char* name) {
  if (rows == 0) return;
  const vk::Context& ctx = oc.gpu.ctx;
  const MatvecShape shape = matvec_shape(oc.gpu);
  if (w.k_major && weight_type_quantized(w.type))
    fail("{}: k-major expert weights must be f32, f16 or bf16, not {}", name, weight_type_name(w.type));
  const uint32_t outs = w.k_major ? 1 : shape.outs;
  // Quantized variants compile K_MAJOR away (SPIR-V keeps only the constants a shader uses), so
  // the fourth constant is given only where it is set.
  std::vector<uint32_t> spec{shape.workgroup, outs, shape.one_subgroup};
  if (w.k_major) spec.push_back(1u);
  const std::string shader = fmt::format("matvec_id_{}", weight_type_name(w.type));
  struct {
    uint32_t K, N, rows, x_offset, x_stride, y_offset, y_stride, accumulate, slots, slot, expert_base, expert_count,
        expert_stride, ids_offset;
  } push{};
  check_whole_blocks(w.type, w.cols, name);
  const uint32_t out_rows = (rows + slots - 1) / slots;
  const uint64_t expert_bytes = w.expert_bytes();
  // Row-major [N, K]: outputs [n0, n0 + n) of the bound rows over all of K. K-major [K, N]:
  // every output over the bound k rows [k0, k0 + n), which accumulate onto earlier chunks.
  auto record = [&](vk::BufferRange weights, uint32_t first, uint32_t n, uint32_t base, uint32_t count) {
    // The stride is only used between experts bound together, so it fits the 32-bit binding.
    uint32_t stride = count > 1 ? uint32_t(expert_bytes) : 0u;
    Act xc = w.k_major ? x.cols(first) : x;
    Act yc = w.k_major ? y : y.cols(first);
    uint32_t K = w.k_major ? n : w.cols, N = w.k_major ? w.rows : n;
    bool add = accumulate || (w.k_major && first > 0);
    push = {K, N, rows, xc.offset, xc.stride, yc.offset, yc.stride, add ? 1u : 0u, slots, slot, base, count,
            stride, ids.offset};
    vk::Arg o = add ? yc.updates(out_rows, N) : yc.writes(out_rows, N);
    // Texel loads (CPU devices) where x and the bound experts can be viewed so: same bits.
    const bool texel = shape.texel_loads && xc.texel_aligned() &&
                       vk::texel_view_possible(weights, weight_texel_format(w.type));
    const vk::Kernel& kernel = oc.gpu.pipelines.get(shader + (texel ? "_texel" : ""), spec);
    uint32_t groups_x = w.k_major ? (N + shape.workgroup - 1) / shape.workgroup : (N + outs - 1) / outs;
    oc.rec.dispatch(kernel, {xc.reads(rows, K), vk::reads(weights), o, vk::reads(ids.range)}, push, groups_x, rows, 1,
                    name);
  };
  const uint32_t span = w.k_major ? w.cols : w.rows;  // what a binding chunks: N rows or K rows
  uint64_t all_bytes = uint64_t(w.experts) * expert_bytes;
  if (w.groups.size() <= 1 && (all_bytes + 3) / 4 * 4 <= ctx.max_binding_range) {
    vk::BufferRange all = w.groups.empty() ? w.data : w.groups[0];
    record(all.sub(0, std::min<uint64_t>((all_bytes + 3) / 4 * 4, all.bytes)), 0, span, 0, w.experts);
    return;
  }
  // The experts do not fit one binding: one dispatch per expert and row chunk; rows routed
  // elsewhere return at once.
  for (uint32_t e = 0; e < w.experts; ++e) {
    // A k-major expert is a [K, N] matrix of rows along k.
    WeightMatrix m = w.k_major ? WeightMatrix{w.expert_range(e), w.type, w.cols, w.rows} : w.expert(e);
    uint32_t chunk = m.chunk_rows(ctx.max_binding_range, ctx.info.features.min_storage_buffer_offset_alignment);
    for (uint32_t first = 0; first < span; first += chunk) {
      uint32_t n = std::min(chunk, span - first);
      record(m.rows_range(first, n), first, n, e, 1);
    }
  }
}

}  // namespace eaglevk::ops
