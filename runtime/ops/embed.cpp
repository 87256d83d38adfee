#include <algorithm>

#include <fmt/format.h>

#include "runtime/ops/lattice_grids.h"
#include "runtime/ops/ops.h"

namespace eaglevk::ops {

void embed(OpContext& oc, IntVec ids, uint32_t tokens, const WeightMatrix& table, Act out) {
  if (tokens == 0) return;
  check_whole_blocks(table.type, table.cols, "embed");
  const vk::Context& ctx = oc.gpu.ctx;
  const vk::Kernel& kernel =
      oc.gpu.pipelines.get(fmt::format("embed_{}", weight_type_name(table.type)), {/*WG=*/64});
  struct {
    uint32_t tokens, dim, row_base, row_count, ids_offset, out_offset, out_stride;
  } push;
  uint32_t chunk = table.chunk_rows(ctx.max_binding_range, ctx.info.features.min_storage_buffer_offset_alignment);
  // Each chunk writes only the rows whose id falls in it; the chunks' writes are disjoint but
  // not declarable row by row, so consecutive chunks are ordered by the recorder (WAW).
  for (uint32_t r0 = 0; r0 < table.rows; r0 += chunk) {
    uint32_t n = std::min(chunk, table.rows - r0);
    vk::BufferRange part = table.rows_range(r0, n);
    push = {tokens, table.cols, r0, n, ids.offset, out.offset, out.stride};
    vk::Arg id_arg = vk::reads(ids.range);
    const std::vector<vk::Arg> args =
        with_lattice_grid(oc.gpu, table.type, {id_arg, vk::reads(part), out.writes(tokens, table.cols)});
    oc.rec.dispatch(kernel, std::span<const vk::Arg>(args), &push, uint32_t(sizeof(push)), tokens, 1, 1, "embed");
  }
}

}  // namespace eaglevk::ops
