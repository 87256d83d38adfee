#pragma once
// Compute pipelines built from embedded SPIR-V, cached by shader name and specialization
// constants. The layout (bindings, push-constant size) comes from the SPIR-V itself.
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <vulkan/vulkan.h>

#include "runtime/vk/spirv_reflect.h"

namespace eaglevk::vk {

struct Context;

struct Kernel {
  std::string name;  // shader variant name plus its specialization values, for messages
  ShaderInterface interface;
  VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
  VkPipelineLayout layout = VK_NULL_HANDLE;
  VkPipeline pipeline = VK_NULL_HANDLE;
};

class PipelineCache {
 public:
  explicit PipelineCache(const Context& ctx);
  ~PipelineCache();
  PipelineCache(const PipelineCache&) = delete;
  PipelineCache& operator=(const PipelineCache&) = delete;

  // Specialization constant i gets constant_id i; every shader declares its own meaning.
  const Kernel& get(const std::string& shader, std::initializer_list<uint32_t> spec = {});
  const Kernel& get(const std::string& shader, const std::vector<uint32_t>& spec);
  size_t size() const { return kernels_.size(); }
  // While set, get() makes a kernel's interface and layouts but not its pipeline (a dry
  // recording needs no more: Recorder::Dry); a later get() with it unset compiles it.
  bool defer_pipelines = false;
  // Whether this build embeds the shader (the coopmat variants exist only where glslc knew the
  // extension at build time).
  static bool has_shader(const std::string& shader);

 private:
  struct Module {
    VkShaderModule module = VK_NULL_HANDLE;
    ShaderInterface interface;
  };
  const Module& module(const std::string& shader);
  void create_pipeline(Kernel& k, const Module& m, const std::vector<uint32_t>& spec);

  const Context& ctx_;
  std::map<std::string, Module> modules_;
  std::map<std::string, std::unique_ptr<Kernel>> kernels_;
};

// Defers pipeline compilation for its lifetime (PipelineCache::defer_pipelines): dry recordings
// of a forward for arena planning compile nothing the real passes may never run.
class DeferredPipelines {
 public:
  explicit DeferredPipelines(PipelineCache& cache);
  ~DeferredPipelines();
  DeferredPipelines(const DeferredPipelines&) = delete;
  DeferredPipelines& operator=(const DeferredPipelines&) = delete;

 private:
  PipelineCache& cache_;
  bool was_;
};

// A pipeline's compiler statistics ("Register Count", "Spill Count", ... as the driver names
// them) where the context captures them (Context::pipeline_statistics); empty elsewhere.
struct PipelineStatistic {
  std::string name;
  double value = 0;
};
std::vector<PipelineStatistic> pipeline_statistics(const Context& ctx, VkPipeline pipeline);

}  // namespace eaglevk::vk
