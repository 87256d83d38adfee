// eaglevk_kernel_table: the GPU check's kernel table (tools/gpu/gpu_check.sh). Times the
// matrix-vector products at Llama-3.1-8B's shapes for each weight type and 1, 2, 4 and 8
// activation rows, and the prefill GEMM, from GPU timestamps (one after every dispatch, at least
// 20 dispatches a submission), on rotating weight buffers that together exceed 4x the L2 so
// that every dispatch reads its weights from memory, not from the cache. A ceiling measured in
// the same run (a device copy, read + written, and a read-only reduction) makes each figure a
// fraction of what the device can stream. Writes one JSON document.
//
//   eaglevk_kernel_table [--l2-mib N] [--scale S] [--types f16,q4_k,...] [--rows 1,2,4,8]
//                        [--gemm-rows N] [--reps N] [--read-mib N] [--shapes WG,OUTS;...]
//                        [--rows-outs N,...] [--gemm-variants] [--deadline-s S] [-o FILE]
// --scale divides every shape's dimensions (a dry run on a CPU device); --shapes adds
// matrix-vector workgroup shapes to time beside the device's own choice at one row (tuning);
// --rows-outs adds outputs per workgroup to time at every row count above one (MatvecShape's
// rows_outs, the profile's matvec.rows_outs), with the device's workgroup and split. --gemm-variants
// times the coopmat GEMM's switches (block 64 or 128; for the 128 block the prefetch, a k tile of
// 64 and f16 inputs, alone and together) beside the device's choice, for q4_k and f16, with the
// compiler's statistics of each pipeline (registers, spills) where the driver gives them.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <eaglevk/error.h>

#include "runtime/ops/ops.h"
#include "shaders/shared_constants.h"

namespace {

using namespace eaglevk;

struct Options {
  uint64_t l2_bytes = 64ull << 20;
  uint32_t scale = 1;
  // The decisive types first (Q4_K_M's Q4_K and Q6_K, F16), so a run cut short still has them.
  std::vector<std::string> types = {"q4_k", "f16", "q6_k", "q8_0", "q5_k", "bf16", "q4_0", "fp8_b32", "int4_b32"};
  std::vector<uint32_t> rows = {1, 2, 4, 8};
  uint32_t gemm_rows = 512;
  uint32_t reps = 24;
  uint64_t read_bytes = 4ull << 30;
  std::vector<std::pair<uint32_t, uint32_t>> shapes;  // extra (workgroup, outputs)
  std::vector<uint32_t> rows_outs;                     // extra outputs at several rows
  bool gemm_variants = false;
  double deadline_s = 1e9;
  std::string output;
};

// Llama-3.1-8B's products: q|k|v, o, gate|up, down, lm_head (rows = output features).
struct Shape {
  const char* name;
  uint32_t n, k;
};
constexpr Shape kShapes[] = {{"o_proj", 4096, 4096},
                             {"qkv", 6144, 4096},
                             {"gate_up", 28672, 4096},
                             {"down", 4096, 14336},
                             {"lm_head", 128256, 4096}};

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  for (size_t p = 0; p <= s.size();) {
    size_t c = s.find(sep, p);
    if (c == std::string::npos) c = s.size();
    if (c > p) out.push_back(s.substr(p, c - p));
    p = c + 1;
  }
  return out;
}

