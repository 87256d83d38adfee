#include "support/rope_fold_check.h"

#include <cmath>

#include <fmt/format.h>

#include "support/reference.h"

namespace eaglevk::testing {

namespace {

// The norm workgroup each vendor configuration's device takes (ops::norm_workgroup_for): lavapipe
// 8, GPUs 512, which their products' workgroups, split ones too, divide and play the subgroups of.
uint32_t norm_workgroup_for_config(size_t i) { return i < 2 ? 8u : 512u; }

}  // namespace

void expect_rope_fold_gives_the_bits(ops::OpContext& oc, const std::vector<QkvPart>& parts, uint32_t k,
                                     uint32_t q_heads, uint32_t kv_heads, uint32_t head_dim,
                                     const std::vector<uint32_t>& row_counts,
                                     const std::vector<VendorMatvecShape>& configs, bool norm_fold,
                                     const std::vector<ops::RopePairing>& pairings) {
  const uint32_t capacity = 40, table_positions = 64, kv_dim = kv_heads * head_dim;
  const uint32_t width = q_heads * head_dim + 2 * kv_dim, stride = width + 5, x_stride = k + 4;
  uint32_t max_rows = 0;
  for (uint32_t r : row_counts) max_rows = std::max(max_rows, r);
  std::vector<float> inv(head_dim / 2);
  for (uint32_t j = 0; j < head_dim / 2; ++j) inv[j] = float(1.0 / std::pow(10000.0, 2.0 * j / head_dim));
  vk::Buffer table = device_buffer(ops::rope_table(inv, table_positions), "rope table");
  // Distinct slots (13 is prime to the capacity), so no two rows write one cache row.
  std::vector<int32_t> positions{-7}, slots{-7};
  for (uint32_t r = 0; r < max_rows; ++r) {
    positions.push_back(r == 2 ? int32_t(table_positions) : int32_t((r * 7 + 3) % table_positions));
    slots.push_back(r == 4 ? int32_t(capacity) : int32_t((r * 13 + 5) % capacity));
  }
  vk::Buffer pbuf = device_buffer(positions, "positions"), sbuf = device_buffer(slots, "slots");
  vk::Buffer xbuf = device_buffer(random_floats(size_t(max_rows) * x_stride, 71, -2, 2), "x");
  vk::Buffer nbuf = device_buffer(random_floats(k, 72, 0.5, 1.5), "norm weight");
  const std::vector<float> qkv_init = random_floats(size_t(max_rows) * stride + 3, 73);
  const std::vector<uint32_t> cache_init(size_t(capacity) * kv_dim / 2, 0x7e007e00u);
  const ops::Act x(xbuf, x_stride);
  const ops::NormFold norm{vk::BufferRange(nbuf), 1e-5f};

  const bool device_fold = gpu().fold_norms;
  const uint32_t device_norm_wg = gpu().norm_workgroup;
  gpu().fold_norms = norm_fold;
  for (size_t c = 0; c < configs.size(); ++c) {
    MatvecShapeScope scope(configs[c].shape);
    gpu().norm_workgroup = norm_fold ? norm_workgroup_for_config(c) : device_norm_wg;
    for (ops::RopePairing pairing : pairings)
      for (uint32_t rows : row_counts) {
        SCOPED_TRACE(fmt::format("{}, pairing {}, {} rows{}", configs[c].name, int(pairing), rows,
                                 norm_fold ? ", norm folded" : ""));
        std::vector<float> qkv_out[2];
        std::vector<uint32_t> k_out[2], v_out[2];
        for (int folded = 0; folded < 2; ++folded) {
          vk::Buffer qkv_buf = device_buffer(qkv_init, "qkv");
          vk::Buffer k_cache = device_buffer(cache_init, "k cache"), v_cache = device_buffer(cache_init, "v cache");
          vk::Buffer normed(gpu().ctx, uint64_t(rows) * k * 4, vk::MemoryKind::Device, "normed x");
          const ops::Act qkv(qkv_buf, stride, 3);
          const ops::RopeKv rope{q_heads,
                                 head_dim,
                                 ops::IntVec{pbuf, 1},
                                 table,
                                 table_positions,
                                 pairing,
                                 ops::IntVec{sbuf, 1},
                                 ops::KvLayer{vk::BufferRange(k_cache), vk::BufferRange(v_cache), capacity, kv_dim}};
          oc.rec.begin();
          if (folded) {
            for (const QkvPart& part : parts) {
              EXPECT_TRUE(ops::rope_folds(gpu(), part.w, part.first, rows, ops::MatmulPath::Vector, rope));
              if (norm_fold) {
                EXPECT_TRUE(ops::norm_folds(gpu(), part.w, rows, ops::MatmulPath::Vector));
              }
              ops::matmul_rope_kv(oc, x, part.w, part.first, qkv, rows, ops::MatmulPath::Vector, "qkv", rope,
                                  norm_fold ? &norm : nullptr);
            }
          } else {
            const ops::Act in = norm_fold ? ops::Act(normed, k) : x;
            if (norm_fold) ops::rms_norm(oc, x, &norm.weight, in, rows, k, norm.eps);
            for (const QkvPart& part : parts)
              ops::matmul(oc, in, part.w, qkv.cols(part.first), rows, false, ops::MatmulPath::Vector, "qkv");
            ops::rope_kv_write(oc, qkv, rows, rope);
          }
          oc.rec.submit_and_wait();
          qkv_out[folded] = read_back<float>(qkv_buf, qkv_init.size());
          k_out[folded] = read_back<uint32_t>(k_cache, cache_init.size());
          v_out[folded] = read_back<uint32_t>(v_cache, cache_init.size());
        }
        EXPECT_TRUE(bitwise_equal(qkv_out[1], qkv_out[0])) << "qkv rows";
        EXPECT_EQ(k_out[1], k_out[0]) << "K cache";
        EXPECT_EQ(v_out[1], v_out[0]) << "V cache";
        EXPECT_NE(k_out[0][5 * kv_dim / 2], cache_init[0]) << "row 0's slot 5 was not written";
      }
  }
  gpu().fold_norms = device_fold;
  gpu().norm_workgroup = device_norm_wg;
}

}  // namespace eaglevk::testing
