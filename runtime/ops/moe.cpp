#include <algorithm>

#include <fmt/format.h>

#include <eaglevk/error.h>

#include "runtime/ops/ops.h"

namespace eaglevk::ops {

WeightMatrix ExpertWeights::expert(uint32_t e) const {
  uint64_t bytes = uint64_t(rows) * weight_row_bytes(type, cols);
  return WeightMatrix{data.sub(e * bytes, std::min<uint64_t>((bytes + 3) / 4 * 4, data.bytes - e * bytes)), type, rows,
                      cols};
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
  const MatvecShape shape = matvec_shape(ctx);
  const vk::Kernel& kernel = oc.gpu.pipelines.get(fmt::format("matvec_id_{}", weight_type_name(w.type)),
                                                  {shape.workgroup, shape.outs, shape.one_subgroup});
  struct {
    uint32_t K, N, rows, x_offset, x_stride, y_offset, y_stride, accumulate, slots, slot, expert_base, expert_count,
        expert_stride, ids_offset;
  } push{};
  check_whole_blocks(w.type, w.cols, name);
  const uint32_t out_rows = (rows + slots - 1) / slots;
  const uint64_t expert_bytes = uint64_t(w.rows) * weight_row_bytes(w.type, w.cols);
  auto record = [&](vk::BufferRange weights, uint32_t n0, uint32_t n, uint32_t base, uint32_t count) {
    Act yc = y.cols(n0);
    // The stride is only used between experts bound together, so it fits the 32-bit binding.
    uint32_t stride = count > 1 ? uint32_t(expert_bytes) : 0u;
    push = {w.cols, n, rows, x.offset, x.stride, yc.offset, yc.stride, accumulate ? 1u : 0u, slots, slot, base, count,
            stride, ids.offset};
    vk::Arg o = accumulate ? yc.updates(out_rows, n) : yc.writes(out_rows, n);
    oc.rec.dispatch(kernel, {x.reads(rows, w.cols), vk::reads(weights), o, vk::reads(ids.range)}, push,
                    (n + shape.outs - 1) / shape.outs, rows, 1, name);
  };
  uint64_t all_bytes = uint64_t(w.experts) * expert_bytes;
  if ((all_bytes + 3) / 4 * 4 <= ctx.max_binding_range) {
    record(w.data.sub(0, std::min<uint64_t>((all_bytes + 3) / 4 * 4, w.data.bytes)), 0, w.rows, 0, w.experts);
    return;
  }
  // The experts do not fit one binding: one dispatch per expert and row chunk; rows routed
  // elsewhere return at once.
  for (uint32_t e = 0; e < w.experts; ++e) {
    WeightMatrix m = w.expert(e);
    uint32_t chunk = m.chunk_rows(ctx.max_binding_range, ctx.info.features.min_storage_buffer_offset_alignment);
    for (uint32_t n0 = 0; n0 < w.rows; n0 += chunk) {
      uint32_t n = std::min(chunk, w.rows - n0);
      record(m.rows_range(n0, n), n0, n, e, 1);
    }
  }
}

}  // namespace eaglevk::ops
