#include "runtime/vk/pipeline.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "runtime/vk/check.h"
#include "runtime/vk/context.h"
#include "runtime/vk/embedded_shaders.h"

namespace eaglevk::vk {

PipelineCache::PipelineCache(const Context& ctx) : ctx_(ctx) {}

PipelineCache::~PipelineCache() {
  for (auto& [key, k] : kernels_) {
    vkDestroyPipeline(ctx_.device, k->pipeline, nullptr);
    vkDestroyPipelineLayout(ctx_.device, k->layout, nullptr);
    vkDestroyDescriptorSetLayout(ctx_.device, k->set_layout, nullptr);
  }
  for (auto& [name, m] : modules_) vkDestroyShaderModule(ctx_.device, m.module, nullptr);
}

bool PipelineCache::has_shader(const std::string& shader) {
  for (size_t i = 0; i < kEmbeddedShaderCount; ++i)
    if (shader == kEmbeddedShaders[i].name) return true;
  return false;
}

const PipelineCache::Module& PipelineCache::module(const std::string& shader) {
  auto found = modules_.find(shader);
  if (found != modules_.end()) return found->second;
  for (size_t i = 0; i < kEmbeddedShaderCount; ++i) {
    const EmbeddedShader& s = kEmbeddedShaders[i];
    if (shader != s.name) continue;
    Module m;
    m.interface = reflect_spirv(s.words, s.word_count, shader);
    VkShaderModuleCreateInfo info{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
    info.codeSize = s.word_count * 4;
    info.pCode = s.words;
    EAGLEVK_VK(vkCreateShaderModule(ctx_.device, &info, nullptr, &m.module));
    return modules_[shader] = m;
  }
  fail("no embedded shader named '{}'", shader);
}

const Kernel& PipelineCache::get(const std::string& shader, std::initializer_list<uint32_t> spec) {
  return get(shader, std::vector<uint32_t>(spec));
}

namespace {

// A workgroup may hold at most maxComputeWorkgroupSubgroups subgroups of a required size. A
// larger one (a test's explicit configuration) runs without the requirement only where the
// driver has one size anyway; elsewhere its subgroups would not be the ones it was chosen for.
bool fits_required_subgroups(const Context& ctx, const ShaderInterface& iface, const std::vector<uint32_t>& spec) {
  const uint32_t max_subgroups = ctx.info.features.max_compute_workgroup_subgroups;  // 0: not reported
  return !(ctx.required_subgroup_size > 0 && max_subgroups &&
           workgroup_invocations(iface, spec) > uint64_t(ctx.required_subgroup_size) * max_subgroups);
}

}  // namespace

const Kernel& PipelineCache::get(const std::string& shader, const std::vector<uint32_t>& spec) {
  std::string key = fmt::format("{}<{}>", shader, fmt::join(spec, ","));
  auto found = kernels_.find(key);
  if (found != kernels_.end()) {
    Kernel& k = *found->second;
    if (!k.pipeline && !defer_pipelines) create_pipeline(k, module(shader), spec);
    return k;
  }

  const Module& m = module(shader);
  if (spec.size() > m.interface.spec_constants)
    fail("shader '{}' takes {} specialization constants, {} given", shader, m.interface.spec_constants, spec.size());
  if (!fits_required_subgroups(ctx_, m.interface, spec) && ctx_.driver_picks_subgroup_size)
    fail("kernel {}: a workgroup of {} invocations is more than {} subgroups of {} (maxComputeWorkgroupSubgroups)",
         key, workgroup_invocations(m.interface, spec), ctx_.info.features.max_compute_workgroup_subgroups,
         ctx_.required_subgroup_size);
  auto k = std::make_unique<Kernel>();
  k->name = key;
  k->interface = m.interface;

  std::vector<VkDescriptorSetLayoutBinding> bindings(m.interface.bindings);
  for (uint32_t i = 0; i < bindings.size(); ++i) {
    const bool texel = m.interface.texel_formats[i] != VK_FORMAT_UNDEFINED;
    bindings[i] = {i, texel ? VK_DESCRIPTOR_TYPE_STORAGE_TEXEL_BUFFER : VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1,
                   VK_SHADER_STAGE_COMPUTE_BIT, nullptr};
  }
  VkDescriptorSetLayoutCreateInfo set_info{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
  set_info.bindingCount = uint32_t(bindings.size());
  set_info.pBindings = bindings.data();
  EAGLEVK_VK(vkCreateDescriptorSetLayout(ctx_.device, &set_info, nullptr, &k->set_layout));

  VkPushConstantRange push{VK_SHADER_STAGE_COMPUTE_BIT, 0, m.interface.push_constant_bytes};
  VkPipelineLayoutCreateInfo layout_info{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
  layout_info.setLayoutCount = 1;
  layout_info.pSetLayouts = &k->set_layout;
  layout_info.pushConstantRangeCount = push.size ? 1 : 0;
  layout_info.pPushConstantRanges = &push;
  EAGLEVK_VK(vkCreatePipelineLayout(ctx_.device, &layout_info, nullptr, &k->layout));

  if (!defer_pipelines) create_pipeline(*k, m, spec);
  return *(kernels_[key] = std::move(k));
}

void PipelineCache::create_pipeline(Kernel& kernel, const Module& m, const std::vector<uint32_t>& spec) {
  Kernel* k = &kernel;
  const bool require_size = ctx_.required_subgroup_size > 0 && fits_required_subgroups(ctx_, m.interface, spec);
  std::vector<VkSpecializationMapEntry> entries(spec.size());
  for (uint32_t i = 0; i < spec.size(); ++i) entries[i] = {i, i * 4, 4};
  VkSpecializationInfo spec_info{uint32_t(entries.size()), entries.data(), spec.size() * 4, spec.data()};
  VkComputePipelineCreateInfo info{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
  info.stage = {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO};
  info.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  info.stage.module = m.module;
  info.stage.pName = "main";
  info.stage.pSpecializationInfo = spec.empty() ? nullptr : &spec_info;
  // The device's one subgroup size for every kernel (Context::required_subgroup_size), full
  // subgroups where the workgroup's rows are whole subgroups.
  VkPipelineShaderStageRequiredSubgroupSizeCreateInfo required{
      VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_REQUIRED_SUBGROUP_SIZE_CREATE_INFO};
  if (const uint32_t size = require_size ? ctx_.required_subgroup_size : 0) {
    required.requiredSubgroupSize = size;
    info.stage.pNext = &required;
    if (workgroup_x(m.interface, spec) % size == 0)
      info.stage.flags |= VK_PIPELINE_SHADER_STAGE_CREATE_REQUIRE_FULL_SUBGROUPS_BIT;
  }
  info.layout = k->layout;
  if (ctx_.pipeline_statistics) info.flags |= VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR;
  EAGLEVK_VK(vkCreateComputePipelines(ctx_.device, VK_NULL_HANDLE, 1, &info, nullptr, &k->pipeline));
}

DeferredPipelines::DeferredPipelines(PipelineCache& cache) : cache_(cache), was_(cache.defer_pipelines) {
  cache.defer_pipelines = true;
}
DeferredPipelines::~DeferredPipelines() { cache_.defer_pipelines = was_; }

std::vector<PipelineStatistic> pipeline_statistics(const Context& ctx, VkPipeline pipeline) {
  std::vector<PipelineStatistic> out;
  if (!ctx.pipeline_statistics) return out;
  auto properties = reinterpret_cast<PFN_vkGetPipelineExecutablePropertiesKHR>(
      vkGetDeviceProcAddr(ctx.device, "vkGetPipelineExecutablePropertiesKHR"));
  auto statistics = reinterpret_cast<PFN_vkGetPipelineExecutableStatisticsKHR>(
      vkGetDeviceProcAddr(ctx.device, "vkGetPipelineExecutableStatisticsKHR"));
  if (!properties || !statistics) return out;
  VkPipelineInfoKHR pipeline_info{VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR};
  pipeline_info.pipeline = pipeline;
  uint32_t executables = 0;
  if (properties(ctx.device, &pipeline_info, &executables, nullptr) != VK_SUCCESS) return out;
  for (uint32_t e = 0; e < executables; ++e) {
    VkPipelineExecutableInfoKHR executable{VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR};
    executable.pipeline = pipeline;
    executable.executableIndex = e;
    uint32_t count = 0;
    if (statistics(ctx.device, &executable, &count, nullptr) != VK_SUCCESS) continue;
    std::vector<VkPipelineExecutableStatisticKHR> stats(count, {VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR});
    if (statistics(ctx.device, &executable, &count, stats.data()) != VK_SUCCESS) continue;
    for (const VkPipelineExecutableStatisticKHR& st : stats) {
      double value = 0;
      switch (st.format) {
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR: value = st.value.b32 ? 1 : 0; break;
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR: value = double(st.value.i64); break;
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR: value = double(st.value.u64); break;
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_FLOAT64_KHR: value = st.value.f64; break;
        default: continue;
      }
      out.push_back({st.name, value});
    }
  }
  return out;
}

}  // namespace eaglevk::vk