uint32_t to_u32(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  const unsigned long x = std::strtoul(v.c_str(), &end, 10);
  if (v.empty() || *end || x == 0 || x > 1u << 30) fail("{} {}: expected a positive integer", flag, v);
  return uint32_t(x);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--gemm-variants") {
      o.gemm_variants = true;
      continue;
    }
    if (i + 1 >= argc) fail("{} needs a value", a);
    const std::string v = argv[++i];
    if (a == "--l2-mib") o.l2_bytes = uint64_t(to_u32(a, v)) << 20;
    else if (a == "--scale") o.scale = to_u32(a, v);
    else if (a == "--types") o.types = split(v, ',');
    else if (a == "--rows") {
      o.rows.clear();
      for (const std::string& r : split(v, ',')) o.rows.push_back(to_u32(a, r));
    } else if (a == "--gemm-rows") o.gemm_rows = v == "0" ? 0 : to_u32(a, v);
    else if (a == "--reps") o.reps = std::max(20u, to_u32(a, v));
    else if (a == "--read-mib") o.read_bytes = uint64_t(to_u32(a, v)) << 20;
    else if (a == "--deadline-s") o.deadline_s = to_u32(a, v);
    else if (a == "-o") o.output = v;
    else if (a == "--shapes") {
      for (const std::string& s : split(v, ';')) {
        const auto parts = split(s, ',');
        if (parts.size() != 2) fail("--shapes {}: expected WORKGROUP,OUTPUTS;...", v);
        o.shapes.push_back({to_u32(a, parts[0]), to_u32(a, parts[1])});
      }
    } else if (a == "--rows-outs") {
      for (const std::string& r : split(v, ',')) {
        const uint32_t outs = to_u32(a, r);
        if (outs > MATVEC_MAX_OUTS) fail("--rows-outs {}: outputs per workgroup must be 1..{}", v, MATVEC_MAX_OUTS);
        o.rows_outs.push_back(outs);
      }
    } else fail("unknown option {}", a);
  }
  return o;
}

ops::WeightType type_named(const std::string& name) {
  for (int t = 0; t <= int(ops::WeightType::INT4_B32); ++t)
    if (name == ops::weight_type_name(ops::WeightType(t))) return ops::WeightType(t);
  fail("unknown weight type '{}'", name);
}

// GPU milliseconds of each named command of one submission of `reps` commands (the first
// untimed submission builds the pipelines and faults the memory in).
template <typename Record>
std::vector<double> time_commands(ops::Gpu& gpu, uint32_t reps, const char* prefix, Record record) {
  vk::Recorder rec(gpu.ctx);
  rec.begin();
  record(rec, 0u);
  rec.submit_and_wait();
  rec.profile = true;
  rec.begin();
  for (uint32_t i = 0; i < reps; ++i) record(rec, i);
  rec.submit_and_wait();
  std::vector<double> ms;
  for (const vk::TimedCommand& c : rec.timings())
    if (c.name.rfind(prefix, 0) == 0) ms.push_back(c.ms);
  if (ms.empty()) fail("no GPU timestamps for '{}' (the device's queue has no timestampValidBits?)", prefix);
  return ms;
}

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

// Small f16 values (about 0.01): valid blocks of every format (the scales decode to small numbers).
void fill_weights(ops::Gpu& gpu, vk::BufferRange range) {
  vk::Recorder rec(gpu.ctx);
  rec.begin();
  rec.fill(range, 0x211e211eu);
  rec.submit_and_wait();
}

struct Ceiling {
  double copy_gbps = 0, read_gbps = 0;
};

