#pragma once
// Device-side construction of an EAGLE-2 dynamic speculation tree (shaders/tree_topk.comp,
// shaders/tree_build.comp): per-row top-K by log-probability, expansion of the frontier, and
// the final selection of the verified nodes. The host only uploads positions and reads the
// finished tree back with the verify results.
#include <cstdint>

#include "runtime/ops/ops.h"

namespace eaglevk::ops {

// Limits of the kernels: children per node (the per-thread top-K list), verified nodes (one
// workgroup, shared arrays), draft levels (path entries staged in shared memory) and the
// candidate pool K + (S - 1) K^2 (ranked by one workgroup).
constexpr uint32_t kTreeMaxTopK = 16;
constexpr uint32_t kTreeMaxNodes = 64;
constexpr uint32_t kTreeMaxLevels = 16;
constexpr uint32_t kTreeMaxPool = 4096;

// Where each array of the tree lives in its two buffers (elements). K = top-k, S = levels
// (draft levels: 1 from the catch-up row + S - 1 expansions), M = verified nodes with the root.
struct TreeLayout {
  uint32_t k = 0, levels = 0, nodes = 0;
  uint32_t pool() const { return k + (levels - 1) * k * k; }
  // float buffer
  uint32_t f_topk() const { return 0; }                         // [K rows][K]
  uint32_t f_pool() const { return k * k; }                     // [pool] cumulative scores
  uint32_t f_front() const { return f_pool() + pool(); }        // [K]
  uint32_t f_node() const { return f_front() + k; }             // verified nodes: scores (root 0)
  uint32_t f_size() const { return f_node() + nodes; }
  // int buffer
  uint32_t i_topk() const { return 0; }                         // [K rows][K] target tokens
  uint32_t i_pool_tok() const { return k * k; }
  uint32_t i_pool_parent() const { return i_pool_tok() + pool(); }
  uint32_t i_front_gid() const { return i_pool_parent() + pool(); }
  uint32_t i_step_ids() const { return i_front_gid() + k; }     // next draft rows: tokens
  uint32_t i_step_gather() const { return i_step_ids() + k; }   // u-history row of the parent
  uint32_t i_step_path() const { return i_step_gather() + k; }  // [K][S] scratch rows
  uint32_t i_tok() const { return i_step_path() + k * levels; } // verified nodes: tokens
  uint32_t i_pos() const { return i_tok() + nodes; }            // positions P + depth
  uint32_t i_path() const { return i_pos() + nodes; }           // [M][S + 1] ancestor nodes
  uint32_t i_parent() const { return i_path() + nodes * (levels + 1); }
  uint32_t i_depth() const { return i_parent() + nodes; }
  uint32_t i_base() const { return i_depth() + nodes; }         // P, the root's position
  uint32_t i_root() const { return i_base() + 1; }              // the root token
  uint32_t i_size() const { return i_root() + 1; }
};

// Fails with a message naming the limit unless the tree is within the kernels' limits.
void check_tree_shape(uint32_t k, uint32_t levels, uint32_t nodes);

// Top-`k` log-probabilities of each of `rows` rows of draft logits (n wide) into
// lp[lp_offset + r k + j] and their tokens (mapped by d2t when given) into tok[...].
void tree_topk(OpContext& oc, Act logits, uint32_t rows, uint32_t n, uint32_t k, const vk::BufferRange* d2t,
               vk::BufferRange lp, uint32_t lp_offset, vk::BufferRange tok, uint32_t tok_offset);

struct TreeBuffers {
  vk::BufferRange f, i;  // float and int32 arrays of TreeLayout
};

// Level 1 from the top-K of the catch-up row (at f_topk / i_topk).
void tree_level_one(OpContext& oc, const TreeLayout& layout, const TreeBuffers& b);
// Expansion `step` (0-based) from the frontier rows' top-K.
void tree_expand(OpContext& oc, const TreeLayout& layout, const TreeBuffers& b, uint32_t step);
// The best `layout.nodes - 1` candidates of the first `pool` into verified nodes 1.., the root
// token (the int array's i_root) at its position (i_base) as node 0. Both are read on the
// device, so that a recorded round serves rounds at other positions.
void tree_select(OpContext& oc, const TreeLayout& layout, const TreeBuffers& b, uint32_t pool);

// The accepted path of the last tree to consecutive rows (shaders/row_compact.comp), read on the
// device from `path` = [len, base, path[0..len)]: row base + path[i] -> base + i of both caches
// (rows of `row_words` 32-bit words), or, without `b`, node row path[i] -> i of `a` alone (the
// taps, base ignored).
void row_compact(OpContext& oc, IntVec path, uint32_t max_len, vk::BufferRange a, const vk::BufferRange* b,
                 uint32_t row_words, const char* name);

}  // namespace eaglevk::ops
