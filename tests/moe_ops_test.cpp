// Llama-4 ops against CPU references: the router (top-k by logit, sigmoid score on the expert
// input; experts compared as sets), the indexed expert matmul for batches of 1 to 200 rows with
// random routing (each token alone giving the batch's bits on the per-row kernel), with the experts row-major, k-major (Hugging Face's fused layout,
// read in place) and split over two allocations (also under a lowered binding limit), attention temperature
// tuning across floor_scale, and the per-head QK norm.
#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "runtime/ops/ops.h"
#include "support/gpu_fixture.h"
#include "support/reference.h"

namespace eaglevk::testing {
namespace {

struct MoeCase {
  uint32_t rows, experts, k;
};

class MoeTest : public GpuTest, public ::testing::WithParamInterface<MoeCase> {};

// Reference: top-k experts (ties to the lower id), s = sigmoid(logit), and
// y = sum over chosen e of down_e(silu(gate_e(x s)) * up_e(x s)).
TEST_P(MoeTest, RoutingAndExpertsMatchReference) {
  const auto [T, E, K] = GetParam();
  const uint32_t H = 96, I = 40;
  auto logits = random_floats(size_t(T) * E, 1 + T, -3, 3);
  auto x = random_floats(size_t(T) * H, 2 + T);
  auto gate_up = round_through(random_floats(size_t(E) * 2 * I * H, 3, -0.3f, 0.3f), ops::WeightType::BF16);
  auto down = round_through(random_floats(size_t(E) * H * I, 4, -0.3f, 0.3f), ops::WeightType::BF16);
  auto residual = random_floats(size_t(T) * H, 5);

  // Hugging Face's fused layout [E, K, N] (k-major), read in place by the kernel.
  auto k_major = [](const std::vector<float>& w, uint32_t E, uint32_t N, uint32_t K) {
    std::vector<float> t(w.size());
    for (uint32_t e = 0; e < E; ++e)
      for (uint32_t n = 0; n < N; ++n)
        for (uint32_t k = 0; k < K; ++k) t[(size_t(e) * K + k) * N + n] = w[(size_t(e) * N + n) * K + k];
    return t;
  };
  // Experts split over two allocations: the first half in one buffer, the rest in another.
  auto split = [](const std::vector<float>& w, uint32_t E) {
    size_t per = w.size() / E, half = (E + 1) / 2;
    return std::pair{std::vector<float>(w.begin(), w.begin() + half * per), std::vector<float>(w.begin() + half * per, w.end())};
  };
  vk::Buffer lb = device_buffer(logits, "router logits"), xb = device_buffer(x, "x"),
             gub = device_buffer(to_bf16(gate_up), "experts gate_up"), db = device_buffer(to_bf16(down), "experts down"),
             gub_t = device_buffer(to_bf16(k_major(gate_up, E, 2 * I, H)), "experts gate_up k-major"),
             db_t = device_buffer(to_bf16(k_major(down, E, H, I)), "experts down k-major"),
             gub_a = device_buffer(to_bf16(split(k_major(gate_up, E, 2 * I, H), E).first), "gate_up group 0"),
             gub_b = device_buffer(to_bf16(split(k_major(gate_up, E, 2 * I, H), E).second), "gate_up group 1"),
             db_a = device_buffer(to_bf16(split(down, E).first), "down group 0"),
             db_b = device_buffer(to_bf16(split(down, E).second), "down group 1"),
             yb = device_buffer(residual, "y"), yb_alone = device_buffer(residual, "y, token by token"), ids(gpu().ctx, T * K * 4, vk::MemoryKind::Device, "ids"),
             xs(gpu().ctx, T * K * H * 4, vk::MemoryKind::Device, "xs"),
             gu(gpu().ctx, T * K * 2 * I * 4, vk::MemoryKind::Device, "gu"),
             act(gpu().ctx, T * K * I * 4, vk::MemoryKind::Device, "act");
  struct Layout {
    const char* name;
    ops::ExpertWeights gate_up, down;
  };
  const ops::WeightType bf16 = ops::WeightType::BF16;
  const uint32_t half = (E + 1) / 2;
  std::vector<Layout> layouts = {
      {"row-major", {gub, bf16, E, 2 * I, H, false, {}, 0}, {db, bf16, E, H, I, false, {}, 0}},
      {"k-major", {gub_t, bf16, E, 2 * I, H, true, {}, 0}, {db_t, bf16, E, H, I, true, {}, 0}},
      {"two allocations", {{}, bf16, E, 2 * I, H, true, {gub_a, gub_b}, half}, {{}, bf16, E, H, I, false, {db_a, db_b}, half}},
  };

  // The whole expert tensor in one binding; then, for the smaller batches, a binding limit
  // just above the activations (at least 4 KiB) that splits the experts into one dispatch per
  // expert and chunk of rows (of k when k-major, accumulated).
  std::vector<uint64_t> limits = {0};
  if (T * K <= 40) limits.push_back(std::max<uint64_t>(4096, uint64_t(T) * K * std::max(H, 2 * I) * 4 + 64));
  // The products per row (matvec_id), and grouped by expert as prefills run them (a GEMM per
  // expert over its listed rows: more than 8 rows), on the scalar GEMM's two variants and, where
  // the build and device have them, on cooperative matrices.
  vk::Buffer lists(gpu().ctx, ops::moe_row_lists_bytes(T * K, E), vk::MemoryKind::Device, "row lists");
  struct Mode {
    std::string name;
    VendorMatvecShape config;
    bool grouped, coopmat;
  };
  std::vector<Mode> modes;
  const std::vector<VendorMatvecShape> configs = vendor_matvec_shapes();
  for (const VendorMatvecShape& config : configs) modes.push_back({config.name, config, false, false});
  for (int c = 0; c < 2; ++c) modes.push_back({std::string("grouped ") + configs[c].name, configs[c], true, false});
  if (ops::coopmat_unavailable(gpu().ctx).empty()) modes.push_back({"grouped coopmat", configs[1], true, true});
  // Outputs by layout, limit and mode: texel loads must give the storage-buffer bits.
  std::map<std::tuple<std::string, uint64_t, std::string>, std::vector<float>> outputs;
  for (const Mode& mode : modes)
  for (const Layout& layout : layouts)
  for (uint64_t limit : limits) {
    SCOPED_TRACE(fmt::format("{}, binding limit {}, {}", layout.name, limit, mode.name));
    MatvecShapeScope scope(mode.config.shape);
    CoopmatScope coopmat(mode.coopmat);
    const ops::IntVec row_lists{lists};
    const ops::IntVec* grouped = mode.grouped ? &row_lists : nullptr;
    const ops::ExpertWeights &wgu = layout.gate_up, &wdn = layout.down;
    const uint64_t saved = gpu().ctx.max_binding_range;
    auto set_limit = [&](bool lowered) { gpu().ctx.max_binding_range = lowered && limit ? limit : saved; };
    vk::upload(gpu().ctx, yb, residual.data(), residual.size() * 4);
    vk::Recorder rec(gpu().ctx);
    ops::OpContext oc{gpu(), rec};
    rec.begin();
    ops::moe_route(oc, ops::Act(lb, E), ops::Act(xb, H), T, E, K, H, ops::IntVec{ids}, ops::Act(xs, H));
    if (grouped) ops::group_rows_by_expert(oc, ops::IntVec{ids}, T * K, E, row_lists);
    set_limit(true);
    ops::Act g(gu, 2 * I);
    ops::matmul_id_swiglu(oc, ops::Act(xs, H), wgu, ops::IntVec{ids}, g, ops::Act(act, I), T * K, "gate_up", grouped);
    for (uint32_t s = 0; s < K; ++s)
      ops::matmul_id(oc, ops::Act(act, I), wdn, ops::IntVec{ids}, ops::Act(yb, H), T * K, K, s, true, "down", grouped);
    set_limit(false);
    rec.submit_and_wait();

    auto got_ids = read_back<int32_t>(ids, T * K);
    auto got_xs = read_back<float>(xs, size_t(T) * K * H);
    std::vector<double> want(residual.begin(), residual.end());
    for (uint32_t t = 0; t < T; ++t) {
      std::vector<uint32_t> order(E);
      for (uint32_t e = 0; e < E; ++e) order[e] = e;
      std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return logits[t * E + a] > logits[t * E + b]; });
      std::set<int32_t> want_set(order.begin(), order.begin() + K), got_set(got_ids.begin() + t * K, got_ids.begin() + (t + 1) * K);
      ASSERT_EQ(got_set, want_set) << "row " << t;
      for (uint32_t s = 0; s < K; ++s) {
        uint32_t e = uint32_t(got_ids[t * K + s]);
        double score = 1.0 / (1.0 + std::exp(-double(logits[t * E + e])));
        for (uint32_t h = 0; h < H; h += 17)
          ASSERT_NEAR(got_xs[(size_t(t) * K + s) * H + h], x[t * H + h] * score, 1e-6) << "row " << t << " slot " << s;
        // The expert on the scaled input, in double.
        std::vector<double> a(I);
        for (uint32_t i = 0; i < I; ++i) {
          double gsum = 0, usum = 0;
          for (uint32_t h = 0; h < H; ++h) {
            double in = double(x[t * H + h]) * score;
            gsum += in * gate_up[(size_t(e) * 2 * I + i) * H + h];
            usum += in * gate_up[(size_t(e) * 2 * I + I + i) * H + h];
          }
          a[i] = gsum / (1 + std::exp(-gsum)) * usum;
        }
        for (uint32_t h = 0; h < H; ++h) {
          double d = 0;
          for (uint32_t i = 0; i < I; ++i) d += a[i] * down[(size_t(e) * H + h) * I + i];
          want[t * H + h] += d;
        }
      }
    }
    outputs[{layout.name, limit, mode.name}] = read_back<float>(yb, size_t(T) * H);
    EXPECT_TRUE(all_close(outputs[{layout.name, limit, mode.name}], want, 1e-4, 1e-4));
    // Batch invariance of the per-row kernel (decode steps and verify passes): each token alone
    // gets the bits it got among the others, whichever rows shared its experts' workgroups; and
    // gate/up then swiglu (alone) gives the bits of the two folded into one dispatch (the batch).
    if (mode.grouped || T > 32) continue;
    vk::upload(gpu().ctx, yb_alone, residual.data(), residual.size() * 4);
    rec.begin();
    for (uint32_t t = 0; t < T; ++t) {
      const ops::IntVec token_ids{ids, t * K};
      set_limit(true);
      ops::matmul_id(oc, ops::Act(xs, H).row(t * K), wgu, token_ids, ops::Act(gu, 2 * I).row(t * K), K, 1, 0, false,
                     "gate_up");
      set_limit(false);
      ops::swiglu(oc, g.row(t * K), g.cols(I).row(t * K), ops::Act(act, I).row(t * K), K, I);
      set_limit(true);
      for (uint32_t s = 0; s < K; ++s)
        ops::matmul_id(oc, ops::Act(act, I).row(t * K), wdn, token_ids, ops::Act(yb_alone, H).row(t), K, K, s, true,
                       "down");
      set_limit(false);
    }
    rec.submit_and_wait();
    EXPECT_TRUE(bitwise_equal(read_back<float>(yb_alone, size_t(T) * H), outputs[{layout.name, limit, mode.name}]))
        << "tokens alone, gate/up then swiglu, against the batch, folded";
  }
  for (const Layout& layout : layouts)
    for (uint64_t limit : limits)
      for (const char* kind : {"", "grouped "})
        EXPECT_TRUE(bitwise_equal(outputs.at({layout.name, limit, std::string(kind) + "lavapipe"}),
                                  outputs.at({layout.name, limit, std::string(kind) + "lavapipe_storage_buffers"})))
            << layout.name << ", binding limit " << limit << ", " << kind << "texel loads against storage buffers";
}

