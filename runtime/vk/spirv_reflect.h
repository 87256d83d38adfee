#pragma once
// Just enough SPIR-V reflection to derive a pipeline layout from the shader itself, so that
// binding counts and push-constant sizes are never kept in sync by hand (as in zeux/niagara).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <vulkan/vulkan.h>

namespace eaglevk::vk {

struct ShaderInterface {
  uint32_t bindings = 0;  // bindings 0..n-1 of set 0
  // Per binding: VK_FORMAT_UNDEFINED for a storage buffer, else the format of a storage texel
  // buffer (an imageBuffer declared with its format, read through a view of that format).
  std::vector<VkFormat> texel_formats;
  uint32_t push_constant_bytes = 0;
  uint32_t spec_constants = 0;   // highest SpecId + 1
  // The workgroup's size; its x comes from the specialization constant workgroup_x_spec_id
  // (local_size_x_id) unless that is kNoSpecId, and is workgroup[0] by default. Pipelines that
  // require a subgroup size need it (full subgroups: x a multiple of the size).
  static constexpr uint32_t kNoSpecId = ~0u;
  uint32_t workgroup[3] = {1, 1, 1};
  uint32_t workgroup_x_spec_id = kNoSpecId;
};

ShaderInterface reflect_spirv(const uint32_t* words, size_t word_count, const std::string& name);

// The workgroup's x size of a kernel made from `shader` with these specialization values.
uint32_t workgroup_x(const ShaderInterface& shader, const std::vector<uint32_t>& spec);
// Its invocations (x * y * z).
uint32_t workgroup_invocations(const ShaderInterface& shader, const std::vector<uint32_t>& spec);

}  // namespace eaglevk::vk
