# Compiles every GLSL compute shader variant with glslc and embeds the SPIR-V in the library.
# A variant is a shader file plus a list of defines; its name is how C++ asks for it.
set(EAGLEVK_SHADER_DIR ${PROJECT_SOURCE_DIR}/shaders)
set(EAGLEVK_SPV_DIR ${PROJECT_BINARY_DIR}/spv)
file(MAKE_DIRECTORY ${EAGLEVK_SPV_DIR} ${PROJECT_BINARY_DIR}/generated)
file(GLOB EAGLEVK_SHADER_HEADERS CONFIGURE_DEPENDS ${EAGLEVK_SHADER_DIR}/*.glsl ${EAGLEVK_SHADER_DIR}/*.h)

set(EAGLEVK_SPV_FILES "")
set(EAGLEVK_SPV_NAMES "")
function(eaglevk_shader name source)
  set(spv ${EAGLEVK_SPV_DIR}/${name}.spv)
  set(defines "")
  foreach(d ${ARGN})
    list(APPEND defines -D${d})
  endforeach()
  add_custom_command(
    OUTPUT ${spv}
    COMMAND ${GLSLC} --target-env=vulkan1.2 -O -I${EAGLEVK_SHADER_DIR} ${defines}
            -o ${spv} ${EAGLEVK_SHADER_DIR}/${source}
    DEPENDS ${EAGLEVK_SHADER_DIR}/${source} ${EAGLEVK_SHADER_HEADERS}
    COMMENT "glslc ${name}")
  set(EAGLEVK_SPV_FILES ${EAGLEVK_SPV_FILES} ${spv} PARENT_SCOPE)
  set(EAGLEVK_SPV_NAMES ${EAGLEVK_SPV_NAMES} ${name} PARENT_SCOPE)
endfunction()

include(${EAGLEVK_SHADER_DIR}/variants.cmake)

set(EAGLEVK_SHADER_CPP ${PROJECT_BINARY_DIR}/generated/embedded_shaders.cpp)
string(REPLACE ";" "," EAGLEVK_SPV_NAMES_CSV "${EAGLEVK_SPV_NAMES}")
add_custom_command(
  OUTPUT ${EAGLEVK_SHADER_CPP}
  COMMAND ${CMAKE_COMMAND} -DOUT=${EAGLEVK_SHADER_CPP} -DNAMES=${EAGLEVK_SPV_NAMES_CSV}
          -DSPV_DIR=${EAGLEVK_SPV_DIR} -P ${PROJECT_SOURCE_DIR}/cmake/embed_spirv.cmake
  DEPENDS ${EAGLEVK_SPV_FILES} ${PROJECT_SOURCE_DIR}/cmake/embed_spirv.cmake
  COMMENT "embedding SPIR-V")