INSTANTIATE_TEST_SUITE_P(Batches, MoeTest,
                         ::testing::Values(MoeCase{1, 4, 1}, MoeCase{4, 4, 1}, MoeCase{9, 5, 1}, MoeCase{200, 4, 1},
                                           MoeCase{9, 5, 2}, MoeCase{13, 16, 3}, MoeCase{24, 2, 1}),
                         [](const auto& info) {
                           return fmt::format("rows{}_experts{}_top{}", info.param.rows, info.param.experts, info.param.k);
                         });

// NoPE layers scale q by 1 + attn_scale * log(floor((pos + 1) / floor_scale) + 1): a no-op
// below floor_scale - 1, growing past it.
TEST_F(GpuTest, AttentionTemperatureTuningPastFloorScale) {
  const uint32_t heads = 4, kv_heads = 2, hd = 32, kv_dim = kv_heads * hd, cap = 140;
  const float floor_scale = 32, attn_scale = 0.1f;
  std::vector<int32_t> pos = {0, 30, 31, 32, 63, 64, 95, 130};
  const uint32_t rows = uint32_t(pos.size());
  auto k = to_f16(random_floats(size_t(cap) * kv_dim, 11)), v = to_f16(random_floats(size_t(cap) * kv_dim, 12));
  auto q = random_floats(size_t(rows) * heads * hd, 13, -3, 3);
  vk::Buffer kb = device_buffer(k, "k"), vb = device_buffer(v, "v"), qb = device_buffer(q, "q"),
             pb = device_buffer(pos, "pos"), out(gpu().ctx, q.size() * 4, vk::MemoryKind::Device, "out");
  ops::KvLayer kv{kb, vb, cap, kv_dim};
  ops::AttentionParams params{heads, kv_heads, hd, cap, 0, 1.0f / std::sqrt(float(hd))};
  params.temperature_tuning = true;
  params.floor_scale = floor_scale;
  params.attn_scale = attn_scale;
  vk::Recorder rec(gpu().ctx);
  ops::OpContext oc{gpu(), rec};
  rec.begin();
  ops::attention(oc, ops::Act(qb, heads * hd), kv, ops::IntVec{pb}, ops::Act(out, heads * hd), rows, params);
  rec.submit_and_wait();
  std::vector<float> kc(k.size()), vc(v.size()), scale(rows);
  for (size_t i = 0; i < k.size(); ++i) kc[i] = f16_to_float(k[i]), vc[i] = f16_to_float(v[i]);
  for (uint32_t r = 0; r < rows; ++r) scale[r] = float(1 + attn_scale * std::log(std::floor((pos[r] + 1) / floor_scale) + 1));
  EXPECT_EQ(scale[1], 1.0f);  // pos 30: no-op
  EXPECT_GT(scale[2], 1.0f);  // pos 31: (31 + 1) / 32 = 1
  RefAttention ra{heads, kv_heads, hd, cap, 0, params.scale, nullptr, 0, &scale};
  EXPECT_TRUE(all_close(read_back<float>(out, q.size()), ref_attention(q, kc, vc, pos, rows, ra), 1e-5, 1e-4));
}

