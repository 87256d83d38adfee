#include <eaglevk/error.h>

#include "runtime/ops/ops.h"

namespace eaglevk::ops {

void swiglu(OpContext& oc, Act gate, Act up, Act out, uint32_t rows, uint32_t width) {
  if (rows == 0) return;
  if (gate.range.buffer != up.range.buffer || gate.range.offset != up.range.offset || gate.stride != up.stride)
    fail("swiglu: gate and up must be column ranges of one buffer");
  const vk::Kernel& kernel = oc.gpu.pipelines.get("swiglu");
  struct {
    uint32_t rows, width, gate_offset, up_offset, in_stride, out_offset, out_stride;
  } push{rows, width, gate.offset, up.offset, gate.stride, out.offset, out.stride};
  uint32_t lo = std::min(gate.offset, up.offset), hi = std::max(gate.offset, up.offset);
  Act in(gate.range, gate.stride, lo);
  const Grid g = linear_grid(oc.gpu.ctx, uint64_t(rows) * width, 64, "swiglu");
  oc.rec.dispatch(kernel, {in.reads(rows, hi - lo + width), out.writes(rows, width)}, push, g.x, g.y, 1, "swiglu");
}

void copy_rows(OpContext& oc, Act src, Act dst, uint32_t rows, uint32_t width, const char* name) {
  if (rows == 0) return;
  const vk::Kernel& kernel = oc.gpu.pipelines.get("copy_rows", {/*GATHER=*/0});
  struct {
    uint32_t rows, width, src_offset, src_stride, dst_offset, dst_stride, idx_offset;
  } push{rows, width, src.offset, src.stride, dst.offset, dst.stride, 0};
  const Grid g = linear_grid(oc.gpu.ctx, uint64_t(rows) * width, 64, name);
  oc.rec.dispatch(kernel, {src.reads(rows, width), dst.writes(rows, width), vk::reads(vk::BufferRange(oc.gpu.dummy))},
                  push, g.x, g.y, 1, name);
}

void gather_rows(OpContext& oc, Act src, uint32_t src_rows, IntVec index, Act dst, uint32_t rows, uint32_t width,
                 const char* name) {
  if (rows == 0) return;
  const vk::Kernel& kernel = oc.gpu.pipelines.get("copy_rows", {/*GATHER=*/1});
  struct {
    uint32_t rows, width, src_offset, src_stride, dst_offset, dst_stride, idx_offset;
  } push{rows, width, src.offset, src.stride, dst.offset, dst.stride, index.offset};
  const Grid g = linear_grid(oc.gpu.ctx, uint64_t(rows) * width, 64, name);
  vk::Arg idx = vk::reads(index.range.sub(uint64_t(index.offset) * 4, uint64_t(rows) * 4));
  idx.bind = index.range;  // bound whole: the offset is a push constant
  oc.rec.dispatch(kernel, {src.reads(src_rows, width), dst.writes(rows, width), idx}, push, g.x, g.y, 1, name);
}

void add(OpContext& oc, vk::BufferRange a, vk::BufferRange b, vk::BufferRange out, uint32_t n) {
  if (n == 0) return;
  const vk::Kernel& kernel = oc.gpu.pipelines.get("add");
  uint32_t push = n;
  bool in_place = out.buffer == a.buffer && out.offset == a.offset;
  const Grid g = linear_grid(oc.gpu.ctx, n, 64, "add");
  oc.rec.dispatch(kernel, {vk::reads(a), vk::reads(b), in_place ? vk::updates(out) : vk::writes(out)}, push, g.x,
                  g.y, 1, "add");
}

namespace {

void bias_act(OpContext& oc, Act x, uint32_t rows, uint32_t width, const vk::BufferRange* bias, uint32_t period,
              bool gelu, const char* name) {
  if (rows == 0) return;
  if (bias && period == 0) fail("{}: a bias of 0 rows", name);
  const vk::Kernel& kernel = oc.gpu.pipelines.get("bias_act", {/*HAS_BIAS=*/bias ? 1u : 0u, /*GELU=*/gelu ? 1u : 0u});
  struct {
    uint32_t rows, width, offset, stride, period;
  } push{rows, width, x.offset, x.stride, bias ? period : 1};
  const Grid g = linear_grid(oc.gpu.ctx, uint64_t(rows) * width, 64, name);
  oc.rec.dispatch(kernel, {x.updates(rows, width), vk::reads(bias ? *bias : vk::BufferRange(oc.gpu.dummy))}, push,
                  g.x, g.y, 1, name);
}

}  // namespace

void add_bias(OpContext& oc, Act x, uint32_t rows, uint32_t width, vk::BufferRange bias, uint32_t period, bool gelu,
              const char* name) {
  bias_act(oc, x, rows, width, &bias, period, gelu, name);
}

void gelu(OpContext& oc, Act x, uint32_t rows, uint32_t width, const char* name) {
  bias_act(oc, x, rows, width, nullptr, 0, true, name);
}

void softmax(OpContext& oc, Act x, uint32_t rows, uint32_t n, float inv_temp) {
  if (rows == 0) return;
  const vk::Kernel& kernel = oc.gpu.pipelines.get("softmax", {/*WG=*/256});
  struct {
    uint32_t rows, n, offset, stride;
    float inv_temp;
  } push{rows, n, x.offset, x.stride, inv_temp};
  oc.rec.dispatch(kernel, {x.updates(rows, n)}, push, rows, 1, 1, "softmax");
}

void argmax(OpContext& oc, Act x, uint32_t rows, uint32_t n, IntVec ids, const vk::BufferRange* d2t) {
  if (rows == 0) return;
  const vk::Kernel& kernel = oc.gpu.pipelines.get("argmax", {/*WG=*/256, /*HAS_D2T=*/d2t ? 1u : 0u});
  struct {
    uint32_t rows, n, offset, stride, out_offset;
  } push{rows, n, x.offset, x.stride, ids.offset};
  vk::BufferRange map = d2t ? *d2t : vk::BufferRange(oc.gpu.dummy);
  vk::Arg out = vk::writes(ids.range.sub(uint64_t(ids.offset) * 4, uint64_t(rows) * 4));
  out.bind = ids.range;
  oc.rec.dispatch(kernel, {x.reads(rows, n), vk::reads(map), out}, push, rows, 1, 1, "argmax");
}

}  // namespace eaglevk::ops