Ceiling measure_ceiling(ops::Gpu& gpu, const Options& o) {
  Ceiling c;
  const auto& info = gpu.ctx.info;
  // The copy: one buffer into another, bytes read + written, as large as one binding allows.
  const uint64_t copy_bytes = std::min<uint64_t>({o.read_bytes / 4, gpu.ctx.max_allocation / 2, 1ull << 30}) & ~uint64_t(255);
  {
    vk::Buffer a(gpu.ctx, copy_bytes, vk::MemoryKind::Device, "copy source"),
        b(gpu.ctx, copy_bytes, vk::MemoryKind::Device, "copy destination");
    fill_weights(gpu, vk::BufferRange(a));
    const auto ms = time_commands(gpu, 20, "transfer", [&](vk::Recorder& rec, uint32_t i) {
      if (i % 2) rec.copy(b, a, "copy");
      else rec.copy(a, b, "copy");
    });
    c.copy_gbps = 2.0 * double(copy_bytes) / (median(ms) * 1e6);
  }
  // The read: `read_bytes` over buffers of at most one allocation, each bound in chunks of at
  // most one binding's range; the dispatches of a pass together read every byte once.
  const uint64_t chunk = std::min<uint64_t>({info.features.max_storage_buffer_range, 1ull << 30, o.read_bytes}) & ~uint64_t(255);
  const uint64_t per_buffer = std::max(chunk, std::min<uint64_t>(gpu.ctx.max_allocation, 2ull << 30) / chunk * chunk);
  std::vector<std::unique_ptr<vk::Buffer>> buffers;
  std::vector<vk::BufferRange> chunks;
  for (uint64_t left = o.read_bytes; left >= chunk;) {
    const uint64_t bytes = std::min(per_buffer, left / chunk * chunk);
    buffers.push_back(std::make_unique<vk::Buffer>(gpu.ctx, bytes, vk::MemoryKind::Device, "read source"));
    fill_weights(gpu, vk::BufferRange(*buffers.back()));
    for (uint64_t off = 0; off < bytes; off += chunk) chunks.push_back(vk::BufferRange(*buffers.back()).sub(off, chunk));
    left -= bytes;
  }
  vk::Buffer sink(gpu.ctx, 256, vk::MemoryKind::Device, "read sink");
  const vk::Kernel& kernel = gpu.pipelines.get("read_bandwidth");
  // Enough lanes to keep every core busy: a few per byte of a megabyte.
  const uint32_t groups = uint32_t(std::min<uint64_t>(chunk / 16 / 256, 8192));
  struct {
    uint32_t words, lanes;
  } push{uint32_t(chunk / 16), groups * 256};
  const uint32_t passes = std::max<uint32_t>(1, (20 + uint32_t(chunks.size()) - 1) / uint32_t(chunks.size()));
  const auto ms = time_commands(gpu, passes * uint32_t(chunks.size()), "read_bandwidth", [&](vk::Recorder& rec, uint32_t i) {
    rec.dispatch(kernel, {vk::reads(chunks[i % chunks.size()]), vk::writes(vk::BufferRange(sink))}, push, groups, 1, 1,
                 "read");
  });
  double total = 0;
  for (double m : ms) total += m;
  c.read_gbps = double(chunk) * double(ms.size()) / (total * 1e6);
  return c;
}

// One configuration of the coopmat GEMM's switches (ops::Gpu's gemm_* fields).
struct GemmConfig {
  uint32_t block = 64;
  bool prefetch = false, f16_inputs = false;
  uint32_t tile_k = 32;
  bool operator==(const GemmConfig&) const = default;
};

GemmConfig gemm_config(const ops::Gpu& gpu) {
  return {gpu.gemm_block, gpu.gemm_prefetch, gpu.gemm_f16_inputs, gpu.gemm_tile_k};
}

void set_gemm_config(ops::Gpu& gpu, const GemmConfig& c) {
  gpu.gemm_block = c.block;
  gpu.gemm_prefetch = c.prefetch;
  gpu.gemm_f16_inputs = c.f16_inputs;
  gpu.gemm_tile_k = c.tile_k;
}

// The device's choice first, then the alternatives it can run: the 64 block, and the 128
// block's prefetch, f16 inputs and k tile of 64 (which needs f16 inputs' shared memory), alone
// and together.
std::vector<GemmConfig> gemm_configs(const ops::Gpu& gpu, bool variants) {
  const GemmConfig own = gemm_config(gpu);
  std::vector<GemmConfig> out = {own};
  if (!variants || !gpu.coopmat_gemm) return out;
  std::vector<GemmConfig> all = {{64, false, false, 32}, {64, false, true, 32}};
  if (ops::coopmat_unavailable(gpu.ctx, 128).empty()) {
    const auto& f = gpu.ctx.info.features;
    for (bool f16 : {false, true})
      for (bool prefetch : {false, true})
        for (uint32_t tile_k : {32u, 64u})
          if (ops::coopmat128_shared_bytes(f.coopmat_m, f.coopmat_n, tile_k, !f16) <= f.max_compute_shared_memory)
            all.push_back({128, prefetch, f16, tile_k});
  }
  for (const GemmConfig& c : all)
    if (!(c == own)) out.push_back(c);
  return out;
}

