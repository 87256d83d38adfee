#include "runtime/ops/ops.h"

namespace eaglevk::ops {

void rms_norm(OpContext& oc, Act x, const vk::BufferRange* weight, Act y, uint32_t rows, uint32_t dim, float eps,
              const char* name) {
  if (rows == 0) return;
  const vk::Kernel& kernel =
      oc.gpu.pipelines.get("norm", {/*WG=*/64, /*HAS_WEIGHT=*/weight ? 1u : 0u, /*LAYER_NORM=*/0u});
  struct {
    uint32_t rows, dim, in_offset, in_stride, out_offset, out_stride;
    float eps;
    uint32_t inner;
  } push{rows, dim, x.offset, x.stride, y.offset, y.stride, eps, 1};
  vk::BufferRange w = weight ? *weight : vk::BufferRange(oc.gpu.dummy);
  bool in_place = x.range.buffer == y.range.buffer && x.range.offset == y.range.offset && x.offset == y.offset;
  vk::Arg out = in_place ? y.updates(rows, dim) : y.writes(rows, dim);
  oc.rec.dispatch(kernel, {x.reads(rows, dim), vk::reads(w), out, vk::reads(oc.gpu.dummy)}, push, rows, 1, 1, name);
}

void layer_norm(OpContext& oc, Act x, vk::BufferRange weight, vk::BufferRange bias, Act y, uint32_t rows, uint32_t dim,
                float eps, const char* name) {
  if (rows == 0) return;
  const vk::Kernel& kernel = oc.gpu.pipelines.get("norm", {/*WG=*/64, /*HAS_WEIGHT=*/1u, /*LAYER_NORM=*/1u});
  struct {
    uint32_t rows, dim, in_offset, in_stride, out_offset, out_stride;
    float eps;
    uint32_t inner;
  } push{rows, dim, x.offset, x.stride, y.offset, y.stride, eps, 1};
  bool in_place = x.range.buffer == y.range.buffer && x.range.offset == y.range.offset && x.offset == y.offset;
  vk::Arg out = in_place ? y.updates(rows, dim) : y.writes(rows, dim);
  oc.rec.dispatch(kernel, {x.reads(rows, dim), vk::reads(weight), out, vk::reads(bias)}, push, rows, 1, 1, name);
}

}  // namespace eaglevk::ops

namespace eaglevk::ops {

void rms_norm_heads(OpContext& oc, Act x, uint32_t rows, uint32_t heads, uint32_t head_dim, float eps) {
  if (rows == 0) return;
  const vk::Kernel& kernel = oc.gpu.pipelines.get("norm", {/*WG=*/64, /*HAS_WEIGHT=*/0u, /*LAYER_NORM=*/0u});
  struct {
    uint32_t rows, dim, in_offset, in_stride, out_offset, out_stride;
    float eps;
    uint32_t inner;
  } push{rows * heads, head_dim, x.offset, x.stride, x.offset, x.stride, eps, heads};
  oc.rec.dispatch(kernel,
                  {x.reads(rows, heads * head_dim), vk::reads(oc.gpu.dummy), x.updates(rows, heads * head_dim),
                   vk::reads(oc.gpu.dummy)},
                  push, rows * heads, 1, 1, "qk_norm");
}

}  // namespace eaglevk::ops
