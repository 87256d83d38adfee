#include <algorithm>

#include <eaglevk/error.h>

#include "runtime/ops/ops.h"
#include "shaders/shared_constants.h"

namespace eaglevk::ops {

void kv_write(OpContext& oc, Act k_rows, Act v_rows, uint32_t rows, IntVec positions, const KvLayer& kv) {
  if (rows == 0) return;
  if (k_rows.range.buffer != v_rows.range.buffer || k_rows.range.offset != v_rows.range.offset ||
      k_rows.stride != v_rows.stride)
    fail("kv_write: k and v rows must come from one activation buffer");
  if (kv.kv_dim % 2) fail("kv_write: kv_dim {} must be even", kv.kv_dim);
  const vk::Kernel& kernel = oc.gpu.pipelines.get("kv_write");
  struct {
    uint32_t rows, kv_dim, k_offset, v_offset, src_stride, pos_offset, capacity;
  } push{rows, kv.kv_dim, k_rows.offset, v_rows.offset, k_rows.stride, positions.offset, kv.capacity};
  // The whole source rows are declared read: k and v are two column ranges of them.
  vk::Arg src = k_rows.offset < v_rows.offset ? k_rows.reads(rows, v_rows.offset - k_rows.offset + kv.kv_dim)
                                              : v_rows.reads(rows, k_rows.offset - v_rows.offset + kv.kv_dim);
  const Grid g = linear_grid(oc.gpu.ctx, uint64_t(rows) * kv.kv_dim / 2, 64, "kv_write");
  oc.rec.dispatch(kernel, {src, vk::reads(positions.range), vk::writes(kv.k), vk::writes(kv.v)}, push, g.x, g.y, 1,
                  "kv_write");
}

uint32_t attention_max_keys(const vk::Context& ctx, uint32_t head_dim) {
  if (ctx.info.type != VK_PHYSICAL_DEVICE_TYPE_CPU) return UINT32_MAX;
  // Loop turns per block of 64 keys (attention.comp, 8 subgroups of 8): the key loop, the
  // q.k loop (head_dim / 8), the v loop per output dim of the thread (8 full turns and up to 7
  // more in the last block), two block reductions over the subgroups; with a margin. The
  // one-subgroup kernel of CPU devices takes one turn per block of 8 keys (its inner loops have
  // constant bounds and unroll), far fewer.
  const uint32_t dims_per_thread = (head_dim + 63) / 64;
  const uint32_t turns = 2 + head_dim / 8 + dims_per_thread * 9 + 16;
  return 65535 / turns * 64;
}

uint32_t attention_split_keys(const vk::Context& ctx) {
  // The profile as the Gpu on `ctx` has it (the same device and environment): callers that plan
  // memory hold only the context.
  return device_profile(ctx.info).attention_split;
}

uint64_t attention_split_row_bytes(uint32_t heads, uint32_t head_dim, uint32_t kv_len, uint32_t keys) {
  const uint64_t splits = (uint64_t(kv_len) + keys - 1) / keys;
  return uint64_t(heads) * splits * (head_dim + 2) * 4;
}

vk::Buffer make_attention_split_scratch(const vk::Context& ctx, uint32_t heads, uint32_t head_dim, uint32_t capacity,
                                        uint32_t max_rows, uint32_t keys, const char* name) {
  if (keys == 0) return {};
  const uint64_t row = attention_split_row_bytes(heads, head_dim, capacity, keys);
  const uint64_t rows = std::clamp<uint64_t>((16ull << 20) / row, 1, max_rows);
  return vk::Buffer(ctx, rows * row, vk::MemoryKind::Device, name);
}

namespace {

// The workgroup kernel's rows per workgroup and the quads of each key it stages at a time
// (attention.comp's ROWS and K_TILE).
struct WorkgroupTiles {
  uint32_t rows = 1, k_tile = 1;
};

// Bytes of the workgroup kernel's shared arrays (attention.comp: sq, sp, sslot, red, ktile).
uint64_t workgroup_shared_bytes(uint32_t pairs, uint32_t head_dim, uint32_t k_tile, uint32_t block) {
  return 4ull * pairs * head_dim + 4ull * pairs * block + 4ull * block + 4ull * pairs * 64 + 16ull * block * (k_tile + 1);
}

// Rows per workgroup: one for a single row, else as many as the pairs' limit and the device
// allow, whatever the batch (a smaller batch leaves pairs idle rather than compile a kernel per
// batch size: llvmpipe takes seconds for each); then the widest tile of keys that fits the
// shared memory. Rows share a workgroup only where their blocks of keys lie on one grid (chunks
// a multiple of the block; splits are) and their keys at their positions (no tree, no regions).
WorkgroupTiles workgroup_tiles(const Gpu& gpu, const AttentionParams& a, uint32_t group, uint32_t rows,
                               uint32_t block, bool one_subgroup) {
  // Tree rows share the committed keys' blocks on the workgroup kernel (attention.comp's ROWS);
  // the one-subgroup kernel passes the tree's cache rows by shuffles, one row's at a time.
  const bool shared_rows = rows > 1 && !(a.tree && one_subgroup) && !a.regions && a.chunk % block == 0;
  uint32_t most_rows = shared_rows ? std::min({gpu.attention_max_rows, uint32_t(ATTENTION_MAX_ROWS),
                                               uint32_t(ATTENTION_MAX_PAIRS) / group})
                                   : 1u;
  // One subgroup (CPU devices) holds each pair's q in every lane's registers: past 8 pairs of
  // 128 dims llvmpipe spills them (8B-shaped verify attention at depth 2048 took longer with
  // 16 than with 8), and its compile time grows with the unrolled pairs x dims (docs/perf.md).
  // No shared memory.
  if (one_subgroup) return {std::clamp(std::min(8u, 1024u / a.head_dim) / group, 1u, most_rows), 1};
  const uint64_t limit = gpu.ctx.info.features.max_compute_shared_memory;
  for (uint32_t r = most_rows; r >= 1; --r)
    for (uint32_t k_tile = a.head_dim / 8; k_tile >= 1; k_tile /= 2)
      if (workgroup_shared_bytes(r * group, a.head_dim, k_tile, block) <= limit) return {r, k_tile};
  fail("attention: {} query heads of width {} per workgroup need {} bytes of shared memory; the device has {}", group,
       a.head_dim, workgroup_shared_bytes(group, a.head_dim, 1, block), limit);
}

}  // namespace

void attention(OpContext& oc, Act q, const KvLayer& kv, IntVec positions, Act out, uint32_t rows,
               const AttentionParams& a) {
  if (rows == 0) return;
  if (a.head_dim > ATTENTION_MAX_HEAD_DIM || a.head_dim % 8)
    fail("attention: head_dim {} unsupported (a multiple of 8, at most {})", a.head_dim, ATTENTION_MAX_HEAD_DIM);
  const uint32_t keys = a.chunk ? std::min(a.chunk, a.kv_len) : a.kv_len;
  if (keys > attention_max_keys(oc.gpu.ctx, a.head_dim))
    fail("attention over {} keys: this device runs at most {} per row (llvmpipe stops shader loops after 65,535 "
         "iterations); use a shorter context",
         keys, attention_max_keys(oc.gpu.ctx, a.head_dim));
  if (a.kv_heads == 0 || a.heads % a.kv_heads) fail("attention: {} heads not a multiple of {} KV heads", a.heads, a.kv_heads);
  if (a.kv_len > kv.capacity) fail("attention: kv_len {} beyond the cache capacity {}", a.kv_len, kv.capacity);
  if (a.tree && a.regions) fail("attention: tree rows and sequence regions together");
  // CPU devices read q and the caches through texel buffers (the same words, the same bits).
  const MatvecShape shape = matvec_shape(oc.gpu);
  const bool texel = shape.texel_loads && q.texel_aligned() &&
                     vk::texel_view_possible(kv.k, VK_FORMAT_R32G32B32A32_UINT) &&
                     vk::texel_view_possible(kv.v, VK_FORMAT_R32_UINT);
  // One subgroup where the shape asks for it and it is the device's fixed subgroup size.
  const auto& f = oc.gpu.ctx.info.features;
  const bool one_subgroup = shape.attention_workgroup == f.subgroup_size &&
                            f.min_subgroup_size == f.max_subgroup_size && f.subgroup_shuffle &&
                            a.head_dim % shape.attention_workgroup == 0;
  const uint32_t workgroup = one_subgroup ? shape.attention_workgroup : 64;
  const uint32_t qscale_mode = a.qscale ? 1u : a.temperature_tuning ? 2u : 0u;
  // The query heads of one KV head share a workgroup (their keys and values loaded once, the
  // block reductions' barriers paid once); more than fit are served one head per workgroup.
  const uint32_t per_kv_head = a.heads / a.kv_heads;
  const uint32_t group = per_kv_head <= std::min(oc.gpu.attention_max_group, 8u) ? per_kv_head : 1;
  // Split where the keys span more than one split; one split gives the unsplit kernel's bits.
  const uint32_t split_keys = a.split ? a.split->keys : 0;
  const uint32_t splits = split_keys ? (a.kv_len + split_keys - 1) / split_keys : 1;
  const bool split = splits > 1;
  if (split && (split_keys % workgroup || splits > oc.gpu.ctx.max_workgroups[2]))
    fail("attention: {} keys per split over {} keys (a multiple of {}, at most {} splits)", split_keys, a.kv_len,
         workgroup, oc.gpu.ctx.max_workgroups[2]);
  const WorkgroupTiles tiles = workgroup_tiles(oc.gpu, a, group, rows, workgroup, one_subgroup);
  const vk::Kernel& kernel =
      oc.gpu.pipelines.get(texel ? "attention_texel" : "attention",
                           {/*WG=*/workgroup, /*TREE=*/a.tree ? 1u : 0u, /*QSCALE=*/qscale_mode,
                            /*REGIONS=*/a.regions ? 1u : 0u, /*GROUP=*/group, /*HEAD_DIM=*/a.head_dim,
                            /*ONE_SUBGROUP=*/one_subgroup ? 1u : 0u, /*SPLIT=*/split ? split_keys : 0u,
                            /*ROWS=*/tiles.rows, /*K_TILE=*/tiles.k_tile});
  if (a.qscale && a.temperature_tuning) fail("attention: a query-scale buffer and temperature tuning together");
  struct {
    uint32_t rows, heads, kv_heads, head_dim, q_offset, q_stride, out_offset, out_stride, pos_offset, kv_len, chunk,
        path_stride;
    float scale, floor_scale, attn_scale;
    uint32_t path_base, path_offset;
    int32_t path_base_slot;
    uint32_t row0, row_limit, splits;
  } push{rows,
         a.heads,
         a.kv_heads,
         a.head_dim,
         q.offset,
         q.stride,
         out.offset,
         out.stride,
         positions.offset,
         a.kv_len,
         a.chunk,
         a.tree ? a.tree->stride : 0,
         a.scale,
         a.floor_scale,
         a.attn_scale,
         a.tree ? a.tree->base : 0,
         a.tree ? a.tree->offset : a.regions ? a.regions->offset : 0,
         a.tree ? a.tree->base_slot : -1,
         0,
         rows,
         split ? splits : 0};
  vk::BufferRange path = a.tree ? a.tree->table : a.regions ? a.regions->range : vk::BufferRange(oc.gpu.dummy);
  vk::BufferRange qscale = a.qscale ? *a.qscale : vk::BufferRange(oc.gpu.dummy);
  uint32_t width = a.heads * a.head_dim;
  if (!split) {
    oc.rec.dispatch(kernel,
                    {q.reads(rows, width), vk::reads(kv.k), vk::reads(kv.v), vk::reads(positions.range),
                     vk::reads(path), vk::reads(qscale), out.writes(rows, width)},
                    push, (rows + tiles.rows - 1) / tiles.rows, a.heads / group, 1, "attention");
    return;
  }
  // Split: the partial states of as many rows as the scratch holds, then their merge.
  const uint64_t row_bytes = attention_split_row_bytes(a.heads, a.head_dim, a.kv_len, split_keys);
  const uint32_t chunk = uint32_t(std::min<uint64_t>(a.split->scratch.bytes / row_bytes, rows));
  if (chunk == 0 || row_bytes > oc.gpu.ctx.max_binding_range)
    fail("attention: one row's split states take {} bytes, more than the scratch ({} bytes) or one binding ({}) holds; "
         "use a shorter context or larger splits (EAGLEVK_PROFILE_OVERRIDE=attention.split=N)",
         row_bytes, a.split->scratch.bytes, oc.gpu.ctx.max_binding_range);
  const vk::Kernel& combine = oc.gpu.pipelines.get("attention_combine", {64u});
  for (uint32_t r0 = 0; r0 < rows; r0 += chunk) {
    const uint32_t n = std::min(chunk, rows - r0);
    const vk::BufferRange partials = a.split->scratch.sub(0, n * row_bytes);
    push.row0 = r0;
    push.row_limit = r0 + n;
    push.out_offset = 0;
    oc.rec.dispatch(kernel,
                    {q.reads(rows, width), vk::reads(kv.k), vk::reads(kv.v), vk::reads(positions.range),
                     vk::reads(path), vk::reads(qscale), vk::writes(partials)},
                    push, (n + tiles.rows - 1) / tiles.rows, a.heads / group, splits, "attention_split");
    struct {
      uint32_t heads, head_dim, splits, part_offset, out_offset, out_stride, row0;
    } merge{a.heads, a.head_dim, splits, 0, out.offset, out.stride, r0};
    oc.rec.dispatch(combine, {vk::reads(partials), out.row(r0).writes(n, width)}, merge, n, a.heads, 1,
                    "attention_combine");
  }
}

void vision_attention(OpContext& oc, Act qkv, Act out, uint32_t rows, uint32_t seq, uint32_t heads, uint32_t head_dim,
                      float scale) {
  if (rows == 0) return;
  if (head_dim > ATTENTION_MAX_HEAD_DIM || head_dim % 8)
    fail("vision attention: head_dim {} unsupported (a multiple of 8, at most {})", head_dim, ATTENTION_MAX_HEAD_DIM);
  if (seq == 0 || seq > VISION_MAX_SEQ)
    fail("vision attention: {} rows per tile (at most {})", seq, VISION_MAX_SEQ);
  if (rows % seq) fail("vision attention: {} rows are not whole tiles of {}", rows, seq);
  const vk::Context& ctx = oc.gpu.ctx;
  if (rows > ctx.max_workgroups[0] || heads > ctx.max_workgroups[1])
    fail("vision attention: {} rows x {} heads exceed the device's workgroup grid", rows, heads);
  const vk::Kernel& kernel = oc.gpu.pipelines.get("vision_attention");
  struct {
    uint32_t rows, seq, heads, head_dim, in_offset, in_stride, out_offset, out_stride;
    float scale;
  } push{rows, seq, heads, head_dim, qkv.offset, qkv.stride, out.offset, out.stride, scale};
  const uint32_t width = heads * head_dim;
  oc.rec.dispatch(kernel, {qkv.reads(rows, 3 * width), out.writes(rows, width)}, push, rows, heads, 1,
                  "vision_attention");
}

}  // namespace eaglevk::ops