// The compiler's statistics of the pipeline a product of `type` runs under the GEMM's current
// switches (the name and constants ops::matmul builds).
nlohmann::json gemm_pipeline_statistics(ops::Gpu& gpu, const std::string& type_name) {
  nlohmann::json stats = nlohmann::json::object();
  if (!gpu.coopmat_gemm) return stats;
  const ops::CoopmatKernel cm = ops::coopmat_kernel(gpu.ctx, gpu.gemm_block);
  const vk::Kernel& kernel = gpu.pipelines.get(fmt::format("gemm_{}{}", type_name, cm.suffix),
                                               ops::coopmat_gemm_spec(gpu, cm, gpu.gemm_block));
  for (const vk::PipelineStatistic& st : vk::pipeline_statistics(gpu.ctx, kernel.pipeline)) stats[st.name] = st.value;
  return stats;
}

struct Timed {
  double median_us = 0, mean_us = 0;
  uint32_t dispatches = 0, buffers = 0;
};

// Copies of one matrix's weights, enough to exceed 4x the L2 together and never one only, so
// that rotating through them every dispatch reads its weights from memory. Made once per type
// and shape, for every row count and workgroup shape timed on them.
struct RotatingWeights {
  std::vector<std::unique_ptr<vk::Buffer>> copies;
  RotatingWeights(ops::Gpu& gpu, const Options& o, uint64_t bytes) {
    const uint64_t count = std::max<uint64_t>(2, (4 * o.l2_bytes + bytes - 1) / bytes + 1);
    for (uint64_t i = 0; i < count; ++i) {
      copies.push_back(std::make_unique<vk::Buffer>(gpu.ctx, bytes, vk::MemoryKind::Device, "weights"));
      fill_weights(gpu, vk::BufferRange(*copies.back()));
    }
  }
};

// One product: `reps` dispatches over the rotating copies, the same x and y.
Timed time_product(ops::Gpu& gpu, const Options& o, const RotatingWeights& w, ops::WeightType type, uint32_t n,
                   uint32_t k, uint32_t rows) {
  const size_t copies = w.copies.size();
  std::vector<float> x(size_t(rows) * k, 0.5f);
  vk::Buffer xb(gpu.ctx, x.size() * 4, vk::MemoryKind::Device, "x"),
      yb(gpu.ctx, uint64_t(rows) * n * 4, vk::MemoryKind::Device, "y");
  vk::upload(gpu.ctx, xb, x.data(), x.size() * 4);
  const bool gemm = rows > MATVEC_MAX_ROWS;
  const auto ms = time_commands(gpu, o.reps, gemm ? "gemm" : "matvec", [&](vk::Recorder& rec, uint32_t i) {
    ops::OpContext oc{gpu, rec};
    // The same y each time: a write-after-write barrier between dispatches, so each is timed alone.
    ops::matmul(oc, ops::Act(xb, k), ops::WeightMatrix{vk::BufferRange(*w.copies[i % copies]), type, n, k},
                ops::Act(yb, n), rows, false, ops::MatmulPath::Auto, "product");
  });
  Timed t;
  t.median_us = median(ms) * 1e3;
  for (double m : ms) t.mean_us += m * 1e3 / double(ms.size());
  t.dispatches = uint32_t(ms.size());
  t.buffers = uint32_t(copies);
  return t;
}

