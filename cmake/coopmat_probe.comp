#version 450
// Compiles only with a glslc that knows GL_KHR_cooperative_matrix (cmake/shaders.cmake).
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
layout(local_size_x = 32) in;
layout(std430, binding = 0) buffer Y { float y[]; };
shared float16_t s[256];
void main() {
  coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> a;
  coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB> b;
  coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> c =
      coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(0.0);
  coopMatLoad(a, s, 0, 16, gl_CooperativeMatrixLayoutRowMajor);
  coopMatLoad(b, s, 0, 16, gl_CooperativeMatrixLayoutColumnMajor);
  c = coopMatMulAdd(a, b, c);
  coopMatStore(c, y, 0, 16, gl_CooperativeMatrixLayoutRowMajor);
}
