# Compiles every GLSL compute shader variant with glslc and embeds the SPIR-V in the library.
# A variant is a shader file plus a list of defines; its name is how C++ asks for it.
set(EAGLEVK_SHADER_DIR ${PROJECT_SOURCE_DIR}/shaders)
set(EAGLEVK_SPV_DIR ${PROJECT_BINARY_DIR}/spv)
file(MAKE_DIRECTORY ${EAGLEVK_SPV_DIR} ${PROJECT_BINARY_DIR}/generated)
file(GLOB EAGLEVK_SHADER_HEADERS CONFIGURE_DEPENDS ${EAGLEVK_SHADER_DIR}/*.glsl ${EAGLEVK_SHADER_DIR}/*.h)

set(EAGLEVK_SPV_FILES "")
set(EAGLEVK_SPV_NAMES "")
# Cooperative-matrix kernels need a glslc that knows GL_KHR_cooperative_matrix (Debian 12's
# shaderc 2023.2 does not; Debian 13's does). EAGLEVK_COOPMAT: AUTO builds them where
# EAGLEVK_GLSLC_COOPMAT (default: GLSLC) compiles cmake/coopmat_probe.comp, ON requires it, OFF
# leaves them out. A build without them runs every prefill on gemm.comp.
# EAGLEVK_VULKAN_STACK names a folder made by tools/vulkan_stack/fetch.py (Debian 13's glslc,
# lavapipe, loader and validation layer, unpacked): its glslc builds the kernels and
# tests/CMakeLists.txt runs their tests on its lavapipe.
set(EAGLEVK_VULKAN_STACK "" CACHE PATH "A newer Vulkan stack from tools/vulkan_stack/fetch.py, for the coopmat kernels")
set(coopmat_glslc_default "${GLSLC}")
if(EAGLEVK_VULKAN_STACK)
  set(coopmat_glslc_default "${EAGLEVK_VULKAN_STACK}/glslc")
endif()
# A build folder configured before with another stack (or none) cached that choice's glslc: when
# the cached value is the default of an earlier choice, not one the user set, the new choice's
# default replaces it, so a build folder can switch between the two README commands.
# EAGLEVK_GLSLC_COOPMAT_DEFAULT remembers which default the cached value came from (a cache
# without it is from a build before this rule, whose default was GLSLC or a stack's glslc).
if(DEFINED CACHE{EAGLEVK_GLSLC_COOPMAT} AND NOT EAGLEVK_GLSLC_COOPMAT STREQUAL coopmat_glslc_default)
  set(previous_default "${EAGLEVK_GLSLC_COOPMAT_DEFAULT}")
  if(NOT DEFINED CACHE{EAGLEVK_GLSLC_COOPMAT_DEFAULT}
     AND (EAGLEVK_GLSLC_COOPMAT STREQUAL GLSLC OR EAGLEVK_GLSLC_COOPMAT MATCHES "/vulkan-stack/glslc$"))
    set(previous_default "${EAGLEVK_GLSLC_COOPMAT}")
  endif()
  if(EAGLEVK_GLSLC_COOPMAT STREQUAL previous_default)
    message(STATUS "cooperative-matrix glslc: the Vulkan-stack choice changed, ${previous_default} -> ${coopmat_glslc_default}")
    set_property(CACHE EAGLEVK_GLSLC_COOPMAT PROPERTY VALUE "${coopmat_glslc_default}")
  endif()
endif()
set(EAGLEVK_GLSLC_COOPMAT "${coopmat_glslc_default}" CACHE FILEPATH "glslc for the cooperative-matrix kernels")
set(EAGLEVK_GLSLC_COOPMAT_DEFAULT "${coopmat_glslc_default}" CACHE INTERNAL "The default EAGLEVK_GLSLC_COOPMAT was set from")
set(EAGLEVK_HAVE_COOPMAT OFF)
if(NOT EAGLEVK_COOPMAT STREQUAL "OFF")
  execute_process(
    COMMAND ${EAGLEVK_GLSLC_COOPMAT} --target-env=vulkan1.2 -o ${PROJECT_BINARY_DIR}/coopmat_probe.spv
            ${PROJECT_SOURCE_DIR}/cmake/coopmat_probe.comp
    RESULT_VARIABLE coopmat_probe_result OUTPUT_QUIET ERROR_QUIET)
  if(coopmat_probe_result EQUAL 0)
    set(EAGLEVK_HAVE_COOPMAT ON)
  elseif(EAGLEVK_COOPMAT STREQUAL "ON" OR EAGLEVK_VULKAN_STACK)
    if(EAGLEVK_COOPMAT STREQUAL "ON")
      set(why "EAGLEVK_COOPMAT=ON")
    else()
      set(why "EAGLEVK_VULKAN_STACK=${EAGLEVK_VULKAN_STACK}")
    endif()
    message(FATAL_ERROR "${why} but ${EAGLEVK_GLSLC_COOPMAT} does not compile GL_KHR_cooperative_matrix")
  endif()
endif()
message(STATUS "cooperative-matrix kernels: ${EAGLEVK_HAVE_COOPMAT} (${EAGLEVK_GLSLC_COOPMAT})")

# eaglevk_shader(NAME FILE DEFINES...), compiled by GLSLC, or by EAGLEVK_GLSLC_COOPMAT where
# EAGLEVK_SHADER_COMPILER says so.
function(eaglevk_shader name source)
  set(compiler ${GLSLC})
  if(EAGLEVK_SHADER_COMPILER)
    set(compiler ${EAGLEVK_SHADER_COMPILER})
  endif()
  set(spv ${EAGLEVK_SPV_DIR}/${name}.spv)
  set(defines "")
  foreach(d ${ARGN})
    list(APPEND defines -D${d})
  endforeach()
  add_custom_command(
    OUTPUT ${spv}
    COMMAND ${compiler} --target-env=vulkan1.2 -O -I${EAGLEVK_SHADER_DIR} ${defines}
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