// The GEMM of `rows` rows under the device's switches and, with --gemm-variants, for q4_k and
// f16, under each alternative the device can run; the switches are restored after.
void time_gemm_configs(ops::Gpu& gpu, const Options& o, const RotatingWeights& weights, ops::WeightType type,
                       const std::string& type_name, const char* matrix, uint32_t n, uint32_t k, uint32_t rows,
                       nlohmann::json& kernels) {
  const GemmConfig own = gemm_config(gpu);
  const bool variants = o.gemm_variants && (type_name == "q4_k" || type_name == "f16");
  for (const GemmConfig& c : gemm_configs(gpu, variants)) {
    set_gemm_config(gpu, c);
    const Timed t = time_product(gpu, o, weights, type, n, k, rows);
    nlohmann::json row = {{"type", type_name}, {"matrix", matrix}, {"n", n}, {"k", k}, {"rows", rows},
                          {"median_us", t.median_us}, {"mean_us", t.mean_us}, {"dispatches", t.dispatches},
                          {"weight_buffers", t.buffers},
                          {"weight_bytes", double(n) * double(ops::weight_row_bytes(type, k))},
                          {"kernel", gpu.coopmat_gemm ? "gemm_coopmat" : "gemm"},
                          {"tflop_per_s", 2.0 * n * k * rows / (t.median_us * 1e6)}};
    if (gpu.coopmat_gemm) {
      row["gemm_block"] = c.block;
      row["gemm_prefetch"] = c.prefetch;
      row["gemm_f16_inputs"] = c.f16_inputs;
      row["gemm_tile_k"] = c.tile_k;
      row["gemm_default"] = c == own;
      row["pipeline_statistics"] = gemm_pipeline_statistics(gpu, type_name);
    }
    fmt::print(stderr, "kernel_table: {} {} {}x{} rows {} GEMM{}: {:.1f} us, {:.2f} TFLOP/s\n", type_name, matrix, n, k,
               rows,
               gpu.coopmat_gemm ? fmt::format(" (block {}, prefetch {}, {} inputs, k tile {})", c.block, c.prefetch,
                                              c.f16_inputs ? "f16" : "split", c.tile_k)
                                : "",
               t.median_us, row["tflop_per_s"].get<double>());
    kernels.push_back(std::move(row));
  }
  set_gemm_config(gpu, own);
}

