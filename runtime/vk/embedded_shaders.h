#pragma once
// SPIR-V compiled by glslc at build time (cmake/shaders.cmake) and linked into the library.
#include <cstddef>
#include <cstdint>

namespace eaglevk::vk {

struct EmbeddedShader {
  const char* name;
  const uint32_t* words;
  size_t word_count;
};

extern const EmbeddedShader kEmbeddedShaders[];
extern const size_t kEmbeddedShaderCount;

}  // namespace eaglevk::vk
