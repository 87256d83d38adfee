#include "runtime/ops/ops.h"

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

void rms_norm_heads(OpContext& oc, Act x, uint32_t rows, uint32_t heads, uint32_t head_dim, float eps) {
  if (rows == 0) return;
  const vk::Kernel& kernel = oc.gpu.pipelines.get("norm", {/*WG=*/oc.gpu.norm_workgroup, /*HAS_WEIGHT=*/0u, /*LAYER_NORM=*/0u});
  const NormPush push{rows * heads, head_dim, x.offset, x.stride, x.offset, x.stride, eps, heads};
  oc.rec.dispatch(kernel,
                  {x.reads(rows, heads * head_dim), vk::reads(oc.gpu.dummy), x.updates(rows, heads * head_dim),
                   vk::reads(oc.gpu.dummy)},
                  push, rows * heads, 1, 1, "qk_norm");
}

}  // namespace eaglevk::ops
