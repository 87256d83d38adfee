// Matrix-vector throughput (weight bytes read per second) at Llama-3-8B shapes for every
// weight type (the float types and ggml's block formats, decoded in the kernel), next to the
// device's buffer-copy bandwidth measured the same way. Run: build/tests/eaglevk_bench_ops
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <chrono>
#include <memory>
#include <vector>

#include "loader/image_decode.h"
#include "loader/llama4_image.h"
#include "models/target.h"
#include "runtime/engine/prompt_images.h"
#include "runtime/ops/ops.h"

namespace {

using namespace eaglevk;

ops::Gpu& bench_gpu() {
  static ops::Gpu gpu;
  return gpu;
}

// Fills a device buffer with small f16 values (about 0.01) without a host-side copy of it all.
void fill_f16(ops::Gpu& gpu, vk::Buffer& b) {
  vk::Recorder rec(gpu.ctx);
  rec.begin();
  rec.fill(vk::BufferRange(b), 0x211e211eu);
  rec.submit_and_wait();
}

// One submission of `reps` dispatches; the time per dispatch is the time of the submission
// divided by reps, so the fixed submission cost is spread out.
template <typename Record>
void time_submissions(benchmark::State& state, ops::Gpu& gpu, uint32_t reps, double bytes_per_rep, Record record) {
  vk::Recorder rec(gpu.ctx);
  // One untimed submission first: drivers finish compiling a pipeline and fault in memory at
  // its first use, which would dominate a short run.
  rec.begin();
  record(rec);
  rec.submit_and_wait();
  for (auto _ : state) {
    rec.begin();
    for (uint32_t i = 0; i < reps; ++i) record(rec);
    auto start = std::chrono::steady_clock::now();
    rec.submit_and_wait();
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    state.SetIterationTime(seconds / reps);
  }
  state.counters["GB/s"] = benchmark::Counter(bytes_per_rep * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_CopyBandwidth(benchmark::State& state) {
  auto& gpu = bench_gpu();
  const uint64_t bytes = uint64_t(state.range(0)) << 20;
  vk::Buffer a(gpu.ctx, bytes, vk::MemoryKind::Device, "a"), b(gpu.ctx, bytes, vk::MemoryKind::Device, "b");
  fill_f16(gpu, a);
  // Bytes read plus bytes written, so that it compares with a kernel that only streams reads.
  time_submissions(state, gpu, 4, 2.0 * double(bytes), [&](vk::Recorder& rec) { rec.copy(a, b); });
}

constexpr ops::WeightType kMatvecTypes[] = {
    ops::WeightType::F32,  ops::WeightType::F16,  ops::WeightType::BF16, ops::WeightType::Q8_0,
    ops::WeightType::Q6_K, ops::WeightType::Q5_K, ops::WeightType::Q5_1, ops::WeightType::Q5_0,
    ops::WeightType::Q4_K, ops::WeightType::Q4_1, ops::WeightType::Q4_0, ops::WeightType::Q3_K,
    ops::WeightType::Q2_K, ops::WeightType::IQ4_XS, ops::WeightType::IQ4_NL, ops::WeightType::IQ3_XXS,
    ops::WeightType::IQ2_XS, ops::WeightType::IQ1_M, ops::WeightType::MXFP4, ops::WeightType::FP8_B32,
    ops::WeightType::INT4_B32};

// Arguments: index into kMatvecTypes, output features n, input width k, activation rows (1 for
// a decode step, up to 8 for a verify pass). The weight bytes are a repeated f16 pattern: any
// bytes are valid blocks (every scale decodes to about 0.01), and only the bytes read count (the
// lattice formats then look up one grid entry throughout: their grid reads all hit the cache).
void BM_Matvec(benchmark::State& state) {
  auto& gpu = bench_gpu();
  const ops::WeightType type = kMatvecTypes[state.range(0)];
  const uint32_t n = uint32_t(state.range(1)), k = uint32_t(state.range(2)), rows = uint32_t(state.range(3));
  const uint64_t bytes = uint64_t(n) * ops::weight_row_bytes(type, k);
  vk::Buffer w(gpu.ctx, bytes, vk::MemoryKind::Device, "w");
  fill_f16(gpu, w);
  std::vector<float> x(size_t(rows) * k, 0.5f);
  vk::Buffer xb(gpu.ctx, x.size() * 4, vk::MemoryKind::Device, "x"), yb(gpu.ctx, uint64_t(rows) * n * 4, vk::MemoryKind::Device, "y");
  vk::upload(gpu.ctx, xb, x.data(), x.size() * 4);
  ops::WeightMatrix weights{w, type, n, k};
  state.SetLabel(ops::weight_type_name(type));
  time_submissions(state, gpu, 4, double(bytes), [&](vk::Recorder& rec) {
    ops::OpContext oc{gpu, rec};
    ops::matmul(oc, ops::Act(xb, k), weights, ops::Act(yb, n), rows);
  });
}

// A Llama-4 style MoE block (router top-1, expert gate/up, SwiGLU, expert down) for a decode
// step (1 row), a verify step (4 rows routed to 4 different experts; range(1) = 2: all 4 to one
// expert, whose weights the batch-invariant kernel then reads once) and a prefill (range(1) = 1:
// 256 rows grouped by expert, a GEMM per expert). GB/s counts the expert weight bytes the rows
// would read one at a time: each row streams its own expert's gate_up and down.
void BM_MoeExperts(benchmark::State& state) {
  auto& gpu = bench_gpu();
  const uint32_t rows = uint32_t(state.range(0)), E = 8, H = 2048, I = 1024;
  const bool grouped = state.range(1) == 1, one_expert = state.range(1) == 2;
  vk::Buffer gate_up(gpu.ctx, uint64_t(E) * 2 * I * H * 2, vk::MemoryKind::Device, "experts gate_up"),
      down(gpu.ctx, uint64_t(E) * H * I * 2, vk::MemoryKind::Device, "experts down");
  fill_f16(gpu, gate_up);
  fill_f16(gpu, down);
  std::vector<float> logits(rows * E, 0.0f), x(rows * H, 0.5f);
  for (uint32_t r = 0; r < rows; ++r) logits[r * E + (one_expert ? 0 : r % E)] = 1.0f;  // row r -> expert r
  vk::Buffer lb(gpu.ctx, logits.size() * 4, vk::MemoryKind::Device, "logits"), xb(gpu.ctx, x.size() * 4, vk::MemoryKind::Device, "x"),
      ids(gpu.ctx, rows * 4, vk::MemoryKind::Device, "ids"), xs(gpu.ctx, rows * H * 4, vk::MemoryKind::Device, "xs"),
      gu(gpu.ctx, rows * 2 * I * 4, vk::MemoryKind::Device, "gu"), act(gpu.ctx, rows * I * 4, vk::MemoryKind::Device, "act"),
      y(gpu.ctx, rows * H * 4, vk::MemoryKind::Device, "y"),
      lists(gpu.ctx, ops::moe_row_lists_bytes(rows, E), vk::MemoryKind::Device, "row lists");
  const ops::IntVec by_expert{lists};
  const ops::IntVec* row_lists = grouped ? &by_expert : nullptr;
  vk::upload(gpu.ctx, lb, logits.data(), logits.size() * 4);
  vk::upload(gpu.ctx, xb, x.data(), x.size() * 4);
  ops::ExpertWeights wgu{gate_up, ops::WeightType::F16, E, 2 * I, H, false, {}, 0},
      wdn{down, ops::WeightType::F16, E, H, I, false, {}, 0};
  double expert_bytes = (2.0 * I * H + double(H) * I) * 2;
  time_submissions(state, gpu, 4, rows * expert_bytes, [&](vk::Recorder& rec) {
    ops::OpContext oc{gpu, rec};
    ops::moe_route(oc, ops::Act(lb, E), ops::Act(xb, H), rows, E, 1, H, ops::IntVec{ids}, ops::Act(xs, H));
    if (grouped) ops::group_rows_by_expert(oc, ops::IntVec{ids}, rows, E, by_expert);
    ops::matmul_id(oc, ops::Act(xs, H), wgu, ops::IntVec{ids}, ops::Act(gu, 2 * I), rows, 1, 0, false, "gate_up",
                   row_lists);
    ops::Act g(gu, 2 * I);
    ops::swiglu(oc, g, g.cols(I), ops::Act(act, I), rows, I);
    ops::matmul_id(oc, ops::Act(act, I), wdn, ops::IntVec{ids}, ops::Act(y, H), rows, 1, 0, true, "down", row_lists);
  });
}

BENCHMARK(BM_MoeExperts)
    ->Args({1, 0})
    ->Args({4, 0})
    ->Args({4, 2})
    ->Args({256, 0})
    ->Args({256, 1})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(1.0);
BENCHMARK(BM_CopyBandwidth)->Arg(256)->UseManualTime()->Unit(benchmark::kMillisecond)->MinTime(1.0);
// Every type at the 8B attention shape (4096 x 4096) for one row and a verify pass of 4; the
// f16 and Q4_K rows also at the MLP and lm_head shapes; one tiny-model shape.
void matvec_args(benchmark::internal::Benchmark* b) {
  for (int64_t t = 0; t < int64_t(std::size(kMatvecTypes)); ++t)
    for (int64_t rows : {1, 4}) b->Args({t, 4096, 4096, rows});
  // The bundled tiny Llama-3's fused gate/up projection (bf16), where per-dispatch costs show.
  b->Args({2, 1536, 256, 1});
  for (int64_t t : {1, 8}) {
    b->Args({t, 14336, 4096, 1});
    b->Args({t, 128256, 4096, 1});
  }
}
BENCHMARK(BM_Matvec)->Apply(matvec_args)->UseManualTime()->Unit(benchmark::kMillisecond)->MinTime(0.5);

// An 8B layer's q | k | v product (32 q heads and 8 kv heads of 128, from 4096) with rope and the
// KV-cache write: range(2) = 0 the product then rope_kv_write, 1 folded into the product
// (ops::matmul_rope_kv); range(0) indexes kMatvecTypes, range(1) is the rows (1: a decode step, 4:
// a verify pass). GB/s counts the weight bytes.
void BM_QkvRope(benchmark::State& state) {
  auto& gpu = bench_gpu();
  const ops::WeightType type = kMatvecTypes[state.range(0)];
  const uint32_t rows = uint32_t(state.range(1)), hd = 128, q_heads = 32, kv_dim = 8 * hd, k = 4096;
  const uint32_t n = q_heads * hd + 2 * kv_dim, capacity = 4096;
  const bool folded = state.range(2) == 1;
  const uint64_t bytes = uint64_t(n) * ops::weight_row_bytes(type, k);
  vk::Buffer w(gpu.ctx, bytes, vk::MemoryKind::Device, "w");
  fill_f16(gpu, w);
  std::vector<float> x(size_t(rows) * k, 0.5f);
  std::vector<int32_t> positions(rows);
  for (uint32_t r = 0; r < rows; ++r) positions[r] = int32_t(1000 + r);
  std::vector<float> inv(hd / 2, 1e-3f);
  const std::vector<float> table = ops::rope_table(inv, capacity);
  vk::Buffer xb(gpu.ctx, x.size() * 4, vk::MemoryKind::Device, "x"), yb(gpu.ctx, uint64_t(rows) * n * 4, vk::MemoryKind::Device, "qkv"),
      pb(gpu.ctx, rows * 4, vk::MemoryKind::Device, "positions"), tb(gpu.ctx, table.size() * 4, vk::MemoryKind::Device, "table"),
      kc(gpu.ctx, uint64_t(capacity) * kv_dim * 2, vk::MemoryKind::Device, "k cache"),
      vc(gpu.ctx, uint64_t(capacity) * kv_dim * 2, vk::MemoryKind::Device, "v cache");
  vk::upload(gpu.ctx, xb, x.data(), x.size() * 4);
  vk::upload(gpu.ctx, pb, positions.data(), positions.size() * 4);
  vk::upload(gpu.ctx, tb, table.data(), table.size() * 4);
  const ops::WeightMatrix weights{w, type, n, k};
  const ops::RopeKv rope{q_heads, hd, ops::IntVec{pb}, tb, capacity, ops::RopePairing::RotateHalf, ops::IntVec{pb},
                         ops::KvLayer{kc, vc, capacity, kv_dim}};
  state.SetLabel(fmt::format("{}{}", ops::weight_type_name(type), folded ? " folded" : ""));
  time_submissions(state, gpu, 4, double(bytes), [&](vk::Recorder& rec) {
    ops::OpContext oc{gpu, rec};
    if (folded) {
      ops::matmul_rope_kv(oc, ops::Act(xb, k), weights, 0, ops::Act(yb, n), rows, ops::MatmulPath::Auto, "qkv", rope);
    } else {
      ops::matmul(oc, ops::Act(xb, k), weights, ops::Act(yb, n), rows);
      ops::rope_kv_write(oc, ops::Act(yb, n), rows, rope);
    }
  });
}
void qkv_rope_args(benchmark::internal::Benchmark* b) {
  for (int64_t t : {1, 8})
    for (int64_t rows : {1, 4})
      for (int64_t folded : {0, 1}) b->Args({t, rows, folded});
}
BENCHMARK(BM_QkvRope)->Apply(qkv_rope_args)->UseManualTime()->Unit(benchmark::kMillisecond)->MinTime(0.5);

// A prefill product: `rows` rows of x by W [n, k], on the scalar GEMM (range(4) = 0) or on
// cooperative matrices (1; an error where this build or device has none). TFLOP/s counts
// 2 rows n k.
void BM_Gemm(benchmark::State& state) {
  auto& gpu = bench_gpu();
  const ops::WeightType type = kMatvecTypes[state.range(0)];
  const uint32_t n = uint32_t(state.range(1)), k = uint32_t(state.range(2)), rows = uint32_t(state.range(3));
  const bool coopmat = state.range(4) != 0;
  if (coopmat && !ops::coopmat_unavailable(gpu.ctx).empty()) {
    state.SkipWithError(ops::coopmat_unavailable(gpu.ctx).c_str());
    return;
  }
  const bool saved = gpu.coopmat_gemm;
  gpu.coopmat_gemm = coopmat;
  vk::Buffer w(gpu.ctx, uint64_t(n) * ops::weight_row_bytes(type, k), vk::MemoryKind::Device, "w");
  fill_f16(gpu, w);
  std::vector<float> x(size_t(rows) * k, 0.5f);
  vk::Buffer xb(gpu.ctx, x.size() * 4, vk::MemoryKind::Device, "x"), yb(gpu.ctx, uint64_t(rows) * n * 4, vk::MemoryKind::Device, "y");
  vk::upload(gpu.ctx, xb, x.data(), x.size() * 4);
  ops::WeightMatrix weights{w, type, n, k};
  state.SetLabel(fmt::format("{} {}", ops::weight_type_name(type), coopmat ? "coopmat" : "scalar"));
  time_submissions(state, gpu, 1, 0.0, [&](vk::Recorder& rec) {
    ops::OpContext oc{gpu, rec};
    ops::matmul(oc, ops::Act(xb, k), weights, ops::Act(yb, n), rows, false, ops::MatmulPath::Tiled);
  });
  state.counters.erase("GB/s");  // a product's time is its arithmetic's, not its weight bytes'
  state.counters["TFLOP/s"] =
      benchmark::Counter(2e-12 * rows * double(n) * k, benchmark::Counter::kIsIterationInvariantRate);
  gpu.coopmat_gemm = saved;
}
// f16 and Q4_K at the 8B attention shape for a 512-token prefill; the bundled tiny Llama-3's
// gate/up (bf16) for 64 tokens, where lavapipe finishes in milliseconds. Both kernels each.
void gemm_args(benchmark::internal::Benchmark* b) {
  for (int64_t coopmat : {0, 1}) {
    for (int64_t t : {1, 8}) b->Args({t, 4096, 4096, 512, coopmat});
    b->Args({2, 1536, 256, 64, coopmat});
  }
}
BENCHMARK(BM_Gemm)->Apply(gemm_args)->UseManualTime()->Unit(benchmark::kMillisecond)->MinTime(0.5);

}  // namespace

// The Llama-4 vision tower of the bundled tiny-llama4-vision on `range(0)` tiles (copies of the
// 2x2 test image's 5 tiles): wall time of encode_image_tiles (patch unfold and upload, the
// tower, one submission), with the time per tile as a counter.
// Attention of `rows` new rows (a decode step: 1, a verify pass: 4) at context depth DEPTH,
// at the tiny pairs' shape (8 heads over 4 KV heads of 32) and Llama-3-8B's (32 over 8 of 128),
// unsplit or split along the context in SPLIT keys (flash-decoding, the GPUs' default 256).
// Bytes: the K and V rows each KV head's group reads.
void BM_Attention(benchmark::State& state) {
  auto& gpu = bench_gpu();
  const bool big = state.range(0) != 0;
  const uint32_t rows = uint32_t(state.range(1)), depth = uint32_t(state.range(2));
  const uint32_t heads = big ? 32 : 8, kv_heads = big ? 8 : 4, hd = big ? 128 : 32;
  const uint32_t capacity = depth + rows, kv_dim = kv_heads * hd, q_dim = heads * hd;
  vk::Buffer k(gpu.ctx, uint64_t(capacity) * kv_dim * 2, vk::MemoryKind::Device, "k"),
      v(gpu.ctx, uint64_t(capacity) * kv_dim * 2, vk::MemoryKind::Device, "v"),
      q(gpu.ctx, uint64_t(rows) * q_dim * 4, vk::MemoryKind::Device, "q"),
      out(gpu.ctx, uint64_t(rows) * q_dim * 4, vk::MemoryKind::Device, "out"),
      pos(gpu.ctx, uint64_t(rows) * 4, vk::MemoryKind::Device, "positions");
  fill_f16(gpu, k);
  fill_f16(gpu, v);
  fill_f16(gpu, q);
  std::vector<int32_t> positions(rows);
  for (uint32_t i = 0; i < rows; ++i) positions[i] = int32_t(depth + i);
  vk::upload(gpu.ctx, pos, positions.data(), rows * 4);
  const ops::KvLayer kv{vk::BufferRange(k), vk::BufferRange(v), capacity, kv_dim};
  ops::AttentionParams params{heads, kv_heads, hd, capacity, 0, 0.1f};
  const uint32_t split_keys = uint32_t(state.range(3));
  const vk::Buffer scratch = ops::make_attention_split_scratch(gpu.ctx, heads, hd, capacity, rows, split_keys, "split scratch");
  const ops::AttentionSplit split = ops::attention_split(split_keys, scratch);
  params.split = &split;
  time_submissions(state, gpu, 8, 2.0 * double(capacity) * kv_dim * 2, [&](vk::Recorder& rec) {
    ops::OpContext oc{gpu, rec};
    ops::attention(oc, ops::Act(q, q_dim), kv, ops::IntVec{pos}, ops::Act(out, q_dim), rows, params);
  });
}
BENCHMARK(BM_Attention)
    ->ArgsProduct({{0}, {1, 4}, {0, 512, 2048}, {0, 256}})
    ->ArgsProduct({{1}, {1, 4}, {0, 512, 2048}, {0, 256}})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(0.3);

void BM_VisionTower(benchmark::State& state) {
  auto& gpu = bench_gpu();
  static const std::string dir = std::string(EAGLEVK_SOURCE_DIR) + "/assets/tiny-llama4-vision";
  static const models::TargetModel target = models::load_target(gpu.ctx, dir);
  const models::Llama4Vision& vision = *std::get<models::Llama4Model>(target.family).vision;
  const loader::PreprocessedImage image = loader::preprocess_llama4_image(
      loader::load_image(dir + "/images/noise_h112_w112.png"), loader::load_llama4_image_config(dir));
  const uint32_t tiles = uint32_t(state.range(0));
  const size_t per_tile = image.pixels.size() / image.tiles;
  std::vector<float> pixels;
  for (uint32_t t = 0; t < tiles; ++t)
    pixels.insert(pixels.end(), image.pixels.begin() + (t % image.tiles) * per_tile,
                  image.pixels.begin() + (t % image.tiles + 1) * per_tile);
  double seconds = 0;
  for (auto _ : state) {
    auto start = std::chrono::steady_clock::now();
    vk::Buffer features = engine::encode_image_tiles(gpu, vision, pixels, tiles);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    state.SetIterationTime(s);
    seconds += s;
  }
  state.counters["ms/tile"] = seconds * 1e3 / double(state.iterations() * tiles);
}
BENCHMARK(BM_VisionTower)->Arg(1)->Arg(5)->Arg(17)->UseManualTime()->Unit(benchmark::kMillisecond)->MinTime(1.0);

// Host time to record one decode step of tiny-llama3 (the commands of a one-row pass, not
// their execution), with descriptor sets cached (Arg 1) or written for every dispatch (Arg 0).
void BM_RecordDecodeStep(benchmark::State& state) {
  ops::Gpu& gpu = bench_gpu();
  static models::TargetModel model = models::load_target(gpu.ctx, std::string(EAGLEVK_SOURCE_DIR) + "/assets/tiny-llama3");
  models::TargetState s = models::make_target_state(gpu, model, 64, 1, true);
  vk::Recorder rec(gpu.ctx);
  rec.cache_descriptor_sets = state.range(0) != 0;
  ops::OpContext oc{gpu, rec};
  const models::ForwardPass pass{1, 8, 0, false, nullptr, true};
  for (int warm = 0; warm < 2; ++warm) {
    rec.begin();
    models::record_target_forward(oc, model, s, pass);
    rec.submit_and_wait();
  }
  for (auto _ : state) {
    auto start = std::chrono::steady_clock::now();
    rec.begin();
    models::record_target_forward(oc, model, s, pass);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    rec.submit_and_wait();
    state.SetIterationTime(seconds);
  }
  state.counters["dispatches"] = rec.dispatches();
}
BENCHMARK(BM_RecordDecodeStep)->Arg(0)->Arg(1)->UseManualTime()->Unit(benchmark::kMicrosecond)->MinTime(1.0);

BENCHMARK_MAIN();
