#include "runtime/vk/spirv_reflect.h"

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include <eaglevk/error.h>

namespace eaglevk::vk {
namespace {

enum Op : uint32_t {
  OpTypeInt = 21, OpTypeFloat = 22, OpTypeVector = 23, OpTypeStruct = 30, OpTypePointer = 32,
  OpVariable = 59, OpDecorate = 71, OpMemberDecorate = 72,
};
enum Decoration : uint32_t { SpecId = 1, Binding = 33, DescriptorSet = 34, Offset = 35 };
enum StorageClass : uint32_t { Uniform = 2, PushConstant = 9, StorageBuffer = 12 };

}  // namespace

ShaderInterface reflect_spirv(const uint32_t* words, size_t count, const std::string& name) {
  if (count < 5 || words[0] != 0x07230203) fail("shader '{}' is not SPIR-V", name);
  std::map<uint32_t, uint32_t> scalar_bytes;                    // type id -> size
  std::map<uint32_t, std::vector<uint32_t>> struct_members;     // struct id -> member type ids
  std::map<uint32_t, std::map<uint32_t, uint32_t>> member_offset;
  std::map<uint32_t, std::pair<uint32_t, uint32_t>> pointers;   // pointer id -> (class, pointee)
  std::map<uint32_t, uint32_t> binding, set;
  std::vector<std::pair<uint32_t, uint32_t>> variables;         // (pointer type, id)
  ShaderInterface out;

  for (size_t i = 5; i < count;) {
    uint32_t length = words[i] >> 16, op = words[i] & 0xffff;
    if (length == 0 || i + length > count) fail("shader '{}': malformed SPIR-V", name);
    const uint32_t* w = words + i;
    switch (op) {
      case OpTypeInt:
      case OpTypeFloat: scalar_bytes[w[1]] = w[2] / 8; break;
      case OpTypeVector: scalar_bytes[w[1]] = scalar_bytes[w[2]] * w[3]; break;
      case OpTypeStruct: struct_members[w[1]].assign(w + 2, w + length); break;
      case OpTypePointer: pointers[w[1]] = {w[2], w[3]}; break;
      case OpVariable: variables.push_back({w[1], w[2]}); break;
      case OpDecorate:
        if (w[2] == Binding) binding[w[1]] = w[3];
        if (w[2] == DescriptorSet) set[w[1]] = w[3];
        if (w[2] == SpecId) out.spec_constants = std::max(out.spec_constants, w[3] + 1);
        break;
      case OpMemberDecorate:
        if (w[3] == Offset) member_offset[w[1]][w[2]] = w[4];
        break;
    }
    i += length;
  }

  std::set<uint32_t> bindings;
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
    } else if (storage == StorageBuffer || storage == Uniform) {
      if (set.count(id) && set[id] != 0) fail("shader '{}': only descriptor set 0 is supported", name);
      if (!binding.count(id)) fail("shader '{}': buffer without a binding", name);
      bindings.insert(binding[id]);
    }
  }
  out.storage_buffers = uint32_t(bindings.size());
  if (!bindings.empty() && *bindings.rbegin() + 1 != bindings.size())
    fail("shader '{}': bindings must be 0..n-1 without gaps", name);
  return out;
}

}  // namespace eaglevk::vk
