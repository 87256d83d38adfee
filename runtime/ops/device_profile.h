#pragma once
// One device's kernel choices, worked out once from its architecture (vk::detect_architecture)
// and limits: every workgroup shape, output count, split and switch the ops take. Each field has
// a dotted key (profile_keys in device_profile.cpp) that EAGLEVK_PROFILE_FILE and
// EAGLEVK_PROFILE_OVERRIDE=key=value,... set, for tuning and for the test suite's GPU
// configurations; a key the table does not know, or a value the device cannot run, is an error
// naming the key and its variable. The defaults are the choices each device has always had:
// nothing here changes a bit unless a key is set.
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/vk/features.h"
#include "runtime/vk/profile_settings.h"

namespace eaglevk::ops {

// The matrix-vector kernel's shape: workgroup size, outputs per workgroup, whether the
// workgroup is one subgroup (no shared-memory reduction), whether activations and weights are
// read through texel buffers where they are aligned for it (CPU devices: shaders/common.glsl
// says why). Chosen per device (matvec_shape_for); neither the texel choice nor the outputs per
// workgroup change a bit.
struct MatvecShape {
  uint32_t workgroup, outs, one_subgroup;  // matvec.workgroup, matvec.outs (float weights, one row)
  uint32_t texel_loads = 0;
  // Outputs per workgroup for block-quantized weights (matvec.block_outs): they do more
  // arithmetic per byte, and on an H100 four outputs beat two for every block format while two
  // stay best for f16 at one row (docs/perf.md, 2026-11-27).
  uint32_t block_outs = 4;
  // Outputs per workgroup of a dispatch of several activation rows (a verify pass's), where the
  // accumulators and x registers grow with the rows; 0 keeps the one-row choice. The k order of
  // a dot product depends on the workgroup and the split only, so this never changes a bit.
  // matvec.rows_outs, for tuning (docs/gpu-check.md).
  uint32_t rows_outs = 0;
  uint32_t outs_for(bool quantized, uint32_t rows) const {
    if (rows > 1 && rows_outs) return rows_outs;
    return quantized ? block_outs : outs;
  }
  // The attention kernel's workgroup (attention.workgroup): 64 invocations exchanging through
  // shared memory, or, on CPU devices with a fixed subgroup of 8, one subgroup that exchanges by
  // shuffles, with no barrier (shaders/attention.comp). It sets the block of keys the online
  // softmax takes at a time, so it changes the bits, as a device's choice does.
  uint32_t attention_workgroup = 64;
  // Rows of one expert a mixture-of-experts workgroup takes (matvec.comp's EXPERTS; at most
  // MATVEC_MAX_ROWS; matvec.expert_rows): on GPUs up to 8, so that verify passes read each
  // expert's weights once per 8 of its rows. 1 on CPU devices: llvmpipe pays for a workgroup's
  // unused row slots as for used ones (a decode step's experts took twice as long with 8,
  // docs/perf.md). Never changes a bit.
  uint32_t expert_rows = 8;
  // Matrices with few rows split each dot product over several subgroups (the workgroup's
  // fixed-order shared-memory sum), so that a 4096-row matrix still gives a GPU thousands of
  // subgroups with loads in flight; matrices with many rows keep one subgroup per output group.
  // split_workgroup 0: never (CPU devices, AMD as llama.cpp chooses). Chosen from the matrix
  // (rows, columns), never from a pass's row count: a verify row keeps the decode step's bits.
  uint32_t split_workgroup = 0;     // matvec.split_workgroup
  uint32_t split_max_rows = 8192;   // matvec.split_max_rows: at most this many output features
  uint32_t split_min_cols = 1024;   // matvec.split_min_cols: and at least this many inputs
};

struct DeviceProfile {
  vk::Architecture arch = vk::Architecture::Unknown;
  // subgroup.size: the size every pipeline requires (the Context chooses it: context.cpp).
  uint32_t subgroup_size = 0;
  // shapes=gpu: a GPU's kernel shapes on this device (NVIDIA's policy made runnable here, the
  // split from 64 columns so that tiny test models take it): the test suite's GPU configuration.
  bool gpu_shapes = false;
  MatvecShape matvec{64, 2, 0};  // matvec.*, attention.workgroup
  // Whether shapes=gpu or a matvec key was given: Gpu::matvec_shape_override then holds `matvec`.
  bool matvec_set = false;
  // norm.workgroup: norm.comp's workgroup (norm_workgroup_for).
  uint32_t norm_workgroup = 64;
  // attention.split: keys per split of a long context (0: none); 64 on GPUs (one block of keys a
  // split, 1.15x the decode speed of 256 at depth 1024, 8B Q4_K_M, H200, docs/perf.md), 0 on
  // CPU devices.
  uint32_t attention_split = 0;
  // attention.rows: most rows one attention workgroup serves (attention.comp's ROWS); 1 is the
  // reference for the bits. attention.group: most query heads of one KV head it serves (GROUP).
  uint32_t attention_rows = 8;
  uint32_t attention_group = 8;
  // fold.norms: RMSNorms folded into the products that consume them (off: on lavapipe it saves
  // dispatches, not time; docs/perf.md). fold.rope: rope and the cache write folded into the
  // q | k | v product (Gpu::fold_rope says more).
  bool fold_norms = false;
  bool fold_rope = true;
  // gemm.coopmat: prefill on the cooperative-matrix GEMM (on for NVIDIA and AMD GPUs that can run
  // it; off for Intel's, untested, and CPU devices, which emulate the matrices one lane at a
  // time). gemm.block: its 64 or 128 block (128 on NVIDIA: 1.056x pp512, H200, docs/perf.md).
  // gemm.precision: split (f16 hi and lo halves) or f16 (the nearest f16 alone, gemm_f16_inputs).
  // gemm.prefetch and gemm.tile_k: the 128 block's pipelined k loop and k tile (Gpu says more).
  bool gemm_coopmat = false;
  uint32_t gemm_block = 64;
  bool gemm_f16_inputs = false;
  bool gemm_prefetch = false;
  uint32_t gemm_tile_k = 32;
};

// The device's own choices. `info` as a Context on it sees it (vk::settled_device_info).
DeviceProfile default_profile(const vk::DeviceInfo& info);
// `settings` on top of `profile`, key by key in the table's order (shapes first, so the other
// keys adjust a GPU's shapes; the last setting of a key wins). An unknown key, a malformed value
// or one `info`'s device cannot run throws, naming the setting's source (the variable) and key.
void apply_profile_settings(DeviceProfile& profile, const vk::DeviceInfo& info,
                            const std::vector<vk::ProfileSetting>& settings);
// default_profile with EAGLEVK_PROFILE_FILE's and EAGLEVK_PROFILE_OVERRIDE's settings.
DeviceProfile device_profile(const vk::DeviceInfo& info);

// Every key with its value in `profile` and its meaning, for `eaglevk devices --env`.
struct ProfileField {
  std::string key, value, meaning;
};
std::vector<ProfileField> profile_fields(const DeviceProfile& profile);

}  // namespace eaglevk::ops
