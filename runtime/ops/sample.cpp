#include <eaglevk/error.h>

#include "runtime/ops/ops.h"

namespace eaglevk::ops {

uint32_t sample_workgroup(uint32_t n) { return n <= 16384 ? 64 : 256; }

void sample(OpContext& oc, Act logits, uint32_t rows, uint32_t n, const IntVec* drafts, IntVec ids, IntVec accept,
            const SampleParams& s, AcceptRule rule, const DraftDistribution* dist, uint32_t stream,
            const IntVec* positions) {
  if (rows == 0) return;
  if (!s.row_params && (s.temperature < 0 || s.top_p <= 0 || s.top_p > 1))
    fail("sampling: temperature {} / top-p {} out of range", s.temperature, s.top_p);
  if (s.row_index && !s.row_params) fail("sampling: a row index without per-row settings");
  const uint32_t mode = dist ? uint32_t(dist->mode) : 0u;
  if (dist && dist->mode == DraftDistribution::Mode::Draw && n != dist->width)
    fail("sampling: draft draws take rows of the draft vocabulary ({} wide, not {})", dist->width, n);
  const vk::Kernel& kernel =
      oc.gpu.pipelines.get("sample", {/*RULE=*/uint32_t(rule), /*MODE=*/mode, /*WG=*/sample_workgroup(n)});
  if (ids.offset != accept.offset) fail("sampling: ids and accept flags must share their offset");
  struct {
    uint32_t rows, n, offset, stride;
    float inv_temp;
    uint32_t top_k;
    float top_p;
    uint32_t seed_lo, seed_hi, pos0, draft_offset, has_draft, out_offset, stream, q_width, has_d2t, has_positions,
        positions_offset, has_row_params, row_params_offset, has_row_index, row_index_offset;
  } push{rows,
         n,
         logits.offset,
         logits.stride,
         s.temperature > 0 ? 1.0f / s.temperature : 0.0f,
         s.top_k,
         s.top_p,
         uint32_t(s.seed),
         uint32_t(s.seed >> 32),
         s.first_position,
         drafts ? drafts->offset : 0,
         drafts ? 1u : 0u,
         ids.offset,
         stream,
         dist ? dist->width : 0u,
         dist && dist->d2t ? 1u : 0u,
         positions ? 1u : 0u,
         positions ? positions->offset : 0u,
         s.row_params ? 1u : 0u,
         s.row_params ? s.row_params->offset : 0u,
         s.row_index ? 1u : 0u,
         s.row_index ? s.row_index->offset : 0u};
  vk::BufferRange draft_range = drafts ? drafts->range : vk::BufferRange(oc.gpu.dummy);
  vk::Arg out_ids = vk::writes(ids.range.sub(uint64_t(ids.offset) * 4, uint64_t(rows) * 4));
  out_ids.bind = ids.range;
  vk::Arg out_accept = vk::writes(accept.range.sub(uint64_t(accept.offset) * 4, uint64_t(rows) * 4));
  out_accept.bind = accept.range;
  vk::BufferRange dummy(oc.gpu.dummy);
  // Draw writes q rows from q_row on (the kernel's row 0 lands there); Verify reads them all.
  // Without a distribution the binding holds the dummy buffer, declared written: the shader's
  // q binding is writable, so the validation layer counts it a write and wants it ordered
  // after the reads of the dummy before it (the optional bindings of other ops).
  vk::Arg q_arg = vk::writes(dummy);
  if (dist && dist->mode == DraftDistribution::Mode::Draw) {
    q_arg = vk::writes(dist->q.sub(uint64_t(dist->q_row) * dist->width * 4, uint64_t(rows) * dist->width * 4));
  } else if (dist) {
    q_arg = vk::reads(dist->q);
  }
  vk::BufferRange d2t = dist && dist->d2t ? *dist->d2t : dummy;
  vk::BufferRange t2d = dist && dist->mode == DraftDistribution::Mode::Verify ? dist->t2d : dummy;
  oc.rec.dispatch(kernel, {logits.reads(rows, n), vk::reads(draft_range), out_ids, out_accept, q_arg, vk::reads(d2t),
                           vk::reads(t2d), vk::reads(positions ? positions->range : dummy),
                           vk::reads(s.row_params ? s.row_params->range : dummy),
                           vk::reads(s.row_index ? s.row_index->range : dummy)},
                  push, rows, 1, 1, "sample");
}

}  // namespace eaglevk::ops
