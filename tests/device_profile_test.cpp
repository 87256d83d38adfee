// The switch table (runtime/vk/switches.h) and the device profile (runtime/ops/device_profile.h):
// every EAGLEVK_* variable parsed one way (EAGLEVK_VALIDATE=no is off; garbage, a retired
// variable and a 33-bit number are errors naming the variable), the architecture and every
// kernel choice worked out for synthetic NVIDIA Hopper, AMD RDNA3, Intel and lavapipe devices as
// the code has always chosen them, and EAGLEVK_PROFILE_OVERRIDE's keys checked one by one.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <eaglevk/error.h>

#include "runtime/ops/device_profile.h"
#include "runtime/ops/ops.h"
#include "runtime/vk/context.h"
#include "runtime/vk/pipeline.h"
#include "runtime/vk/profile_settings.h"
#include "runtime/vk/switches.h"
#include "support/gpu_fixture.h"

namespace eaglevk::testing {
namespace {

// Sets (or unsets) one variable for the scope, restoring it after.
struct EnvScope {
  EnvScope(const char* name, const char* value) : name(name) {
    if (const char* old = std::getenv(name)) saved = old;
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ~EnvScope() {
    if (saved)
      ::setenv(name, saved->c_str(), 1);
    else
      ::unsetenv(name);
  }
  const char* name;
  std::optional<std::string> saved;
};

// What `run` throws, or "no error".
template <typename F>
std::string error_of(F run) {
  try {
    run();
  } catch (const eaglevk::Error& e) {
    return e.what();
  }
  return "no error";
}

#define EXPECT_CONTAINS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)

TEST(Switches, BooleansAcceptEveryUsualSpellingAndNoMeansOff) {
  for (const char* on : {"1", "true", "TRUE", "on", "On", "yes", "YES"})
    EXPECT_TRUE(vk::parse_switch_bool("EAGLEVK_VALIDATE", on)) << on;
  for (const char* off : {"0", "false", "off", "OFF", "no", "No"})
    EXPECT_FALSE(vk::parse_switch_bool("EAGLEVK_VALIDATE", off)) << off;
  const std::string error = error_of([] { vk::parse_switch_bool("EAGLEVK_VALIDATE", "maybe"); });
  EXPECT_CONTAINS(error, "EAGLEVK_VALIDATE='maybe': expected 1, 0, true, false, on, off, yes or no");
  // Through the environment: before the table, any value but 0 turned validation on.
  EnvScope validate("EAGLEVK_VALIDATE", "no");
  EXPECT_FALSE(vk::ContextOptions::from_env().validate);
  ::setenv("EAGLEVK_VALIDATE", "garbage", 1);
  EXPECT_CONTAINS(error_of([] { vk::ContextOptions::from_env(); }), "EAGLEVK_VALIDATE='garbage'");
  ::setenv("EAGLEVK_VALIDATE", "", 1);  // empty is unset: the table's default, off
  EXPECT_FALSE(vk::ContextOptions::from_env().validate);
}

TEST(Switches, NumbersNeverWrap) {
  EXPECT_EQ(vk::parse_switch_uint("X", "12", 1, 100), 12u);
  for (const char* bad : {"4294967304", "18446744073709551616", "-1", "+3", "12 ", "0x10", "", "101", "0"})
    EXPECT_CONTAINS(error_of([&] { vk::parse_switch_uint("X", bad, 1, 100); }), "expected a whole number from 1 to 100");
}

TEST(Switches, ChoicesNameEveryChoice) {
  EXPECT_EQ(vk::parse_switch_choice("EAGLEVK_SYNC", "full", "tracked|full"), "full");
  EXPECT_CONTAINS(error_of([] { vk::parse_switch_choice("EAGLEVK_SYNC", "fast", "tracked|full"); }),
                  "EAGLEVK_SYNC='fast': expected one of: tracked full");
  EnvScope sync("EAGLEVK_SYNC", nullptr);
  EXPECT_EQ(vk::switch_choice("EAGLEVK_SYNC"), "tracked");
}

TEST(Switches, EveryVariableIsDeclaredOnce) {
  std::vector<std::string> names;
  for (const vk::Switch& s : vk::switch_table()) {
    EXPECT_EQ(std::string(s.name).rfind("EAGLEVK_", 0), 0u) << s.name;
    EXPECT_EQ(std::count(names.begin(), names.end(), s.name), 0) << s.name;
    names.push_back(s.name);
    EXPECT_TRUE(*s.meaning || s.type == vk::SwitchType::Retired) << s.name;
  }
  EXPECT_CONTAINS(error_of([] { vk::switch_value("EAGLEVK_NOT_DECLARED"); }), "not declared");
}

TEST(Switches, UnknownNamesWarnAndRetiredOnesFail) {
  const std::vector<std::string> names = {"EAGLEVK_VALIDATE", "EAGLEVK_VALIDTE", "EAGLEVK_GEMM_BLOCK", "EAGLEVK_ZZZZZZZZZZZZZZ"};
  const vk::EnvironmentCheck check = vk::check_switch_names(names);
  ASSERT_EQ(check.warnings.size(), 2u);
  EXPECT_CONTAINS(check.warnings[0], "EAGLEVK_VALIDTE is not a variable eaglevk reads (did you mean EAGLEVK_VALIDATE?)");
  EXPECT_EQ(check.warnings[1].find("did you mean"), std::string::npos) << check.warnings[1];
  ASSERT_EQ(check.errors.size(), 1u);
  EXPECT_CONTAINS(check.errors[0], "EAGLEVK_GEMM_BLOCK is no longer read");
  EXPECT_CONTAINS(check.errors[0], "EAGLEVK_PROFILE_OVERRIDE=gemm.block=64");
  EnvScope retired("EAGLEVK_ATTENTION_SPLIT", "64");
  EXPECT_CONTAINS(error_of([] { vk::check_environment(); }), "EAGLEVK_PROFILE_OVERRIDE=attention.split=N");
}

TEST(ProfileSettings, ParseKeyValueListsAndFiles) {
  const std::vector<vk::ProfileSetting> list =
      vk::parse_profile_settings(" gemm.block = 128,attention.split=64, ", "EAGLEVK_PROFILE_OVERRIDE", ',');
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].key, "gemm.block");
  EXPECT_EQ(list[0].value, "128");
  EXPECT_EQ(list[1].source, "EAGLEVK_PROFILE_OVERRIDE");
  for (const char* bad : {"gemm.block", "=64", "gemm.block="})
    EXPECT_CONTAINS(error_of([&] { vk::parse_profile_settings(bad, "EAGLEVK_PROFILE_OVERRIDE", ','); }),
                    fmt::format("EAGLEVK_PROFILE_OVERRIDE: '{}' is not key=value", bad));
  const std::vector<vk::ProfileSetting> file =
      vk::parse_profile_settings("# tuning\ngemm.block=64  # the 64 block\n\nfold.norms=on\n", "F", '\n');
  ASSERT_EQ(file.size(), 2u);
  EXPECT_EQ(file[0].value, "64");
  EXPECT_EQ(file[1].source, "F:4");

