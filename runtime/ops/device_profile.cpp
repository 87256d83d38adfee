#include "runtime/ops/device_profile.h"

#include <algorithm>

#include <fmt/format.h>

#include <eaglevk/error.h>

#include "runtime/ops/gpu.h"
#include "runtime/ops/ops.h"
#include "runtime/vk/switches.h"
#include "shaders/shared_constants.h"

namespace eaglevk::ops {

namespace {

bool cpu_device(const vk::DeviceInfo& info) { return info.type == VK_PHYSICAL_DEVICE_TYPE_CPU; }

// The largest workgroup the shared-memory reduction serves: one partial sum per subgroup, at
// most 64 of them.
uint32_t max_reduction_workgroup(const vk::DeviceFeatures& f) {
  return std::min(f.max_workgroup_invocations, 64u * std::max(f.min_subgroup_size, 1u));
}

// The shape matvec_shape_for gives this device.
MatvecShape device_matvec_shape(const vk::DeviceInfo& info) {
  const auto& f = info.features;
  MatvecShape shape = matvec_shape_for(f.subgroup_size, f.min_subgroup_size, f.max_subgroup_size,
                                       cpu_device(info) && f.storage_texel_buffers, info.vendor_id);
  if (shape.split_workgroup > max_reduction_workgroup(f)) shape.split_workgroup = 0;
  return shape;
}

// shapes=gpu: the shapes a GPU with this device's subgroup size gets (NVIDIA's policy: storage
// buffers, 64-invocation attention workgroups, up to 8 rows of an expert a workgroup, columns
// split over subgroups for matrices with few rows), made runnable here, with the split from 64
// columns so that tiny test models take it. The test suite runs the model tests so on lavapipe,
// so that no kernel variant a GPU executes is first executed on one.
MatvecShape gpu_shapes(const vk::DeviceInfo& info) {
  const auto& f = info.features;
  const uint32_t sg = std::max(f.subgroup_size, 1u);
  MatvecShape shape = matvec_shape_for(sg, sg, sg, /*cpu_device=*/false, vk::vendor::kNvidia);
  const bool fixed = f.min_subgroup_size == f.max_subgroup_size;
  if (!fixed) shape.workgroup = std::max(shape.workgroup, 64u);
  shape.one_subgroup = fixed && shape.workgroup == f.subgroup_size ? 1u : 0u;
  shape.attention_workgroup = 64;
  shape.split_min_cols = 64;
  if (shape.split_workgroup > max_reduction_workgroup(f)) shape.split_workgroup = 0;
  return shape;
}

// One key of the profile: its meaning, its value as text, and how a setting changes it. `name`
// is "VARIABLE: key" for messages.
struct Key {
  const char* key;
  const char* meaning;
  std::string (*get)(const DeviceProfile&);
  void (*set)(DeviceProfile&, const vk::DeviceInfo&, const std::string& name, const std::string& value);
};

const char* on_off(bool b) { return b ? "on" : "off"; }
uint32_t number(const std::string& name, const std::string& value, uint64_t min, uint64_t max) {
  return uint32_t(vk::parse_switch_uint(name, value, min, max));
}
bool flag(const std::string& name, const std::string& value) { return vk::parse_switch_bool(name, value); }
std::string text(uint32_t v) { return std::to_string(v); }

void set_matvec(DeviceProfile& p, void (*change)(MatvecShape&)) {
  change(p.matvec);
  p.matvec_set = true;
}

// In the order they apply.
const Key kKeys[] = {
    {"shapes", "device (its own kernel shapes) or gpu (a GPU's shapes on this device: the tests' GPU configuration)",
     [](const DeviceProfile& p) { return std::string(p.gpu_shapes ? "gpu" : "device"); },
     [](DeviceProfile& p, const vk::DeviceInfo& info, const std::string& name, const std::string& value) {
       p.gpu_shapes = vk::parse_switch_choice(name, value, "device|gpu") == "gpu";
       if (!p.gpu_shapes) return;
       p.matvec = gpu_shapes(info);
       p.matvec_set = true;
       const auto& f = info.features;
       p.norm_workgroup = norm_workgroup_for(false, f.max_workgroup_invocations, f.min_subgroup_size);
     }},
    {"subgroup.size", "the subgroup size every pipeline requires (a power of two in the device's range)",
     [](const DeviceProfile& p) { return text(p.subgroup_size); },
     // The Context applied and checked it (context.cpp): here only its form.
     [](DeviceProfile&, const vk::DeviceInfo&, const std::string& name, const std::string& value) {
       number(name, value, 1, 1024);
     }},
    {"matvec.workgroup", "matrix-vector workgroup for every matrix (no split over subgroups)",
     [](const DeviceProfile& p) { return text(p.matvec.workgroup); },
     [](DeviceProfile& p, const vk::DeviceInfo& info, const std::string& name, const std::string& value) {
       const auto& f = info.features;
       const uint32_t wg = number(name, value, 1, max_reduction_workgroup(f));
       p.matvec.workgroup = wg;
       p.matvec.one_subgroup = f.min_subgroup_size == f.max_subgroup_size && wg == f.subgroup_size ? 1u : 0u;
       p.matvec.split_workgroup = 0;
       p.matvec_set = true;
     }},
    {"matvec.outs", "outputs per matrix-vector workgroup of float weights",
     [](const DeviceProfile& p) { return text(p.matvec.outs); },
     [](DeviceProfile& p, const vk::DeviceInfo&, const std::string& name, const std::string& value) {
       p.matvec.outs = number(name, value, 1, MATVEC_MAX_OUTS);
       p.matvec_set = true;
     }},
    {"matvec.block_outs", "outputs per matrix-vector workgroup of block-quantized weights",
     [](const DeviceProfile& p) { return text(p.matvec.block_outs); },
     [](DeviceProfile& p, const vk::DeviceInfo&, const std::string& name, const std::string& value) {
       p.matvec.block_outs = number(name, value, 1, MATVEC_MAX_OUTS);
       p.matvec_set = true;
     }},
    {"matvec.rows_outs",
     "outputs per workgroup of a product of several rows, 0 for the one-row choice (the SwiGLU fold rounds it up "
     "to an even number, the rope fold to a multiple of 4)",
     [](const DeviceProfile& p) { return text(p.matvec.rows_outs); },
     [](DeviceProfile& p, const vk::DeviceInfo&, const std::string& name, const std::string& value) {
       p.matvec.rows_outs = number(name, value, 0, MATVEC_MAX_OUTS);
       p.matvec_set = true;
     }},
    {"matvec.expert_rows", "rows of one expert a mixture-of-experts workgroup takes",
     [](const DeviceProfile& p) { return text(p.matvec.expert_rows); },
     [](DeviceProfile& p, const vk::DeviceInfo&, const std::string& name, const std::string& value) {
       p.matvec.expert_rows = number(name, value, 1, MATVEC_MAX_ROWS);
       p.matvec_set = true;
     }},
    {"matvec.split_workgroup", "workgroup of matrices split over subgroups (a multiple of the subgroup), 0 for never",
     [](const DeviceProfile& p) { return text(p.matvec.split_workgroup); },
     [](DeviceProfile& p, const vk::DeviceInfo& info, const std::string& name, const std::string& value) {
       const auto& f = info.features;
       const uint32_t wg = number(name, value, 0, max_reduction_workgroup(f));
       if (wg % std::max(f.subgroup_size, 1u))
         fail("{}={}: not a multiple of the subgroup size {}", name, value, f.subgroup_size);
       p.matvec.split_workgroup = wg;
       p.matvec_set = true;
     }},
    {"matvec.split_max_rows", "split matrices with at most this many rows",
     [](const DeviceProfile& p) { return text(p.matvec.split_max_rows); },
     [](DeviceProfile& p, const vk::DeviceInfo&, const std::string& name, const std::string& value) {
       p.matvec.split_max_rows = number(name, value, 1, UINT32_MAX);
       p.matvec_set = true;
     }},
    {"matvec.split_min_cols", "split matrices with at least this many columns",
     [](const DeviceProfile& p) { return text(p.matvec.split_min_cols); },
     [](DeviceProfile& p, const vk::DeviceInfo&, const std::string& name, const std::string& value) {
       p.matvec.split_min_cols = number(name, value, 1, UINT32_MAX);
       p.matvec_set = true;
     }},
    {"norm.workgroup", "a row normalisation's workgroup (a power of two)",
     [](const DeviceProfile& p) { return text(p.norm_workgroup); },
     [](DeviceProfile& p, const vk::DeviceInfo& info, const std::string& name, const std::string& value) {
       const uint32_t wg = number(name, value, 1, max_reduction_workgroup(info.features));
       if (wg & (wg - 1)) fail("{}={}: not a power of two", name, value);
       p.norm_workgroup = wg;
     }},
    {"attention.workgroup", "the attention kernel's workgroup: 64, or 8 (one subgroup) on devices of fixed subgroups of 8",
     [](const DeviceProfile& p) { return text(p.matvec.attention_workgroup); },
     [](DeviceProfile& p, const vk::DeviceInfo& info, const std::string& name, const std::string& value) {
       const auto& f = info.features;
       const uint32_t wg = number(name, value, 8, 64);
       if (wg != 64 && !(wg == 8 && f.min_subgroup_size == 8 && f.max_subgroup_size == 8))
         fail("{}={}: expected 64, or 8 on a device of fixed subgroups of 8", name, value);
       p.matvec.attention_workgroup = wg;
       p.matvec_set = true;
     }},
    {"attention.split", "keys per split of a long context (0: none; a multiple of 64)",
     [](const DeviceProfile& p) { return text(p.attention_split); },
     [](DeviceProfile& p, const vk::DeviceInfo&, const std::string& name, const std::string& value) {
       const uint32_t keys = number(name, value, 0, 1u << 20);
       if (keys % 64) fail("{}={}: keys per split must be 0 (off) or a multiple of 64 up to 1048576", name, value);
       p.attention_split = keys;
     }},
    {"attention.rows", "most rows one attention workgroup serves",
     [](const DeviceProfile& p) { return text(p.attention_rows); },
     [](DeviceProfile& p, const vk::DeviceInfo&, const std::string& name, const std::string& value) {
       p.attention_rows = number(name, value, 1, ATTENTION_MAX_ROWS);
     }},
    {"attention.group", "most query heads of one KV head an attention workgroup serves",
     [](const DeviceProfile& p) { return text(p.attention_group); },
     [](DeviceProfile& p, const vk::DeviceInfo&, const std::string& name, const std::string& value) {
       p.attention_group = number(name, value, 1, 8);
     }},
    {"fold.norms", "RMSNorms folded into the products that consume them",
     [](const DeviceProfile& p) { return std::string(on_off(p.fold_norms)); },
     [](DeviceProfile& p, const vk::DeviceInfo&, const std::string& name, const std::string& value) {
       p.fold_norms = flag(name, value);
     }},
    {"fold.rope", "rope and the cache write folded into the q/k/v product",
     [](const DeviceProfile& p) { return std::string(on_off(p.fold_rope)); },
     [](DeviceProfile& p, const vk::DeviceInfo&, const std::string& name, const std::string& value) {
       p.fold_rope = flag(name, value);
     }},
    {"gemm.coopmat", "prefill products on cooperative matrices (on: an error where the device cannot)",
     [](const DeviceProfile& p) { return std::string(on_off(p.gemm_coopmat)); },
     [](DeviceProfile& p, const vk::DeviceInfo& info, const std::string& name, const std::string& value) {
       p.gemm_coopmat = flag(name, value);
       if (const std::string missing = coopmat_unavailable(info); p.gemm_coopmat && !missing.empty())
         fail("{}={}: {}", name, value, missing);
     }},
    {"gemm.block", "the coopmat GEMM's block: 64 or 128 (eight subgroups)",
     [](const DeviceProfile& p) { return text(p.gemm_block); },
     [](DeviceProfile& p, const vk::DeviceInfo& info, const std::string& name, const std::string& value) {
       p.gemm_block = std::stoul(vk::parse_switch_choice(name, value, "64|128"));
       if (const std::string missing = coopmat_unavailable(info, 128);
           p.gemm_block == 128 && p.gemm_coopmat && !missing.empty())
         fail("{}={}: {}", name, value, missing);
     }},
    {"gemm.precision", "the coopmat GEMM's inputs: split (f16 hi and lo halves) or f16 (the nearest f16 alone)",
     [](const DeviceProfile& p) { return std::string(p.gemm_f16_inputs ? "f16" : "split"); },
     [](DeviceProfile& p, const vk::DeviceInfo&, const std::string& name, const std::string& value) {
       p.gemm_f16_inputs = vk::parse_switch_choice(name, value, "split|f16") == "f16";
     }},
    {"gemm.prefetch", "the 128 block loads the next k tile during the current tile's products",
     [](const DeviceProfile& p) { return std::string(on_off(p.gemm_prefetch)); },
     [](DeviceProfile& p, const vk::DeviceInfo&, const std::string& name, const std::string& value) {
       p.gemm_prefetch = flag(name, value);
     }},
    {"gemm.tile_k", "k staged 32 or 64 at a time by the 128 block",
     [](const DeviceProfile& p) { return text(p.gemm_tile_k); },
     [](DeviceProfile& p, const vk::DeviceInfo& info, const std::string& name, const std::string& value) {
       p.gemm_tile_k = std::stoul(vk::parse_switch_choice(name, value, "32|64"));
       const auto& f = info.features;
       const uint32_t bytes = coopmat128_shared_bytes(f.coopmat_m, f.coopmat_n, p.gemm_tile_k, !p.gemm_f16_inputs);
       if (p.gemm_coopmat && p.gemm_block == 128 && p.gemm_tile_k != GEMM_COOPMAT_TILE_K &&
           bytes > f.max_compute_shared_memory)
         fail("{}={}: the 128 block would need {} bytes of shared memory with {} inputs, and device '{}' allows {}{}",
              name, value, bytes, p.gemm_f16_inputs ? "f16" : "split", info.name, f.max_compute_shared_memory,
              p.gemm_f16_inputs ? "" : " (gemm.precision=f16 stages half as much)");
     }},
};

}  // namespace

DeviceProfile default_profile(const vk::DeviceInfo& info) {
  const auto& f = info.features;
  DeviceProfile p;
  p.arch = info.arch;
  p.subgroup_size = f.subgroup_size;
  p.matvec = device_matvec_shape(info);
  p.norm_workgroup = norm_workgroup_for(cpu_device(info), f.max_workgroup_invocations, f.min_subgroup_size);
  p.attention_split = cpu_device(info) ? 0 : 64;
  // Not by default on CPU devices (llvmpipe emulates the matrices one lane at a time) nor on
  // Intel's, whose drivers have run cooperative matrices slower than scalar code on some
  // generations (llama.cpp enables them per architecture) and which no test has reached.
  p.gemm_coopmat = coopmat_unavailable(info).empty() && !cpu_device(info) && info.vendor_id != vk::vendor::kIntel;
  p.gemm_block = gemm_block_for(info.vendor_id, coopmat_unavailable(info, 128).empty());
  return p;
}

void apply_profile_settings(DeviceProfile& profile, const vk::DeviceInfo& info,
                            const std::vector<vk::ProfileSetting>& settings) {
  for (const vk::ProfileSetting& s : settings) {
    const bool known = std::any_of(std::begin(kKeys), std::end(kKeys), [&](const Key& k) { return s.key == k.key; });
    if (known) continue;
    std::string keys, near;
    size_t nearest = 4;
    for (const Key& k : kKeys) {
      keys += fmt::format("{}{}", keys.empty() ? "" : ", ", k.key);
      if (const size_t d = vk::edit_distance(s.key, k.key); d < nearest) {
        nearest = d;
        near = k.key;
      }
    }
    fail("{}: unknown profile key '{}'{}; the keys: {}", s.source, s.key,
         near.empty() ? "" : fmt::format(" (did you mean {}?)", near), keys);
  }
  for (const Key& k : kKeys)
    if (const std::optional<vk::ProfileSetting> s = vk::find_profile_setting(settings, k.key))
      k.set(profile, info, fmt::format("{}: {}", s->source, k.key), s->value);
}

DeviceProfile device_profile(const vk::DeviceInfo& info) {
  DeviceProfile p = default_profile(info);
  apply_profile_settings(p, info, vk::profile_settings_from_env());
  return p;
}

std::vector<ProfileField> profile_fields(const DeviceProfile& profile) {
  std::vector<ProfileField> out{{"architecture", std::string(vk::architecture_name(profile.arch)),
                                 "worked out from the vendor, device id, driver and subgroup sizes (not a key)"}};
  for (const Key& k : kKeys) out.push_back({k.key, k.get(profile), k.meaning});
  return out;
}

}  // namespace eaglevk::ops
