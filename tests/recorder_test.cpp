// The recorder's hazard tracking: barriers exactly where needed, bitwise equality with a
// barrier after every dispatch, bitwise equality with and without arena reuse, and the
// EAGLE-3 two-norm scenario that raced in llama.cpp.
#include <cmath>
#include <cstdlib>
#include <map>
#include <random>

#include <eaglevk/error.h>

#include "runtime/ops/ops.h"
#include "runtime/vk/arena.h"
#include "runtime/vk/context.h"
#include "runtime/vk/embedded_shaders.h"
#include "runtime/vk/spirv_reflect.h"
#include "runtime/vk/profile.h"
#include "runtime/vk/validation_count.h"
#include "runtime/vk/validation_ignore.h"
#include "support/gpu_fixture.h"
#include "support/reference.h"

namespace eaglevk::testing {
namespace {

vk::Buffer* const kA = reinterpret_cast<vk::Buffer*>(0x10);
vk::Buffer* const kB = reinterpret_cast<vk::Buffer*>(0x20);

vk::Access rows(vk::Buffer* b, uint64_t offset, uint64_t bytes, uint64_t stride, uint32_t n, bool write) {
  return {b, offset, bytes, stride, n, !write, write};
}

TEST(Hazards, OverlapOfContiguousAndStridedRanges) {
  EXPECT_TRUE(vk::overlaps(rows(kA, 0, 100, 100, 1, true), rows(kA, 99, 10, 10, 1, false)));
  EXPECT_FALSE(vk::overlaps(rows(kA, 0, 100, 100, 1, true), rows(kA, 100, 10, 10, 1, false)));
  EXPECT_FALSE(vk::overlaps(rows(kA, 0, 100, 100, 1, true), rows(kB, 0, 100, 100, 1, false)));
  // Two halves of the rows of a [4, 2x64] buffer are disjoint; a half and a whole row are not.
  auto left = rows(kA, 0, 64, 128, 4, true), right = rows(kA, 64, 64, 128, 4, true);
  EXPECT_FALSE(vk::overlaps(left, right));
  EXPECT_TRUE(vk::overlaps(left, rows(kA, 128 * 3 + 10, 4, 4, 1, false)));
  EXPECT_FALSE(vk::overlaps(left, rows(kA, 128 * 3 + 64, 64, 64, 1, false)));
  EXPECT_FALSE(vk::overlaps(left, rows(kA, 128 * 4, 64, 64, 1, false)));  // past the last row
  EXPECT_TRUE(vk::overlaps(right, rows(kA, 60, 8, 128, 4, false)));       // straddles the seam
}

TEST(Hazards, ReadAfterWriteWriteAfterWriteWriteAfterRead) {
  vk::HazardSet set;
  set.add(rows(kA, 0, 64, 64, 1, false));  // a read
  EXPECT_FALSE(set.conflicts(rows(kA, 0, 64, 64, 1, false)));  // read after read
  EXPECT_TRUE(set.conflicts(rows(kA, 32, 64, 64, 1, true)));   // write after read
  set.add(rows(kB, 0, 64, 64, 1, true));
  EXPECT_TRUE(set.conflicts(rows(kB, 0, 4, 4, 1, false)));     // read after write
  EXPECT_TRUE(set.conflicts(rows(kB, 60, 4, 4, 1, true)));     // write after write
  EXPECT_FALSE(set.conflicts(rows(kB, 64, 4, 4, 1, true)));
}

// The bytes an access touches, row by row: the obvious oracle for overlaps().
std::vector<bool> touched(const vk::Access& a, size_t size) {
  std::vector<bool> bytes(size, false);
  for (uint32_t r = 0; r < a.rows; ++r)
    for (uint64_t i = 0; i < a.bytes; ++i) bytes.at(a.offset + uint64_t(r) * a.stride + i) = true;
  return bytes;
}

bool oracle_overlaps(const vk::Access& a, const vk::Access& b, size_t size) {
  if (a.buffer != b.buffer) return false;
  std::vector<bool> x = touched(a, size), y = touched(b, size);
  for (size_t i = 0; i < size; ++i)
    if (x[i] && y[i]) return true;
  return false;
}

// Small random accesses that hit every case: empty rows, stride 0, stride below, equal to
// and above the row size, one row and many, two buffers. Lavapipe runs dispatches in order,
// so a missing barrier can never show on the device: the tracker itself is the thing to test.
vk::Access random_access(std::mt19937& rng, bool read, bool write) {
  auto pick = [&](uint32_t lo, uint32_t hi) { return std::uniform_int_distribution<uint32_t>(lo, hi)(rng); };
  vk::Access a;
  a.buffer = pick(0, 3) == 0 ? kB : kA;
  a.offset = pick(0, 96);
  a.bytes = pick(0, 5) == 0 ? 0 : pick(1, 40);
  a.rows = pick(0, 2) == 0 ? 1 : pick(2, 6);
  const uint32_t kind = pick(0, 3);
  a.stride = kind == 0 ? 0 : kind == 1 ? pick(1, uint32_t(a.bytes) + 1) : pick(uint32_t(a.bytes) + 1, uint32_t(a.bytes) + 48);
  a.read = read;
  a.write = write;
  return a;
}

constexpr size_t kOracleBytes = 96 + 5 * 88 + 40;  // the largest span random_access can give

TEST(Hazards, OverlapsAgreesWithAByteOracleOnRandomAccesses) {
  std::mt19937 rng(20261126);
  for (int i = 0; i < 200000; ++i) {
    const vk::Access a = random_access(rng, true, false), b = random_access(rng, false, true);
    ASSERT_EQ(vk::overlaps(a, b), oracle_overlaps(a, b, kOracleBytes))
        << "a: offset " << a.offset << " bytes " << a.bytes << " stride " << a.stride << " rows " << a.rows
        << " | b: offset " << b.offset << " bytes " << b.bytes << " stride " << b.stride << " rows " << b.rows;
    ASSERT_EQ(vk::overlaps(a, b), vk::overlaps(b, a));
  }
}

TEST(Hazards, ConflictsAgreeWithAByteOracleOnRandomSequences) {
  std::mt19937 rng(7);
  for (int sequence = 0; sequence < 5000; ++sequence) {
    vk::HazardSet set;
    std::vector<vk::Access> recorded;
    const int length = std::uniform_int_distribution<int>(1, 12)(rng);
    for (int i = 0; i < length; ++i) {
      const int mode = std::uniform_int_distribution<int>(0, 2)(rng);  // read, write, read-write
      const vk::Access next = random_access(rng, mode != 1, mode != 0);
      bool want = false;
      for (const vk::Access& a : recorded)
        if (oracle_overlaps(a, next, kOracleBytes) && (a.write || next.write)) want = true;
      ASSERT_EQ(set.conflicts(next), want) << "sequence " << sequence << " access " << i;
      // As the recorder does: a conflict means a barrier, which forgets everything before it.
      if (want) {
        set.clear();
        recorded.clear();
      }
      set.add(next);
      recorded.push_back(next);
    }
  }
}

struct RecorderTest : GpuTest {};

TEST_F(RecorderTest, BarriersOnlyBetweenDependentDispatches) {
  const uint32_t dim = 64, rows_n = 4;
  auto x = random_floats(rows_n * dim, 1);
  auto w = random_floats(dim, 2, 0.5, 1.5);
  vk::Buffer xb = device_buffer(x, "x"), wb = device_buffer(w, "w"),
             cat(gpu().ctx, rows_n * 2 * dim * 4, vk::MemoryKind::Device, "concat"),
             other(gpu().ctx, rows_n * dim * 4, vk::MemoryKind::Device, "other");
  vk::Recorder rec(gpu().ctx);
  rec.sync = vk::SyncMode::Tracked;
  ops::OpContext oc{gpu(), rec};
  vk::BufferRange wr(wb);
  rec.begin();
  // Two norms writing the two halves of the same rows: independent, no barrier.
  ops::rms_norm(oc, ops::Act(xb, dim), &wr, ops::Act(cat, 2 * dim), rows_n, dim, 1e-5f);
  ops::rms_norm(oc, ops::Act(xb, dim), &wr, ops::Act(cat, 2 * dim, dim), rows_n, dim, 1e-5f);
  EXPECT_EQ(rec.barriers(), 0u);
  // An unrelated dispatch reading only x: still none.
  ops::rms_norm(oc, ops::Act(xb, dim), nullptr, ops::Act(other, dim), rows_n, dim, 1e-5f);
  EXPECT_EQ(rec.barriers(), 0u);
  // The consumer of both halves: exactly one barrier (read after write).
  ops::softmax(oc, ops::Act(cat, 2 * dim), rows_n, 2 * dim);
  EXPECT_EQ(rec.barriers(), 1u);
  // `other` was written before that barrier, so writing it again needs none...
  ops::rms_norm(oc, ops::Act(xb, dim), nullptr, ops::Act(other, dim), rows_n, dim, 1e-5f);
  EXPECT_EQ(rec.barriers(), 1u);
  // ...but a second write right after is a write-after-write hazard.
  ops::rms_norm(oc, ops::Act(cat, 2 * dim), nullptr, ops::Act(other, dim), rows_n, dim, 1e-5f);
  EXPECT_EQ(rec.barriers(), 2u);
  // Reading `other` right after its write (and writing x): read after write.
  ops::add(oc, other, other, vk::BufferRange(xb).sub(0, rows_n * dim * 4), rows_n * dim);
  EXPECT_EQ(rec.barriers(), 3u);
  rec.submit_and_wait();

  vk::Recorder full(gpu().ctx);
  full.sync = vk::SyncMode::Full;
  ops::OpContext ocf{gpu(), full};
  full.begin();
  ops::rms_norm(ocf, ops::Act(xb, dim), &wr, ops::Act(cat, 2 * dim), rows_n, dim, 1e-5f);
  ops::rms_norm(ocf, ops::Act(xb, dim), &wr, ops::Act(cat, 2 * dim, dim), rows_n, dim, 1e-5f);
  EXPECT_EQ(full.barriers(), 2u);
  full.submit_and_wait();
}

// Provokes one read-after-write hazard: a dispatch reads b but declares nothing about it (the
// binding's access is pointed at another buffer). The messages come after submit_and_wait.
void record_a_missing_barrier() {
  const uint32_t n = 256;
  auto x = random_floats(n, 3);
  vk::Buffer a = device_buffer(x, "a"), b(gpu().ctx, n * 4, vk::MemoryKind::Device, "b"),
             c(gpu().ctx, n * 4, vk::MemoryKind::Device, "c");
  vk::Recorder rec(gpu().ctx);
  rec.sync = vk::SyncMode::Tracked;
  const vk::Kernel& add = gpu().pipelines.get("add");
  uint32_t push = n;
  rec.begin();
  rec.dispatch(add, {vk::reads(a), vk::reads(a), vk::writes(b)}, push, 4);
  vk::Arg lying = vk::reads(b);
  lying.access.buffer = &c;
  rec.dispatch(add, {lying, vk::reads(a), vk::writes(c)}, push, 4);
  rec.submit_and_wait();
}

// The validation layer is live: a read-after-write recorded without its barrier (declared
// ranges that lie) must be reported as a synchronization hazard.
TEST_F(RecorderTest, SynchronizationValidationCatchesAMissingBarrier) {
  record_a_missing_barrier();
  uint32_t seen = gpu().ctx.validation_errors.load() - errors_before_;
  EXPECT_GE(seen, 1u) << "synchronization validation did not report the read-after-write hazard";
  errors_before_ = gpu().ctx.validation_errors.load();  // expected errors; the fixture checks the rest
  vk::forgive_validation_errors(seen);                   // and the whole-process check too
}

TEST(ValidationIgnoreList, ParsesHexadecimalAndDecimalIds) {
  EXPECT_TRUE(vk::ignored_validation_ids(nullptr).empty());
  EXPECT_TRUE(vk::ignored_validation_ids("").empty());
  EXPECT_EQ(vk::ignored_validation_ids("0xdd73dbcf"), std::vector<uint32_t>{0xdd73dbcfu});
  EXPECT_EQ(vk::ignored_validation_ids("0x6bbb14, 42 ,0XFFFFFFFF"),
            (std::vector<uint32_t>{0x6bbb14u, 42u, 0xffffffffu}));
}

TEST(ValidationIgnoreList, AMalformedListIsAnErrorNamingTheVariable) {
  for (const char* bad : {"0x", "0xdd73dbcg", "12,,13", "12,", "-5", "0x1ffffffff", "4294967296", "SYNC-HAZARD"}) {
    try {
      vk::ignored_validation_ids(bad);
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("EAGLEVK_VALIDATION_IGNORE"), std::string::npos) << e.what();
    }
  }
}

// Run only by the ctest entry recorder_test_validation_ignore, which lists the read-after-write
// hazard's message ID in EAGLEVK_VALIDATION_IGNORE (SynchronizationValidationCatchesAMissingBarrier
// shows that, unlisted, the same hazard is counted): printed, not counted.
TEST_F(RecorderTest, AHazardListedInTheIgnoreListIsNotCounted) {
  ASSERT_FALSE(vk::ignored_validation_ids_in_process().empty()) << "run with EAGLEVK_VALIDATION_IGNORE set";
  const uint32_t ignored_before = vk::ignored_validation_errors_in_process();
  const uint32_t process_before = vk::validation_errors_in_process();
  record_a_missing_barrier();
  EXPECT_GE(vk::ignored_validation_errors_in_process(), ignored_before + 1) << "the hazard was not reported";
  EXPECT_EQ(gpu().ctx.validation_errors.load(), errors_before_);
  EXPECT_EQ(vk::validation_errors_in_process(), process_before);
}

// A dispatch of a kernel over ranges bound before reuses that descriptor set, in the same
// recording or a later one; other ranges, or a new buffer (which may get a freed buffer's
// VkBuffer handle), get a set of their own, and every result is right.
TEST_F(RecorderTest, DescriptorSetsAreWrittenOncePerKernelAndRanges) {
  const uint32_t n = 256;
  auto x = random_floats(n, 21), y = random_floats(n, 22);
  vk::Buffer a = device_buffer(x, "a"), b = device_buffer(y, "b");
  vk::Recorder rec(gpu().ctx);
  ops::OpContext oc{gpu(), rec};
  auto sum_into = [&](vk::Buffer& out) {
    rec.begin();
    ops::add(oc, a, b, out, n);
    rec.submit_and_wait();
    std::vector<float> got = read_back<float>(out, n);
    for (uint32_t i = 0; i < n; ++i) ASSERT_EQ(got[i], x[i] + y[i]) << i;
  };
  vk::Buffer out(gpu().ctx, n * 4, vk::MemoryKind::Device, "out");
  sum_into(out);
  const uint64_t first = rec.descriptor_sets_written();
  EXPECT_GE(first, 1u);
  sum_into(out);
  EXPECT_EQ(rec.descriptor_sets_written(), first) << "the same dispatch wrote its set again";
  rec.begin();
  ops::add(oc, a, b, out, n);
  ops::add(oc, a, b, out, n);  // the same set twice in one recording
  ops::add(oc, b, a, out, n);  // other bindings: a set of its own
  rec.submit_and_wait();
  EXPECT_EQ(rec.descriptor_sets_written(), first + 1);
  for (int i = 0; i < 3; ++i) {  // freed and made again: new serials, new sets, right sums
    out = vk::Buffer(gpu().ctx, n * 4, vk::MemoryKind::Device, "out again");
    sum_into(out);
    EXPECT_EQ(rec.descriptor_sets_written(), first + 2 + i);
  }
}

// Records `record` dry against the arena laid out without reuse, derives its tensors' lifetimes
// from what the commands touched, then plans and allocates it: what models::make_target_state
// does with a forward.
template <class Record>
void plan_from_dry_run(vk::Arena& arena, bool reuse, Record&& record) {
  arena.lay_out_dry(gpu().ctx, "arena (dry)");
  vk::Recorder dry(gpu().ctx, vk::Recorder::Dry{});
  vk::CommandLog log;
  dry.log = &log;
  dry.begin();
  ops::OpContext oc{gpu(), dry};
  record(oc);
  EXPECT_THROW(dry.submit(), Error);  // a dry recorder records nothing to submit
  arena.plan.derive(arena.buffer, log);
  arena.allocate(gpu().ctx, reuse, "arena");
}

// A small transformer-layer-shaped op sequence on an arena: embedding, norm, fused qkv,
// rope, KV write, attention, o_proj with residual, norm, gate/up, SwiGLU, down with residual,
// final norm, lm_head, argmax. Returns the logits followed by the ids as floats.
std::vector<float> run_layer(vk::SyncMode sync, bool reuse) {
  const uint32_t T = 5, H = 64, heads = 4, kv_heads = 2, hd = 16, I = 96, V = 300, cap = 16;
  const uint32_t q_dim = heads * hd, kv_dim = kv_heads * hd, qkv_dim = q_dim + 2 * kv_dim;
  auto& ctx = gpu().ctx;
  std::vector<int32_t> ids = {1, 7, 299, 3, 42}, pos = {0, 1, 2, 3, 4};
  vk::Buffer idb = device_buffer(ids, "ids"), posb = device_buffer(pos, "pos");
  auto emb = random_floats(size_t(V) * H, 11), wqkv = random_floats(size_t(qkv_dim) * H, 12, -0.2f, 0.2f),
       wo = random_floats(size_t(H) * q_dim, 13, -0.2f, 0.2f), wgu = random_floats(size_t(2 * I) * H, 14, -0.2f, 0.2f),
       wd = random_floats(size_t(H) * I, 15, -0.2f, 0.2f), wn = random_floats(H, 16, 0.8f, 1.2f);
  vk::Buffer eb = device_buffer(to_bf16(emb), "emb"), qb = device_buffer(to_f16(wqkv), "wqkv"),
             ob = device_buffer(to_f16(wo), "wo"), gb = device_buffer(to_bf16(wgu), "wgu"),
             db = device_buffer(to_f16(wd), "wd"), nb = device_buffer(wn, "norm");
  std::vector<float> inv(hd / 2);
  for (uint32_t j = 0; j < hd / 2; ++j) inv[j] = float(1.0 / std::pow(10000.0, 2.0 * j / hd));
  vk::Buffer table = device_buffer(ops::rope_table(inv, cap), "rope");
  vk::Buffer kc(ctx, cap * kv_dim * 2, vk::MemoryKind::Device, "k"), vc(ctx, cap * kv_dim * 2, vk::MemoryKind::Device, "v");
  ops::WeightMatrix E{eb, ops::WeightType::BF16, V, H}, Wqkv{qb, ops::WeightType::F16, qkv_dim, H},
      Wo{ob, ops::WeightType::F16, H, q_dim}, Wgu{gb, ops::WeightType::BF16, 2 * I, H}, Wd{db, ops::WeightType::F16, H, I};

  vk::Arena arena;
  auto& plan = arena.plan;
  uint32_t x = plan.add("x", T * H * 4), n1 = plan.add("attn_norm", T * H * 4), qkv = plan.add("qkv", T * qkv_dim * 4),
           att = plan.add("attn", T * q_dim * 4), n2 = plan.add("ffn_norm", T * H * 4),
           gu = plan.add("gate_up", T * 2 * I * 4), act = plan.add("act", T * I * 4),
           n3 = plan.add("out_norm", T * H * 4), logits = plan.add("logits", T * V * 4, vk::Lifetime::Output),
           out_ids = plan.add("ids", T * 4, vk::Lifetime::Output);
  vk::BufferRange nw(nb);
  ops::KvLayer kv{kc, vc, cap, kv_dim};
  auto record = [&](ops::OpContext& oc) {
    ops::embed(oc, ops::IntVec{idb}, T, E, ops::Act(arena[x], H));
    ops::rms_norm(oc, ops::Act(arena[x], H), &nw, ops::Act(arena[n1], H), T, H, 1e-5f);
    ops::matmul(oc, ops::Act(arena[n1], H), Wqkv, ops::Act(arena[qkv], qkv_dim), T);
    ops::rope(oc, ops::Act(arena[qkv], qkv_dim), T, heads + kv_heads, hd, ops::IntVec{posb}, table, cap,
              ops::RopePairing::RotateHalf);
    ops::Act rows(arena[qkv], qkv_dim);
    ops::kv_write(oc, rows.cols(q_dim), rows.cols(q_dim + kv_dim), T, ops::IntVec{posb}, kv);
    ops::attention(oc, rows, kv, ops::IntVec{posb}, ops::Act(arena[att], q_dim), T,
                   ops::AttentionParams{heads, kv_heads, hd, T, 0, 0.25f});
    ops::matmul(oc, ops::Act(arena[att], q_dim), Wo, ops::Act(arena[x], H), T, /*accumulate=*/true);
    ops::rms_norm(oc, ops::Act(arena[x], H), &nw, ops::Act(arena[n2], H), T, H, 1e-5f);
    ops::matmul(oc, ops::Act(arena[n2], H), Wgu, ops::Act(arena[gu], 2 * I), T);
    ops::Act g(arena[gu], 2 * I);
    ops::swiglu(oc, g, g.cols(I), ops::Act(arena[act], I), T, I);
    ops::matmul(oc, ops::Act(arena[act], I), Wd, ops::Act(arena[x], H), T, true);
    ops::rms_norm(oc, ops::Act(arena[x], H), &nw, ops::Act(arena[n3], H), T, H, 1e-5f);
    ops::matmul(oc, ops::Act(arena[n3], H), E, ops::Act(arena[logits], V), T);
    ops::argmax(oc, ops::Act(arena[logits], V), T, V, ops::IntVec{arena[out_ids]});
  };
  plan_from_dry_run(arena, reuse, record);
  vk::Recorder rec(ctx);
  rec.sync = sync;
  ops::OpContext oc{gpu(), rec};
  rec.begin();
  record(oc);
  rec.submit_and_wait();
  if (sync == vk::SyncMode::Tracked) {
    EXPECT_LT(rec.barriers(), rec.dispatches());
  }
  auto out = read_back<float>(arena[logits], T * V);
  for (int32_t id : read_back<int32_t>(arena[out_ids], T)) out.push_back(float(id));
  return out;
}

TEST_F(RecorderTest, TrackedBarriersEqualFullBarriersBitwise) {
  EXPECT_TRUE(bitwise_equal(run_layer(vk::SyncMode::Tracked, true), run_layer(vk::SyncMode::Full, true)));
}

TEST_F(RecorderTest, ArenaReuseChangesNoBit) {
  EXPECT_TRUE(bitwise_equal(run_layer(vk::SyncMode::Tracked, true), run_layer(vk::SyncMode::Tracked, false)));
}

const vk::ShaderInterface& embedded_interface(const std::string& name) {
  static std::map<std::string, vk::ShaderInterface> reflected;
  if (!reflected.count(name))
    for (size_t i = 0; i < vk::kEmbeddedShaderCount; ++i)
      if (name == vk::kEmbeddedShaders[i].name)
        reflected[name] = vk::reflect_spirv(vk::kEmbeddedShaders[i].words, vk::kEmbeddedShaders[i].word_count, name);
  return reflected.at(name);
}

// The sizes the shaders declare (layout(local_size_...) in shaders/*.comp): what a pipeline that
// requires full subgroups checks the workgroup's x against.
TEST(SpirvReflect, WorkgroupSizeFromTheLayoutOrItsSpecializationConstant) {
  const vk::ShaderInterface& add = embedded_interface("add");  // local_size_x = 64
  EXPECT_EQ(vk::workgroup_x(add, {}), 64u);
  EXPECT_EQ(vk::workgroup_invocations(add, {7}), 64u);
  EXPECT_EQ(add.workgroup_x_spec_id, vk::ShaderInterface::kNoSpecId);
  const vk::ShaderInterface& gemm = embedded_interface("gemm_bf16");  // 16 x 8
  EXPECT_EQ(vk::workgroup_x(gemm, {}), 16u);
  EXPECT_EQ(vk::workgroup_invocations(gemm, {}), 128u);
  EXPECT_EQ(vk::workgroup_invocations(embedded_interface("gemm_bf16_texel"), {}), 64u);  // 8 x 8
  const vk::ShaderInterface& matvec = embedded_interface("matvec_bf16");  // local_size_x_id = 0
  EXPECT_EQ(matvec.workgroup_x_spec_id, 0u);
  EXPECT_EQ(vk::workgroup_x(matvec, {32, 2}), 32u);
  EXPECT_EQ(vk::workgroup_x(matvec, {}), 1u);  // glslc's default for an unset local_size_x_id
  const vk::ShaderInterface& sample = embedded_interface("sample");  // local_size_x_id = 2
  EXPECT_EQ(sample.workgroup_x_spec_id, 2u);
  EXPECT_EQ(vk::workgroup_invocations(sample, {0, 1, 256}), 256u);
}

// Where the device can require a subgroup size, every kernel runs the size the device reports as
// its default (or the profile's subgroup.size), and the features the ops choose shapes by say so; the
// fixture's validation layer checks each pipeline's requirement (full subgroups only where the
// workgroup's x is a multiple of the size, at most maxComputeWorkgroupSubgroups of them).
TEST_F(GpuTest, EveryKernelRequiresTheDevicesSubgroupSizeWhereItCan) {
  const vk::Context& ctx = gpu().ctx;
  const vk::DeviceInfo probed = vk::probe_device(ctx.instance, ctx.physical, ctx.info.index);
  const vk::DeviceFeatures& f = ctx.info.features;
  if (!probed.features.subgroup_size_control) {
    EXPECT_EQ(ctx.required_subgroup_size, 0u);
    EXPECT_EQ(f.min_subgroup_size, probed.features.min_subgroup_size);
    return;
  }
  // The driver's default, 16 on Intel GPUs, or the profile's subgroup.size: as settled_device_info
  // (what `eaglevk devices --env` shows) works it out, and as the profile records it.
  EXPECT_EQ(ctx.required_subgroup_size, vk::settled_device_info(probed).features.subgroup_size);
  EXPECT_EQ(gpu().profile.subgroup_size, ctx.required_subgroup_size);
  EXPECT_EQ(f.subgroup_size, ctx.required_subgroup_size);
  EXPECT_EQ(f.min_subgroup_size, f.max_subgroup_size);
  EXPECT_LE(f.max_workgroup_invocations, ctx.required_subgroup_size * f.max_compute_workgroup_subgroups);
  // A matrix-vector workgroup is then one subgroup on every device that has the control.
  const ops::MatvecShape shape = ops::matvec_shape(gpu());
  EXPECT_EQ(shape.one_subgroup, shape.workgroup == f.subgroup_size ? 1u : 0u);
}

// A hand-made log over four tensors laid out without reuse: command i writes tensor i and reads
// tensor i - 1 (a chain, as a forward's intermediates are).
struct ChainLog {
  vk::ArenaPlan plan;
  vk::Buffer layout;  // no memory: only its address names the arena in the log
  uint32_t a, b, c, d;
  ChainLog() {
    a = plan.add("a", 1000), b = plan.add("b", 1000), c = plan.add("c", 1000), d = plan.add("d", 500);
    plan.plan(false);
    layout.bytes = plan.total_bytes;
  }
  void access(vk::CommandLog& log, uint32_t command, uint32_t tensor, bool read) const {
    const vk::ArenaPlan::Tensor& t = plan.tensors[tensor];
    log.entries.push_back({command, vk::Access{&layout, t.offset, t.bytes, t.bytes, 1, read, !read}});
    log.commands = std::max(log.commands, command + 1);
  }
  vk::CommandLog chain() const {
    vk::CommandLog log;
    for (uint32_t i = 0; i < 4; ++i) {
      if (i) access(log, i, i - 1, true);
      access(log, i, i, false);
    }
    access(log, 4, 3, true);
    return log;
  }
};

// Byte ranges that meet, from the offsets alone.
bool share_bytes(const vk::ArenaPlan& plan, uint32_t i, uint32_t j) {
  const auto &x = plan.tensors[i], &y = plan.tensors[j];
  return x.offset < y.offset + y.bytes && y.offset < x.offset + x.bytes;
}

TEST(ArenaPlan, LiveRangesComeFromTheCommandsThatTouchEachTensor) {
  ChainLog c;
  const auto ranges = vk::live_ranges(c.plan, c.layout, c.chain());
  ASSERT_EQ(ranges.size(), 4u);
  for (uint32_t i = 0; i < 4; ++i) {
    ASSERT_EQ(ranges[i].size(), 1u) << i;
    EXPECT_EQ(ranges[i][0].first, i);
    EXPECT_EQ(ranges[i][0].last, i + 1);
  }
  // A write after the reads starts a second value: two ranges, with the gap between them free.
  vk::CommandLog twice = c.chain();
  c.access(twice, 5, c.a, false);
  c.access(twice, 6, c.a, true);
  const auto again = vk::live_ranges(c.plan, c.layout, twice);
  ASSERT_EQ(again[c.a].size(), 2u);
  EXPECT_EQ(again[c.a][1].first, 5u);
  EXPECT_EQ(again[c.a][1].last, 6u);
  // An Output tensor lives to the end of the pass (the commands recorded after it read it).
  ChainLog out;
  out.plan.tensors[out.b].lifetime = vk::Lifetime::Output;
  EXPECT_EQ(vk::live_ranges(out.plan, out.layout, out.chain())[out.b][0].last, 5u);
  // A tensor of one pass read before the pass writes it would read a stale value.
  vk::CommandLog stale;
  c.access(stale, 0, c.b, true);
  EXPECT_THROW(vk::live_ranges(c.plan, c.layout, stale), Error);
}

TEST(ArenaPlan, ReusesBytesOnlyAcrossDisjointLifetimes) {
  ChainLog c;
  vk::ArenaPlan& plan = c.plan;
  EXPECT_THROW(plan.plan(true), Error);  // no derived pass: nothing says what may share
  plan.derive(c.layout, c.chain());
  plan.plan(true);
  EXPECT_FALSE(share_bytes(plan, c.a, c.b));
  EXPECT_FALSE(share_bytes(plan, c.b, c.c));
  EXPECT_FALSE(share_bytes(plan, c.c, c.d));
  EXPECT_TRUE(share_bytes(plan, c.a, c.c) || share_bytes(plan, c.a, c.d) || share_bytes(plan, c.b, c.d));
  EXPECT_LT(plan.total_bytes, 3500u);
  EXPECT_TRUE(plan.aliased().empty());
  plan.plan(false);
  EXPECT_FALSE(share_bytes(plan, c.a, c.c));
  EXPECT_GE(plan.total_bytes, 3500u);
}

// The negative control: a plan made for one op order, checked against a pass whose order changed
// (a reads again after c is written, as a fixed, hand-numbered plan would not know), shows the
// tensors it lets share bytes while both are live; the plan derived from the new order has none.
TEST(ArenaPlan, AnOpOrderChangeThatAStalePlanWouldAliasIsCaught) {
  ChainLog c;
  vk::CommandLog changed = c.chain();
  c.access(changed, 3, c.a, true);  // command 3 now reads a as well
  vk::ArenaPlan stale = c.plan, fresh = c.plan;
  stale.derive(c.layout, c.chain());
  stale.plan(true);
  ASSERT_TRUE(share_bytes(stale, c.a, c.c) || share_bytes(stale, c.a, c.d));
  fresh.derive(c.layout, changed);
  // The stale offsets under the new order's conflicts.
  vk::ArenaPlan check = fresh;
  for (size_t i = 0; i < check.tensors.size(); ++i) check.tensors[i].offset = stale.tensors[i].offset;
  EXPECT_FALSE(check.aliased().empty());
  fresh.plan(true);
  EXPECT_TRUE(fresh.aliased().empty());
  // An untouched tensor may be used by a pass no recording saw: it shares with nothing.
  ChainLog idle;
  vk::CommandLog without_d;
  for (const auto& e : idle.chain().entries)
    if (e.access.offset != idle.plan.tensors[idle.d].offset) without_d.entries.push_back(e);
  without_d.commands = 5;
  idle.plan.derive(idle.layout, without_d);
  idle.plan.plan(true);
  for (uint32_t other : {idle.a, idle.b, idle.c}) EXPECT_FALSE(share_bytes(idle.plan, idle.d, other));
}

// llama.cpp's EAGLE-3 race: two independent RMSNorms (token embedding, hidden state) write
// the two halves of one buffer that the next matmul reads whole, with arena reuse on. The
// result must equal the reference, and the validation layer must stay silent.
TEST_F(RecorderTest, TwoNormsIntoOneBufferThenMatmul) {
  const uint32_t T = 4, H = 96, N = 40;
  auto emb = random_floats(T * H, 21, -2, 2), hidden = random_floats(T * H, 22, -2, 2);
  auto w_in = random_floats(H, 23, 0.5, 1.5), w_hidden = random_floats(H, 24, 0.5, 1.5);
  auto wq = random_floats(size_t(N) * 2 * H, 25);
  vk::Buffer wib = device_buffer(w_in, "input_layernorm"), whb = device_buffer(w_hidden, "hidden_norm"),
             wqb = device_buffer(wq, "q_proj");
  vk::Arena arena;
  // Lifetimes derived from the recording, with reuse on. The sources are uploaded before the
  // pass, so they are carried into it.
  uint32_t e = arena.plan.add("embedding", T * H * 4, vk::Lifetime::Carried),
           h = arena.plan.add("hidden", T * H * 4, vk::Lifetime::Carried), cat = arena.plan.add("attn_in", T * 2 * H * 4),
           q = arena.plan.add("q", T * N * 4, vk::Lifetime::Output);
  vk::BufferRange wi(wib), wh(whb);
  auto record = [&](ops::OpContext& oc) {
    ops::rms_norm(oc, ops::Act(arena[e], H), &wi, ops::Act(arena[cat], 2 * H), T, H, 1e-5f);
    ops::rms_norm(oc, ops::Act(arena[h], H), &wh, ops::Act(arena[cat], 2 * H, H), T, H, 1e-5f);
    ops::matmul(oc, ops::Act(arena[cat], 2 * H), ops::WeightMatrix{wqb, ops::WeightType::F32, N, 2 * H},
                ops::Act(arena[q], N), T);
  };
  plan_from_dry_run(arena, true, record);
  vk::Recorder rec(gpu().ctx);
  rec.sync = vk::SyncMode::Tracked;
  ops::OpContext oc{gpu(), rec};
  vk::upload(gpu().ctx, arena[e], emb.data(), emb.size() * 4);
  vk::upload(gpu().ctx, arena[h], hidden.data(), hidden.size() * 4);
  rec.begin();
  record(oc);
  rec.submit_and_wait();
  auto ne = ref_rms_norm(emb, &w_in, T, H, 1e-5f), nh = ref_rms_norm(hidden, &w_hidden, T, H, 1e-5f);
  std::vector<float> concat;
  for (uint32_t t = 0; t < T; ++t) {
    for (uint32_t i = 0; i < H; ++i) concat.push_back(float(ne[t * H + i]));
    for (uint32_t i = 0; i < H; ++i) concat.push_back(float(nh[t * H + i]));
  }
  EXPECT_TRUE(all_close(read_back<float>(arena[q], T * N), ref_matmul(concat, wq, T, N, 2 * H), 1e-4, 1e-4));
}

}  // namespace
}  // namespace eaglevk::testing

