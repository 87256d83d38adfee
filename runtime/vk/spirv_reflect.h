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
};

ShaderInterface reflect_spirv(const uint32_t* words, size_t word_count, const std::string& name);

}  // namespace eaglevk::vk
