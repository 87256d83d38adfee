#pragma once
// The check shared by ops_test (float weights) and ops_quant_test (block formats, a matrix of
// parts in two types as llama.cpp's Q4_K_M stores q | k and v): ops::matmul_rope_kv against its
// reference, the products then ops::rope_kv_write.
#include <cstdint>
#include <vector>

#include "runtime/ops/ops.h"
#include "support/gpu_fixture.h"

namespace eaglevk::testing {

// One part of a fused q | k | v matrix: its weights and the row column its first output makes.
struct QkvPart {
  ops::WeightMatrix w;
  uint32_t first = 0;
};

// For every configuration, each pairing (RopePairing::None: the cache writes alone) and each row count (more than MATVEC_MAX_ROWS runs the
// matrix-vector kernel in chunks): x [rows, k] through the parts with rope_kv_write's work
// folded in gives the qkv rows (at a padded stride and offset), the K cache and the V cache of
// the reference, bit for bit. Positions and slots start one element into their buffers; one
// row's position lies past the cos/sin table and another's slot past the cache (neither writes
// the caches; the first keeps q unrotated). With `norm_fold` the norm is folded as well (the
// reference: rms_norm, then the products), with each configuration's norm workgroup.
void expect_rope_fold_gives_the_bits(ops::OpContext& oc, const std::vector<QkvPart>& parts, uint32_t k,
                                     uint32_t q_heads, uint32_t kv_heads, uint32_t head_dim,
                                     const std::vector<uint32_t>& row_counts,
                                     const std::vector<VendorMatvecShape>& configs, bool norm_fold,
                                     const std::vector<ops::RopePairing>& pairings = {ops::RopePairing::RotateHalf,
                                                                                     ops::RopePairing::Interleaved});

}  // namespace eaglevk::testing
