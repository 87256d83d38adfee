#include <cmath>

#include "runtime/ops/ops.h"

namespace eaglevk::ops {

std::vector<float> rope_table(const std::vector<float>& inv_freq, uint32_t max_positions) {
  std::vector<float> table(size_t(max_positions) * inv_freq.size() * 2);
  for (uint32_t p = 0; p < max_positions; ++p)
    for (size_t j = 0; j < inv_freq.size(); ++j) {
      float angle = float(p) * inv_freq[j];  // f32 product, as torch computes freqs
      size_t i = (size_t(p) * inv_freq.size() + j) * 2;
      table[i] = float(std::cos(double(angle)));
      table[i + 1] = float(std::sin(double(angle)));
    }
  return table;
}

void rope(OpContext& oc, Act x, uint32_t rows, uint32_t heads, uint32_t head_dim, IntVec positions,
          vk::BufferRange table, uint32_t table_positions, RopePairing pairing) {
  if (rows == 0) return;
  const vk::Kernel& kernel = oc.gpu.pipelines.get("rope", {/*PAIRING=*/uint32_t(pairing)});
  struct {
    uint32_t rows, heads, head_dim, x_offset, x_stride, pos_offset, table_rows;
  } push{rows, heads, head_dim, x.offset, x.stride, positions.offset, table_positions};
  const Grid g = linear_grid(oc.gpu.ctx, uint64_t(rows) * heads * head_dim / 2, 64, "rope");
  oc.rec.dispatch(kernel, {x.updates(rows, heads * head_dim), vk::reads(positions.range), vk::reads(table)}, push,
                  g.x, g.y, 1, "rope");
}

}  // namespace eaglevk::ops