int run(const Options& o) {
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  // With the driver's compiler statistics (registers per lane, spills) where it offers them.
  vk::ContextOptions options = vk::ContextOptions::from_env();
  options.pipeline_statistics = true;
  ops::Gpu gpu(options);
  const auto& info = gpu.ctx.info;
  nlohmann::json out;
  out["device"] = info.name;
  out["subgroup_size"] = info.features.subgroup_size;
  out["l2_bytes_assumed"] = o.l2_bytes;
  out["scale"] = o.scale;
  out["reps"] = o.reps;
  out["pipeline_statistics"] = gpu.ctx.pipeline_statistics
                                   ? "captured (VK_KHR_pipeline_executable_properties)"
                                   : "not offered by this device's driver";
  const Ceiling ceiling = measure_ceiling(gpu, o);
  out["ceiling"] = {{"copy_gb_per_s", ceiling.copy_gbps}, {"read_gb_per_s", ceiling.read_gbps},
                    {"read_bytes", o.read_bytes}};
  fmt::print(stderr, "kernel_table: {}: copy {:.1f} GB/s (read + written), read {:.1f} GB/s\n", info.name,
             ceiling.copy_gbps, ceiling.read_gbps);
  std::vector<std::optional<ops::MatvecShape>> shapes = {gpu.matvec_shape_override};
  for (auto [wg, outs] : o.shapes) {
    ops::MatvecShape s = ops::matvec_shape(gpu);
    s.workgroup = wg;
    s.outs = s.block_outs = outs;
    s.one_subgroup = info.features.min_subgroup_size == info.features.max_subgroup_size && wg == info.features.subgroup_size;
    shapes.push_back(s);
  }
  // At several rows: the device's shape, then the same with each --rows-outs value.
  std::vector<std::optional<ops::MatvecShape>> rows_shapes = {gpu.matvec_shape_override};
  for (uint32_t outs : o.rows_outs) {
    ops::MatvecShape s = ops::matvec_shape(gpu);
    s.rows_outs = outs;
    rows_shapes.push_back(s);
  }
  nlohmann::json kernels = nlohmann::json::array();
  bool truncated = false;
  std::vector<uint32_t> all_rows = o.rows;
  if (o.gemm_rows) all_rows.push_back(o.gemm_rows);
  for (const std::string& type_name : o.types) {
    const ops::WeightType type = type_named(type_name);
    for (const Shape& shape : kShapes) {
      const uint32_t block = ops::weight_type_block_elements(type);
      const uint32_t n = std::max(1u, shape.n / o.scale), k = std::max(block, shape.k / o.scale / block * block);
      if (elapsed() > o.deadline_s) {
        truncated = true;
        break;
      }
      const RotatingWeights weights(gpu, o, uint64_t(n) * ops::weight_row_bytes(type, k));
      for (uint32_t rows : all_rows) {
        const bool gemm = rows > MATVEC_MAX_ROWS;
        // The GEMM for the two shapes a prefill spends most on, not every one.
        if (gemm && std::strcmp(shape.name, "gate_up") != 0 && std::strcmp(shape.name, "o_proj") != 0) continue;
        // The alternative workgroup shapes at one row, the decode step's case; the alternative
        // outputs per workgroup at several rows, a verify pass's.
        const auto& alternatives = rows == 1 ? shapes : rows_shapes;
        const bool quantized = ops::weight_type_quantized(type);
        const uint32_t default_outs = ops::matvec_shape(gpu, ops::WeightMatrix{{}, type, n, k}).outs_for(quantized, rows);
        if (gemm) {
          time_gemm_configs(gpu, o, weights, type, type_name, shape.name, n, k, rows, kernels);
          continue;
        }
        for (size_t si = 0; si < alternatives.size(); ++si) {
          if (elapsed() > o.deadline_s) {
            truncated = true;
            break;
          }
          gpu.matvec_shape_override = alternatives[si];
          const ops::MatvecShape used = ops::matvec_shape(gpu, ops::WeightMatrix{{}, type, n, k});
          // A --rows-outs value that is the device's own: timed once, as the default.
          if (rows > 1 && si > 0 && used.outs_for(quantized, rows) == default_outs) continue;
          const Timed t = time_product(gpu, o, weights, type, n, k, rows);
          const double bytes = double(n) * double(ops::weight_row_bytes(type, k));
          const double gbps = bytes / (t.median_us * 1e3);
          nlohmann::json row = {{"type", type_name}, {"matrix", shape.name}, {"n", n}, {"k", k}, {"rows", rows},
                                {"median_us", t.median_us}, {"mean_us", t.mean_us}, {"dispatches", t.dispatches},
                                {"weight_buffers", t.buffers}, {"weight_bytes", bytes}};
          {
            row["kernel"] = "matvec";
            row["workgroup"] = used.workgroup;
            row["outputs"] = used.outs_for(quantized, rows);
            row["shape_override"] = rows == 1 && si > 0;
            row["rows_outs_override"] = rows > 1 && si > 0;
            row["gb_per_s"] = gbps;
            row["fraction_of_read"] = ceiling.read_gbps > 0 ? gbps / ceiling.read_gbps : 0.0;
            // The pipeline ops::matmul ran (its name and constants as ops::matmul builds them).
            const uint32_t outs = used.outs_for(quantized, rows);
            const std::string shader = fmt::format("matvec_{}{}", type_name, used.texel_loads ? "_texel" : "");
            const vk::Kernel& kernel =
                gpu.pipelines.get(shader, {used.workgroup, outs, used.one_subgroup, /*GLU=*/0, /*NORM_WG=*/0, rows});
            nlohmann::json stats = nlohmann::json::object();
            for (const vk::PipelineStatistic& st : vk::pipeline_statistics(gpu.ctx, kernel.pipeline))
              stats[st.name] = st.value;
            row["pipeline_statistics"] = std::move(stats);
          }
          fmt::print(stderr, "kernel_table: {} {} {}x{} rows {}{}: {:.1f} us{}\n", type_name, shape.name, n, k, rows,
                     si > 0 ? fmt::format(" (workgroup {}, outputs {})", used.workgroup, used.outs_for(quantized, rows))
                            : "",
                     t.median_us, fmt::format(", {:.1f} GB/s", gbps));
          kernels.push_back(std::move(row));
        }
        gpu.matvec_shape_override = shapes[0];  // rows_shapes[0] too
      }
    }
  }
  out["kernels"] = std::move(kernels);
  out["truncated"] = truncated;
  out["seconds"] = elapsed();
  const std::string text = out.dump(1);
  if (o.output.empty()) {
    fmt::print("{}\n", text);
  } else {
    std::FILE* f = std::fopen(o.output.c_str(), "w");
    if (!f) fail("cannot write {}", o.output);
    std::fputs(text.c_str(), f);
    std::fclose(f);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "eaglevk_kernel_table: %s\n", e.what());
    return 1;
  }
}
