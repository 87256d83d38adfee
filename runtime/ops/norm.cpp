#include <eaglevk/error.h>

#include "runtime/ops/ops.h"
#include "shaders/shared_constants.h"

namespace eaglevk::ops {
namespace {

// norm.comp's push constants.
struct NormPush {
  uint32_t rows, dim, in_offset, in_stride, out_offset, out_stride;
  float eps;
  uint32_t inner;
};

// One workgroup per row of x into y (in place when they are the same rows).
void record_rows(OpContext& oc, bool has_weight, bool layer_norm, Act x, vk::BufferRange weight, vk::BufferRange bias,
                 Act y, uint32_t rows, uint32_t dim, float eps, const char* name) {
  if (rows == 0) return;
  const vk::Kernel& kernel = oc.gpu.pipelines.get(
      "norm", {/*WG=*/oc.gpu.norm_workgroup, /*HAS_WEIGHT=*/has_weight ? 1u : 0u, /*LAYER_NORM=*/layer_norm ? 1u : 0u});
  const NormPush push{rows, dim, x.offset, x.stride, y.offset, y.stride, eps, 1};
  bool in_place = x.range.buffer == y.range.buffer && x.range.offset == y.range.offset && x.offset == y.offset;
  vk::Arg out = in_place ? y.updates(rows, dim) : y.writes(rows, dim);
  oc.rec.dispatch(kernel, {x.reads(rows, dim), vk::reads(weight), out, vk::reads(bias)}, push, rows, 1, 1, name);
}

}  // namespace

void rms_norm(OpContext& oc, Act x, const vk::BufferRange* weight, Act y, uint32_t rows, uint32_t dim, float eps,
              const char* name) {
  const vk::BufferRange dummy(oc.gpu.dummy);
  record_rows(oc, weight != nullptr, false, x, weight ? *weight : dummy, dummy, y, rows, dim, eps, name);
}

void layer_norm(OpContext& oc, Act x, vk::BufferRange weight, vk::BufferRange bias, Act y, uint32_t rows, uint32_t dim,
                float eps, const char* name) {
  record_rows(oc, true, true, x, weight, bias, y, rows, dim, eps, name);
}

void rms_norm_heads(OpContext& oc, Act x, uint32_t rows, uint32_t heads, uint32_t head_dim, float eps,
                    const vk::BufferRange* weight, const char* name) {
  if (rows == 0) return;
  const vk::Kernel& kernel = oc.gpu.pipelines.get(
      "norm", {/*WG=*/oc.gpu.norm_workgroup, /*HAS_WEIGHT=*/weight ? 1u : 0u, /*LAYER_NORM=*/0u});
  const NormPush push{rows * heads, head_dim, x.offset, x.stride, x.offset, x.stride, eps, heads};
  oc.rec.dispatch(kernel,
                  {x.reads(rows, heads * head_dim), weight ? vk::reads(*weight) : vk::reads(oc.gpu.dummy),
                   x.updates(rows, heads * head_dim), vk::reads(oc.gpu.dummy)},
                  push, rows * heads, 1, 1, name);
}

void rope_norm_kv_write(OpContext& oc, Act qkv, uint32_t rows, const RopeKv& r, float eps) {
  if (rows == 0) return;
  const uint32_t hd = r.head_dim, kv_dim = r.kv.kv_dim;
  if (hd == 0 || hd % 2 || kv_dim % hd)
    fail("rope_norm_kv_write: kv_dim {} is not a whole number of even heads of {}", kv_dim, hd);
  if (r.pairing == RopePairing::None) fail("rope_norm_kv_write: a layer without rotation has no QK norm");
  const uint32_t kv_heads = kv_dim / hd, heads = r.q_heads + kv_heads;
  if (!oc.gpu.fold_rope) {  // the three dispatches: the reference (fold.rope=off)
    rope(oc, qkv, rows, heads, hd, r.positions, r.table, r.table_positions, r.pairing);
    rms_norm_heads(oc, qkv, rows, heads, hd, eps);
    kv_write(oc, qkv.cols(r.q_heads * hd), qkv.cols(heads * hd), rows, r.slots, r.kv);
    return;
  }
  if (hd > ATTENTION_MAX_HEAD_DIM)  // the kernel keeps a head in shared memory
    fail("rope_norm_kv_write: heads of {} (at most {})", hd, ATTENTION_MAX_HEAD_DIM);
  struct Push {
    NormPush norm;
    uint32_t q_heads, pos_offset, table_rows, slot_offset, capacity;
  } push{{rows * heads, hd, qkv.offset, qkv.stride, qkv.offset, qkv.stride, eps, heads},
         r.q_heads, r.positions.offset, r.table_positions, r.slots.offset, r.kv.capacity};
  const vk::Kernel& kernel = oc.gpu.pipelines.get(
      "norm_rope_kv", {/*WG=*/oc.gpu.norm_workgroup, /*HAS_WEIGHT=*/0u, /*LAYER_NORM=*/0u, uint32_t(r.pairing)});
  // q and k are rotated and normalised in place; v is only read. The positions and the table sit
  // in the bindings of the weight and the bias of the other norms.
  oc.rec.dispatch(kernel,
                  {qkv.reads(rows, heads * hd + kv_dim), vk::reads(r.positions.range), qkv.updates(rows, heads * hd),
                   vk::reads(r.table), vk::reads(r.slots.range), vk::writes_scattered(r.kv.k, uint64_t(rows) * kv_dim * 2),
                   vk::writes_scattered(r.kv.v, uint64_t(rows) * kv_dim * 2)},
                  push, rows * heads, 1, 1, "rope_qk_norm_kv_write");
}

}  // namespace eaglevk::ops
