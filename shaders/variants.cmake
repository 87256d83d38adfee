# Every compiled shader variant: eaglevk_shader(NAME FILE DEFINES...).
# Weight precision is a build-time define (it changes the buffer's element type); sizes and
# switches are specialization constants; per-call values are push constants. The suffixes are
# ops::weight_type_name(): the float types, then ggml's block formats (decoded in quant.glsl).
foreach(wtype f32 f16 bf16 q4_0 q4_1 q5_0 q5_1 q8_0 q4_k q5_k q6_k)
  string(TOUPPER ${wtype} WT)
  eaglevk_shader(embed_${wtype} embed.comp W_${WT})
  eaglevk_shader(matvec_${wtype} matvec.comp W_${WT})
  eaglevk_shader(gemm_${wtype} gemm.comp W_${WT})
  eaglevk_shader(matvec_id_${wtype} matvec_id.comp W_${WT})
endforeach()
eaglevk_shader(norm norm.comp)
eaglevk_shader(rope rope.comp)
eaglevk_shader(kv_write kv_write.comp)
eaglevk_shader(attention attention.comp)
eaglevk_shader(swiglu swiglu.comp)
eaglevk_shader(add add.comp)
eaglevk_shader(softmax softmax.comp)
eaglevk_shader(argmax argmax.comp)
eaglevk_shader(copy_rows copy_rows.comp)
eaglevk_shader(moe_route moe_route.comp)
eaglevk_shader(sample sample.comp)
eaglevk_shader(tree_topk tree_topk.comp)
eaglevk_shader(tree_build tree_build.comp)
