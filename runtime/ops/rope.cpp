#include <cmath>

#include <eaglevk/error.h>

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

namespace {

struct RopePush {
  uint32_t rows, heads, head_dim, x_offset, x_stride, pos_offset, table_rows, kv_heads = 0, slot_offset = 0,
      capacity = 0;
};

}  // namespace

void rope(OpContext& oc, Act x, uint32_t rows, uint32_t heads, uint32_t head_dim, IntVec positions,
          vk::BufferRange table, uint32_t table_positions, RopePairing pairing) {
  if (rows == 0) return;
  const vk::Kernel& kernel = oc.gpu.pipelines.get("rope", {/*PAIRING=*/uint32_t(pairing)});
  RopePush push{rows, heads, head_dim, x.offset, x.stride, positions.offset, table_positions};
  const Grid g = linear_grid(oc.gpu.ctx, uint64_t(rows) * heads * head_dim / 2, 64, "rope");
  oc.rec.dispatch(kernel, {x.updates(rows, heads * head_dim), vk::reads(positions.range), vk::reads(table)}, push,
                  g.x, g.y, 1, "rope");
}

void rope_kv_write(OpContext& oc, Act qkv, uint32_t rows, const RopeKv& r) {
  if (rows == 0) return;
  const uint32_t hd = r.head_dim, kv_dim = r.kv.kv_dim;
  if (hd == 0 || hd % 2 || kv_dim % hd)
    fail("rope_kv_write: kv_dim {} is not a whole number of even heads of {}", kv_dim, hd);
  if (r.pairing == RopePairing::None) {
    kv_write(oc, qkv.cols(r.q_heads * hd), qkv.cols(r.q_heads * hd + kv_dim), rows, r.slots, r.kv);
    return;
  }
  const uint32_t kv_heads = kv_dim / hd;
  const vk::Kernel& kernel = oc.gpu.pipelines.get("rope_kv_write", {/*PAIRING=*/uint32_t(r.pairing)});
  RopePush push{rows,     r.q_heads,      hd, qkv.offset, qkv.stride, r.positions.offset, r.table_positions,
                kv_heads, r.slots.offset, r.kv.capacity};
  const Grid g = linear_grid(oc.gpu.ctx, uint64_t(rows) * (r.q_heads * hd / 2 + kv_dim), 64, "rope_kv_write");
  // q is rotated in place; k and v are only read, but one binding holds all three.
  oc.rec.dispatch(kernel,
                  {qkv.updates(rows, (r.q_heads + 2 * kv_heads) * hd), vk::reads(r.positions.range),
                   vk::reads(r.table), vk::reads(r.slots.range), vk::writes(r.kv.k), vk::writes(r.kv.v)},
                  push, g.x, g.y, 1, "rope_kv_write");
}

}  // namespace eaglevk::ops