namespace eaglevk::testing {
namespace {

TEST_F(RecorderTest, TimestampsPerNamedDispatch) {
  ASSERT_TRUE(gpu().ctx.info.features.timestamps);
  const uint32_t n = 4096;
  auto x = random_floats(n, 5);
  vk::Buffer a = device_buffer(x, "a");
  vk::Recorder rec(gpu().ctx);
  rec.profile = true;
  ops::OpContext oc{gpu(), rec};
  rec.begin();
  ops::softmax(oc, ops::Act(a, n), 1, n);
  ops::add(oc, a, a, a, n);
  rec.copy(vk::BufferRange(a, 0, 64), vk::BufferRange(a, 64, 64), "layer12.k23");
  // A matrix-vector product: x [1, 64], W [8, 64] f32, y [1, 8].
  vk::Buffer w = device_buffer(random_floats(8 * 64, 6), "w"), y(gpu().ctx, 8 * 4, vk::MemoryKind::Device, "y");
  ops::matmul(oc, ops::Act(a, 64), ops::WeightMatrix{w, ops::WeightType::F32, 8, 64}, ops::Act(y, 8), 1);
  rec.submit_and_wait();
  auto t = rec.timings();
  // Commands are named by shader family and op name, numbers folded (layers share a line).
  ASSERT_EQ(t.size(), 4u);
  EXPECT_EQ(t[0].name, "softmax softmax");
  EXPECT_EQ(t[1].name, "add add");
  EXPECT_EQ(t[2].name, "transfer layer#.k#");
  // matvec_f32, or matvec_f32_texel where the device reads through texel buffers (lavapipe).
  EXPECT_EQ(t[3].name.rfind("matvec_f32", 0), 0u) << t[3].name;
  EXPECT_EQ(t[3].name.substr(t[3].name.size() - 7), " matmul") << t[3].name;
  EXPECT_GE(t[0].ms, 0.0);
  // Bytes of the bindings: the copy reads 64 and writes 64; the product reads x and W, writes y.
  EXPECT_EQ(t[2].bytes, 128u);
  EXPECT_EQ(t[3].bytes, 64u * 4 + 8 * 64 * 4 + 8 * 4);
  // The process-wide report (EAGLEVK_PROFILE=1) holds each command once per submission, with
  // GB/s for the matrix-vector kernels only.
  const std::string report = vk::profile_report(0);
  for (const std::string& name : {std::string("softmax softmax"), std::string("add add"),
                                  std::string("transfer layer#.k#"), t[3].name, std::string("host recording")})
    EXPECT_NE(report.find(name), std::string::npos) << name << " missing in:\n" << report;
  auto line_of = [&](const std::string& name) {
    size_t end = report.find(name), begin = report.rfind('\n', end);
    return report.substr(begin + 1, end - begin - 1);
  };
  EXPECT_NE(line_of("softmax softmax").find(" - "), std::string::npos) << report;
  EXPECT_EQ(line_of(t[3].name).find(" - "), std::string::npos) << report;
  vk::profile_reset();
  EXPECT_EQ(vk::profile_report(0), "");
}

}  // namespace
}  // namespace eaglevk::testing