  // The file first, then the override: the override's setting of a key wins.
  const std::filesystem::path path = std::filesystem::temp_directory_path() / "eaglevk_profile_test.txt";
  std::ofstream(path) << "attention.split=128\nfold.norms=on\n";
  EnvScope file_var("EAGLEVK_PROFILE_FILE", path.c_str());
  EnvScope override_var("EAGLEVK_PROFILE_OVERRIDE", "attention.split=256");
  const std::vector<vk::ProfileSetting> both = vk::profile_settings_from_env();
  ASSERT_EQ(both.size(), 3u);
  EXPECT_EQ(vk::find_profile_setting(both, "attention.split")->value, "256");
  EXPECT_EQ(vk::find_profile_setting(both, "fold.norms")->source, "EAGLEVK_PROFILE_FILE=" + path.string() + ":2");
  std::filesystem::remove(path);
}

// Synthetic devices, as probe_device would report them, and as a Context settles them (one
// required subgroup size).
vk::DeviceInfo device(uint32_t vendor, uint32_t id, VkPhysicalDeviceType type, uint32_t sg, uint32_t min_sg,
                      uint32_t max_sg, uint32_t coopmat) {
  vk::DeviceInfo info;
  info.name = "synthetic";
  info.vendor_id = vendor;
  info.device_id = id;
  info.type = type;
  vk::DeviceFeatures& f = info.features;
  f.subgroup_size = sg;
  f.min_subgroup_size = min_sg;
  f.max_subgroup_size = max_sg;
  f.subgroup_size_control = true;
  f.max_workgroup_invocations = 1024;
  f.max_compute_shared_memory = 49152;
  f.storage_texel_buffers = true;
  f.coopmat_m = f.coopmat_n = f.coopmat_k = coopmat;
  info.arch = vk::detect_architecture(info);
  return info;
}
vk::DeviceInfo settled(vk::DeviceInfo info, uint32_t sg) {
  info.features.subgroup_size = info.features.min_subgroup_size = info.features.max_subgroup_size = sg;
  return info;
}
const bool kCoopmatBuilt = vk::PipelineCache::has_shader("gemm_f16_coopmat");

vk::DeviceInfo hopper() { return device(vk::vendor::kNvidia, 0x2330, VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU, 32, 32, 32, 16); }
vk::DeviceInfo rdna3() { return device(vk::vendor::kAmd, 0x744c, VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU, 64, 32, 64, 16); }
vk::DeviceInfo arc() { return device(vk::vendor::kIntel, 0x56a0, VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU, 32, 8, 32, 8); }
vk::DeviceInfo lavapipe() {
  vk::DeviceInfo info = device(vk::vendor::kMesa, 0, VK_PHYSICAL_DEVICE_TYPE_CPU, 8, 8, 8, 0);
  info.name = "llvmpipe (LLVM 15.0.6, 256 bits)";
  info.arch = vk::detect_architecture(info);
  return info;
}

TEST(DeviceProfile, ArchitecturesFromWhatDevicesReport) {
  using A = vk::Architecture;
  EXPECT_EQ(hopper().arch, A::NvidiaHopper);
  EXPECT_EQ(device(vk::vendor::kNvidia, 0x2204, VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU, 32, 32, 32, 16).arch,
            A::NvidiaTuring);  // RTX 3090
  EXPECT_EQ(device(vk::vendor::kNvidia, 0x1b80, VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU, 32, 32, 32, 0).arch,
            A::NvidiaPreTuring);  // GTX 1080
  EXPECT_EQ(rdna3().arch, A::AmdRdna3);
  EXPECT_EQ(device(vk::vendor::kAmd, 0x73bf, VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU, 64, 32, 64, 0).arch, A::AmdRdna2);
  EXPECT_EQ(device(vk::vendor::kAmd, 0x7550, VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU, 64, 32, 64, 16).arch, A::AmdRdna4);
  EXPECT_EQ(device(vk::vendor::kAmd, 0x687f, VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU, 64, 64, 64, 0).arch, A::AmdGcn);
  EXPECT_EQ(arc().arch, A::IntelXe);
  EXPECT_EQ(device(vk::vendor::kIntel, 0xe20b, VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU, 32, 16, 32, 8).arch, A::IntelXe2);
  EXPECT_EQ(device(vk::vendor::kApple, 0, VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU, 32, 32, 32, 0).arch,
            A::AppleMoltenVk);
  EXPECT_EQ(lavapipe().arch, A::Lavapipe);
  EXPECT_EQ(vk::architecture_name(A::NvidiaHopper), "nvidia-hopper");
}

// Each device's defaults are the choices the code made before the profile (gpu.cpp, matmul.cpp,
// attention.cpp): the figures below are those functions' outputs for these devices.
TEST(DeviceProfile, HopperDefaults) {
  const ops::DeviceProfile p = ops::default_profile(hopper());
  EXPECT_EQ(p.arch, vk::Architecture::NvidiaHopper);
  EXPECT_EQ(p.subgroup_size, 32u);
  EXPECT_EQ(p.matvec.workgroup, 32u);
  EXPECT_EQ(p.matvec.outs, 2u);
  EXPECT_EQ(p.matvec.block_outs, 4u);
  EXPECT_EQ(p.matvec.one_subgroup, 1u);
  EXPECT_EQ(p.matvec.texel_loads, 0u);
  EXPECT_EQ(p.matvec.split_workgroup, 128u);
  EXPECT_EQ(p.matvec.expert_rows, 8u);
  EXPECT_EQ(p.matvec.attention_workgroup, 64u);
  EXPECT_EQ(p.norm_workgroup, 512u);
  EXPECT_EQ(p.attention_split, 64u);
  EXPECT_EQ(p.attention_rows, 8u);
  EXPECT_TRUE(p.fold_rope);
  EXPECT_FALSE(p.fold_norms);
  EXPECT_EQ(p.gemm_coopmat, kCoopmatBuilt);
  EXPECT_EQ(p.gemm_block, kCoopmatBuilt ? 128u : 64u);  // 256 invocations, 49,152 bytes: it fits
  EXPECT_FALSE(p.gemm_f16_inputs);
  EXPECT_EQ(p.gemm_tile_k, 32u);
  EXPECT_FALSE(p.matvec_set);
}

TEST(DeviceProfile, Rdna3Defaults) {
  const ops::DeviceProfile p = ops::default_profile(settled(rdna3(), 64));
  EXPECT_EQ(p.arch, vk::Architecture::AmdRdna3);
  EXPECT_EQ(p.matvec.workgroup, 64u);
  EXPECT_EQ(p.matvec.one_subgroup, 1u);
  EXPECT_EQ(p.matvec.split_workgroup, 0u);  // AMD keeps one subgroup a workgroup, as llama.cpp
  EXPECT_EQ(p.attention_split, 64u);
  EXPECT_EQ(p.gemm_coopmat, kCoopmatBuilt);
  EXPECT_EQ(p.gemm_block, 64u);
}

TEST(DeviceProfile, IntelDefaults) {
  const ops::DeviceProfile p = ops::default_profile(settled(arc(), 16));  // the Context requires 16 on Intel
  EXPECT_EQ(p.arch, vk::Architecture::IntelXe);
  EXPECT_EQ(p.matvec.workgroup, 16u);
  EXPECT_EQ(p.matvec.split_workgroup, 64u);
  EXPECT_FALSE(p.gemm_coopmat);  // untested on Intel
  EXPECT_EQ(p.gemm_block, 64u);
}

TEST(DeviceProfile, LavapipeDefaults) {
  const ops::DeviceProfile p = ops::default_profile(lavapipe());
  EXPECT_EQ(p.arch, vk::Architecture::Lavapipe);
  EXPECT_EQ(p.matvec.workgroup, 8u);
  EXPECT_EQ(p.matvec.outs, 8u);
  EXPECT_EQ(p.matvec.texel_loads, 1u);
  EXPECT_EQ(p.matvec.attention_workgroup, 8u);
  EXPECT_EQ(p.matvec.expert_rows, 1u);
  EXPECT_EQ(p.matvec.split_workgroup, 0u);
  EXPECT_EQ(p.norm_workgroup, 8u);
  EXPECT_EQ(p.attention_split, 0u);
  EXPECT_FALSE(p.gemm_coopmat);
  EXPECT_EQ(p.gemm_block, 64u);
}

ops::DeviceProfile with(const vk::DeviceInfo& info, const std::string& list) {
  ops::DeviceProfile p = ops::default_profile(info);
  ops::apply_profile_settings(p, info, vk::parse_profile_settings(list, "EAGLEVK_PROFILE_OVERRIDE", ','));
  return p;
}
std::string error_with(const vk::DeviceInfo& info, const std::string& list) {
  return error_of([&] { with(info, list); });
}

TEST(DeviceProfile, OverridesSetFieldsByKey) {
  ops::DeviceProfile p = with(lavapipe(), "attention.split=128,fold.norms=yes,fold.rope=no,matvec.rows_outs=3");
  EXPECT_EQ(p.attention_split, 128u);
  EXPECT_TRUE(p.fold_norms);
  EXPECT_FALSE(p.fold_rope);
  EXPECT_EQ(p.matvec.rows_outs, 3u);
  EXPECT_TRUE(p.matvec_set);
  // matvec.workgroup: one workgroup for every matrix (no split); one subgroup where it is one.
  p = with(hopper(), "matvec.workgroup=64,matvec.outs=3");
  EXPECT_EQ(p.matvec.workgroup, 64u);
  EXPECT_EQ(p.matvec.one_subgroup, 0u);
  EXPECT_EQ(p.matvec.split_workgroup, 0u);
  EXPECT_EQ(p.matvec.outs, 3u);
  EXPECT_EQ(p.matvec.block_outs, 4u);
  EXPECT_EQ(with(hopper(), "matvec.workgroup=32").matvec.one_subgroup, 1u);
  // The last setting of a key wins; shapes applies first whatever the order.
  EXPECT_EQ(with(lavapipe(), "attention.split=128,attention.split=0").attention_split, 0u);
  p = with(lavapipe(), "matvec.split_workgroup=0,shapes=gpu");
  EXPECT_TRUE(p.gpu_shapes);
  EXPECT_EQ(p.matvec.split_workgroup, 0u);
  EXPECT_EQ(p.matvec.attention_workgroup, 64u);
  // shapes=gpu on lavapipe: NVIDIA's policy at subgroups of 8, split from 64 columns.
  p = with(lavapipe(), "shapes=gpu");
  EXPECT_EQ(p.matvec.workgroup, 8u);
  EXPECT_EQ(p.matvec.texel_loads, 0u);
  EXPECT_EQ(p.matvec.split_workgroup, 32u);
  EXPECT_EQ(p.matvec.split_min_cols, 64u);
  EXPECT_EQ(p.matvec.expert_rows, 8u);
  EXPECT_EQ(p.norm_workgroup, 512u);
  // Every key is printed, with the architecture first.
  const std::vector<ops::ProfileField> fields = ops::profile_fields(p);
  EXPECT_EQ(fields[0].value, "lavapipe");
  EXPECT_TRUE(std::any_of(fields.begin(), fields.end(),
                          [](const ops::ProfileField& f) { return f.key == "shapes" && f.value == "gpu"; }));
}

TEST(DeviceProfile, BadOverridesNameTheVariableAndKey) {
  EXPECT_CONTAINS(error_with(lavapipe(), "gemm.blok=128"),
                  "EAGLEVK_PROFILE_OVERRIDE: unknown profile key 'gemm.blok' (did you mean gemm.block?)");
  EXPECT_CONTAINS(error_with(lavapipe(), "attention.rows=9"),
                  "EAGLEVK_PROFILE_OVERRIDE: attention.rows='9': expected a whole number from 1 to 8");
  // 2^32 + 8 once wrapped into a workgroup of 8.
  EXPECT_CONTAINS(error_with(lavapipe(), "matvec.workgroup=4294967304"),
                  "EAGLEVK_PROFILE_OVERRIDE: matvec.workgroup='4294967304': expected a whole number");
  EXPECT_CONTAINS(error_with(lavapipe(), "attention.split=100"), "attention.split=100: keys per split must be");
  EXPECT_CONTAINS(error_with(lavapipe(), "gemm.block=96"), "gemm.block='96': expected one of: 64 128");
  EXPECT_CONTAINS(error_with(lavapipe(), "fold.norms=maybe"), "fold.norms='maybe'");
  EXPECT_CONTAINS(error_with(lavapipe(), "norm.workgroup=24"), "norm.workgroup=24: not a power of two");
  EXPECT_CONTAINS(error_with(hopper(), "attention.workgroup=8"), "attention.workgroup=8: expected 64");
  EXPECT_CONTAINS(error_with(lavapipe(), "gemm.coopmat=on"), "EAGLEVK_PROFILE_OVERRIDE: gemm.coopmat=on: ");
  if (kCoopmatBuilt) {
    // k tiles of 64 with f16 hi and lo halves need 81,920 bytes, past Hopper's 48 KiB here.
    EXPECT_CONTAINS(error_with(hopper(), "gemm.tile_k=64"), "gemm.precision=f16 stages half as much");
    EXPECT_EQ(with(hopper(), "gemm.tile_k=64,gemm.precision=f16").gemm_tile_k, 64u);
  }
}

// This device's Gpu holds its profile, and every field starts from it.
TEST_F(GpuTest, TheGpuStartsFromItsProfile) {
  const ops::DeviceProfile& p = gpu().profile;
  EXPECT_EQ(p.arch, gpu().ctx.info.arch);
  EXPECT_EQ(gpu().norm_workgroup, p.norm_workgroup);
  EXPECT_EQ(gpu().coopmat_gemm, p.gemm_coopmat);
  EXPECT_EQ(gpu().gemm_block, p.gemm_block);
  EXPECT_EQ(gpu().fold_rope, p.fold_rope);
  EXPECT_EQ(ops::attention_split_keys(gpu().ctx), p.attention_split);
  {
    EnvScope split("EAGLEVK_PROFILE_OVERRIDE", "attention.split=192");
    EXPECT_EQ(ops::attention_split_keys(gpu().ctx), 192u);
  }
  const vk::DeviceInfo& info = gpu().ctx.info;
  EXPECT_EQ(ops::default_profile(info).matvec.workgroup, ops::matvec_shape(gpu()).workgroup);
}

}  // namespace
}  // namespace eaglevk::testing