// At the workgroup of CPU devices (8) and of GPUs (512, more invocations than a head has).
TEST_F(GpuTest, PerHeadQkNorm) {
  const uint32_t device_wg = gpu().norm_workgroup;
  for (uint32_t wg : {8u, 512u}) {
  if (!workgroup_runs_here(wg)) continue;
  SCOPED_TRACE(::testing::Message() << "workgroup " << wg);
  gpu().norm_workgroup = wg;
  const uint32_t rows = 5, heads = 10, hd = 32, stride = heads * hd + 64;  // extra v columns untouched
  auto x = random_floats(size_t(rows) * stride, 21, -4, 4);
  vk::Buffer xb = device_buffer(x, "qkv");
  vk::Recorder rec(gpu().ctx);
  ops::OpContext oc{gpu(), rec};
  rec.begin();
  ops::rms_norm_heads(oc, ops::Act(xb, stride), rows, heads, hd, 1e-5f);
  rec.submit_and_wait();
  auto got = read_back<float>(xb, x.size());
  std::vector<float> heads_in, heads_out, rest_in, rest_out;
  for (uint32_t r = 0; r < rows; ++r) {
    heads_in.insert(heads_in.end(), x.begin() + r * stride, x.begin() + r * stride + heads * hd);
    heads_out.insert(heads_out.end(), got.begin() + r * stride, got.begin() + r * stride + heads * hd);
    rest_in.insert(rest_in.end(), x.begin() + r * stride + heads * hd, x.begin() + (r + 1) * stride);
    rest_out.insert(rest_out.end(), got.begin() + r * stride + heads * hd, got.begin() + (r + 1) * stride);
  }
  EXPECT_TRUE(all_close(heads_out, ref_rms_norm(heads_in, nullptr, rows * heads, hd, 1e-5f), 1e-5, 1e-5));
  EXPECT_TRUE(bitwise_equal(rest_out, rest_in));
  }
  gpu().norm_workgroup = device_wg;
}

}  // namespace
}  // namespace eaglevk::testing
