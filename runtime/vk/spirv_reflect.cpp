#include "runtime/vk/spirv_reflect.h"

#include <algorithm>
#include <map>
#include <vector>

#include <eaglevk/error.h>

namespace eaglevk::vk {
namespace {

enum Op : uint32_t {
  OpExecutionMode = 16, OpTypeInt = 21, OpTypeFloat = 22, OpTypeVector = 23, OpTypeImage = 25, OpTypeStruct = 30,
  OpTypePointer = 32, OpConstant = 43, OpSpecConstant = 50, OpSpecConstantComposite = 51, OpVariable = 59,
  OpDecorate = 71, OpMemberDecorate = 72,
};
enum Decoration : uint32_t { SpecId = 1, BuiltIn = 11, Binding = 33, DescriptorSet = 34, Offset = 35 };
constexpr uint32_t kExecutionModeLocalSize = 17;
constexpr uint32_t kBuiltInWorkgroupSize = 25;
enum StorageClass : uint32_t { UniformConstant = 0, Uniform = 2, PushConstant = 9, StorageBuffer = 12 };
constexpr uint32_t kDimBuffer = 5;     // OpTypeImage Dim
constexpr uint32_t kSampledStorage = 2;  // OpTypeImage Sampled: read and written without a sampler

// The SPIR-V image formats a texel buffer binding may declare: 4-byte and 16-byte texels.
VkFormat texel_format(uint32_t spirv_format) {
  switch (spirv_format) {
    case 1: return VK_FORMAT_R32G32B32A32_SFLOAT;  // Rgba32f
    case 3: return VK_FORMAT_R32_SFLOAT;           // R32f
    case 30: return VK_FORMAT_R32G32B32A32_UINT;   // Rgba32ui
    case 33: return VK_FORMAT_R32_UINT;            // R32ui
    default: return VK_FORMAT_UNDEFINED;
  }
}

}  // namespace

ShaderInterface reflect_spirv(const uint32_t* words, size_t count, const std::string& name) {
  if (count < 5 || words[0] != 0x07230203) fail("shader '{}' is not SPIR-V", name);
  std::map<uint32_t, uint32_t> scalar_bytes;                    // type id -> size
  std::map<uint32_t, std::vector<uint32_t>> struct_members;     // struct id -> member type ids
  std::map<uint32_t, std::map<uint32_t, uint32_t>> member_offset;
  std::map<uint32_t, std::pair<uint32_t, uint32_t>> pointers;   // pointer id -> (class, pointee)
  std::map<uint32_t, uint32_t> binding, set;
  std::map<uint32_t, std::pair<uint32_t, uint32_t>> images;     // image type id -> (dim and sampled, format)
  std::vector<std::pair<uint32_t, uint32_t>> variables;         // (pointer type, id)
  // The workgroup size: LocalSize, unless a WorkgroupSize built-in (local_size_x_id) overrides it.
  std::map<uint32_t, uint32_t> constant_value, spec_id;         // scalar constant id -> value, SpecId
  std::map<uint32_t, std::vector<uint32_t>> composites;          // composite id -> constituent ids
  uint32_t workgroup_size_id = 0;
  ShaderInterface out;

  for (size_t i = 5; i < count;) {
    uint32_t length = words[i] >> 16, op = words[i] & 0xffff;
    if (length == 0 || i + length > count) fail("shader '{}': malformed SPIR-V", name);
    const uint32_t* w = words + i;
    switch (op) {
      case OpTypeInt:
      case OpTypeFloat: scalar_bytes[w[1]] = w[2] / 8; break;
      case OpTypeVector: scalar_bytes[w[1]] = scalar_bytes[w[2]] * w[3]; break;
      case OpTypeImage:
        if (length < 9) fail("shader '{}': malformed SPIR-V", name);
        images[w[1]] = {w[3] == kDimBuffer && w[7] == kSampledStorage ? 1u : 0u, w[8]};
        break;
      case OpTypeStruct: struct_members[w[1]].assign(w + 2, w + length); break;
      case OpTypePointer: pointers[w[1]] = {w[2], w[3]}; break;
      case OpVariable: variables.push_back({w[1], w[2]}); break;
      case OpExecutionMode:
        if (length >= 6 && w[2] == kExecutionModeLocalSize) std::copy(w + 3, w + 6, out.workgroup);
        break;
      case OpConstant:
      case OpSpecConstant:
        if (length >= 4) constant_value[w[2]] = w[3];
        break;
      case OpSpecConstantComposite:
        composites[w[2]].assign(w + 3, w + length);
        break;
      case OpDecorate:
        if (length < 4) break;  // a decoration without operands (Block)
        if (w[2] == Binding) binding[w[1]] = w[3];
        if (w[2] == DescriptorSet) set[w[1]] = w[3];
        if (w[2] == SpecId) {
          out.spec_constants = std::max(out.spec_constants, w[3] + 1);
          spec_id[w[1]] = w[3];
        }
        if (w[2] == BuiltIn && w[3] == kBuiltInWorkgroupSize) workgroup_size_id = w[1];
        break;
      case OpMemberDecorate:
        if (w[3] == Offset) member_offset[w[1]][w[2]] = w[4];
        break;
    }
    i += length;
  }

  if (auto size = composites.find(workgroup_size_id); workgroup_size_id && size != composites.end()) {
    if (size->second.size() != 3) fail("shader '{}': malformed WorkgroupSize", name);
    for (int i = 0; i < 3; ++i)
      if (auto value = constant_value.find(size->second[i]); value != constant_value.end())
        out.workgroup[i] = value->second;
    if (auto id = spec_id.find(size->second[0]); id != spec_id.end()) out.workgroup_x_spec_id = id->second;
  }

  std::map<uint32_t, VkFormat> bindings;  // binding -> texel format (UNDEFINED: storage buffer)
  for (auto [pointer_type, id] : variables) {
    auto pointer = pointers.find(pointer_type);
    if (pointer == pointers.end()) continue;
    auto [storage, pointee] = pointer->second;
    if (storage == PushConstant) {
      const auto& members = struct_members[pointee];
      for (uint32_t m = 0; m < members.size(); ++m) {
        auto size = scalar_bytes.find(members[m]);
        if (size == scalar_bytes.end()) fail("shader '{}': push constants must be scalars or vectors", name);
        out.push_constant_bytes = std::max(out.push_constant_bytes, member_offset[pointee][m] + size->second);
      }
    } else if (storage == StorageBuffer || storage == Uniform || storage == UniformConstant) {
      VkFormat format = VK_FORMAT_UNDEFINED;
      if (storage == UniformConstant) {
        auto image = images.find(pointee);
        if (image == images.end() || !image->second.first)
          fail("shader '{}': only storage buffers and storage texel buffers can be bound", name);
        format = texel_format(image->second.second);
        if (format == VK_FORMAT_UNDEFINED)
          fail("shader '{}': a texel buffer must declare r32f, r32ui, rgba32f or rgba32ui", name);
      }
      if (set.count(id) && set[id] != 0) fail("shader '{}': only descriptor set 0 is supported", name);
      if (!binding.count(id)) fail("shader '{}': buffer without a binding", name);
      bindings[binding[id]] = format;
    }
  }
  out.bindings = uint32_t(bindings.size());
  if (!bindings.empty() && bindings.rbegin()->first + 1 != bindings.size())
    fail("shader '{}': bindings must be 0..n-1 without gaps", name);
  for (const auto& [b, format] : bindings) out.texel_formats.push_back(format);
  return out;
}

uint32_t workgroup_x(const ShaderInterface& shader, const std::vector<uint32_t>& spec) {
  if (shader.workgroup_x_spec_id != ShaderInterface::kNoSpecId && shader.workgroup_x_spec_id < spec.size())
    return spec[shader.workgroup_x_spec_id];
  return shader.workgroup[0];
}

uint32_t workgroup_invocations(const ShaderInterface& shader, const std::vector<uint32_t>& spec) {
  return workgroup_x(shader, spec) * shader.workgroup[1] * shader.workgroup[2];
}

}  // namespace eaglevk::vk
