#include "runtime/ops/tree.h"

#include <eaglevk/error.h>

namespace eaglevk::ops {
namespace {

struct TreePush {
  uint32_t k, levels, nodes, pool, step, i_base, i_root;
  uint32_t f_topk, f_pool, f_front, f_node;
  uint32_t i_topk, i_pool_tok, i_pool_parent, i_front_gid, i_step_ids, i_step_gather, i_step_path;
  uint32_t i_tok, i_pos, i_path, i_parent, i_depth;
};

TreePush make_push(const TreeLayout& l) {
  return TreePush{l.k,          l.levels,          l.nodes,           l.pool(),      0,
                  l.i_base(),   l.i_root(),        l.f_topk(),        l.f_pool(),    l.f_front(),
                  l.f_node(),   l.i_topk(),   l.i_pool_tok(),    l.i_pool_parent(), l.i_front_gid(), l.i_step_ids(),
                  l.i_step_gather(), l.i_step_path(), l.i_tok(),     l.i_pos(),     l.i_path(),
                  l.i_parent(), l.i_depth()};
}

void build(OpContext& oc, uint32_t mode, const TreeBuffers& b, const TreePush& push, const char* name) {
  const vk::Kernel& kernel = oc.gpu.pipelines.get("tree_build", {/*WG=*/256, mode});
  oc.rec.dispatch(kernel, {vk::updates(b.f), vk::updates(b.i)}, push, 1, 1, 1, name);
}

}  // namespace

void check_tree_shape(uint32_t k, uint32_t levels, uint32_t nodes) {
  if (k == 0 || k > kTreeMaxTopK)
    fail_setting(Setting::TreeTopK, "tree top-k {} is out of range (1..{})", k, kTreeMaxTopK);
  if (levels == 0 || levels > kTreeMaxLevels)
    fail_setting(Setting::TreeSteps, "tree steps {} is out of range (1..{})", levels, kTreeMaxLevels);
  if (nodes < 2 || nodes > kTreeMaxNodes)
    fail_setting(Setting::TreeDraftTokens, "tree draft tokens {} is out of range (2..{}, the root included)", nodes,
                 kTreeMaxNodes);
  if (nodes < levels + 1)
    fail_setting(Setting::TreeDraftTokens,
                 "tree draft tokens {} cannot reach {} draft levels: it needs at least the steps + 1 = {}", nodes,
                 levels, levels + 1);
  if (k > nodes)
    fail_setting(Setting::TreeTopK, "tree top-k {} is larger than the tree's {} draft tokens", k, nodes);
  const uint64_t pool = k + uint64_t(levels - 1) * k * k;
  if (pool > kTreeMaxPool)
    fail("a tree of {} levels with top-k {} has {} candidates; at most {} are supported", levels, k, pool,
         kTreeMaxPool);
  if (nodes - 1 > pool)
    fail_setting(Setting::TreeDraftTokens, "tree draft tokens {} exceed the {} candidates the tree drafts, plus the root",
                 nodes, pool);
}

void tree_topk(OpContext& oc, Act logits, uint32_t rows, uint32_t n, uint32_t k, const vk::BufferRange* d2t,
               vk::BufferRange lp, uint32_t lp_offset, vk::BufferRange tok, uint32_t tok_offset) {
  if (rows == 0) return;
  if (k == 0 || k > kTreeMaxTopK || k > n) fail("tree_topk: top-{} of {} entries (at most {})", k, n, kTreeMaxTopK);
  const vk::Kernel& kernel = oc.gpu.pipelines.get("tree_topk", {/*WG=*/256, /*HAS_D2T=*/d2t ? 1u : 0u});
  struct {
    uint32_t rows, n, offset, stride, k, lp_offset, tok_offset;
  } push{rows, n, logits.offset, logits.stride, k, lp_offset, tok_offset};
  vk::BufferRange map = d2t ? *d2t : vk::BufferRange(oc.gpu.dummy);
  vk::Arg lp_arg = vk::writes(lp.sub(uint64_t(lp_offset) * 4, uint64_t(rows) * k * 4));
  lp_arg.bind = lp;
  vk::Arg tok_arg = vk::writes(tok.sub(uint64_t(tok_offset) * 4, uint64_t(rows) * k * 4));
  tok_arg.bind = tok;
  oc.rec.dispatch(kernel, {logits.reads(rows, n), vk::reads(map), lp_arg, tok_arg}, push, rows, 1, 1, "tree_topk");
}

void tree_level_one(OpContext& oc, const TreeLayout& layout, const TreeBuffers& b) {
  build(oc, 0, b, make_push(layout), "tree_level_one");
}

void tree_expand(OpContext& oc, const TreeLayout& layout, const TreeBuffers& b, uint32_t step) {
  TreePush push = make_push(layout);
  push.step = step;
  build(oc, 1, b, push, "tree_expand");
}

void tree_select(OpContext& oc, const TreeLayout& layout, const TreeBuffers& b, uint32_t pool) {
  TreePush push = make_push(layout);
  push.pool = pool;
  build(oc, 2, b, push, "tree_select");
}

void row_compact(OpContext& oc, IntVec path, uint32_t max_len, vk::BufferRange a, const vk::BufferRange* b,
                 uint32_t row_words, const char* name) {
  const vk::Kernel& kernel = oc.gpu.pipelines.get("row_compact", {/*WG=*/64, /*BOTH=*/b ? 1u : 0u, /*USE_BASE=*/b ? 1u : 0u});
  struct {
    uint32_t offset, words;
  } push{path.offset, row_words};
  vk::Arg path_arg = vk::reads(path.range.sub(uint64_t(path.offset) * 4, uint64_t(max_len + 2) * 4));
  path_arg.bind = path.range;
  // Without b, binding 2 is `a` again and never touched.
  oc.rec.dispatch(kernel, {path_arg, vk::updates(a), b ? vk::updates(*b) : vk::unused(a)}, push, 1, 1, 1, name);
}

}  // namespace eaglevk::ops
