#!/bin/bash
# GPU checks in one call on a lent machine (docs/perf.md, "Notes on device runs"). Run from the
# repository root; $1 is a folder holding what was built elsewhere:
#   bin/      eaglevk, eaglevk_bench_ops and test binaries (stripped)
#   bin-old/  optional: eaglevk and eaglevk_bench_ops of the previous main, for ratios measured
#             in the same run
#   lib/      the Debian shared libraries they link (libfmt, libpng16, libjpeg, libbenchmark)
#   debs/     optional: Debian's libvulkan1 and glvnd packages (the NVIDIA ICD needs glvnd)
#             and vulkan-validationlayers (the tests run only with the validation layer),
#             unless the caller unpacked them already
#   llama/    optional: a llama.cpp Vulkan build (llama-bench, llama-quantize and their libraries)
#   gguf-py/, llama3-ref/  gguf-py and the Llama-3 tokenizer, for make_8b_gguf.py
# Writes logs under $OUT (or ./gpu-out). Steps, the most wanted first so that a run cut short
# still says something: the matrix-vector kernels (new and old), the 8B-shaped GGUF files
# (written while the kernels are timed), eaglevk bench (new, old) next to llama-bench on
# Q4_K_M, a profiled run, the GPU tests, then the same benchmarks on F16. SHAPES="32,2 64,4 ..."
# adds a matrix-vector shape sweep.
set -u
P=$(realpath "$1"); OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
T0=$(date +%s); stamp() { echo "=== [$(( $(date +%s) - T0 ))s] $*"; }
for f in "$P"/debs/*.deb; do [ -f "$f" ] && dpkg -x "$f" /; done; ldconfig
ICD=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[ -f $ICD ] && export VK_DRIVER_FILES=$ICD
export LD_LIBRARY_PATH=$P/lib:$P/llama${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}  # keep the driver's own
B=$P/bin; OLD=$P/bin-old; M=/dev/shm; TOOLS=$(dirname "$(realpath "$0")")
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>/dev/null
if ! $B/eaglevk devices > "$OUT/devices.txt" 2>&1; then
  # No driver: say why (the loader's view) and stop, rather than time a CPU fallback.
  VK_LOADER_DEBUG=error,driver $B/eaglevk devices 2>&1 | head -30
  exit 1
fi
head -12 "$OUT/devices.txt"

# The 8B files are written on the CPUs while the GPU times the kernels.
(
  [ -f $M/8b-f16.gguf ] || PYTHONPATH=$P/gguf-py python3 "$TOOLS/make_8b_gguf.py" $M/8b-f16.gguf $P/llama3-ref 32
  [ -f $M/8b-q4_k_m.gguf ] || [ ! -x $P/llama/llama-quantize ] ||
    $P/llama/llama-quantize $M/8b-f16.gguf $M/8b-q4_k_m.gguf Q4_K_M "$(nproc)"
) > "$OUT/gguf.log" 2>&1 &
GGUF=$!

stamp "matrix-vector kernels (f16, q6_k, q5_k, q4_k, q3_k, iq4_xs, iq3_xxs, iq2_xs, mxfp4, fp8_b32, int4_b32)"
F='BM_Matvec/(1|4|5|8|11|13|15|16|18|19|20)/4096/4096/(1|4)/|BM_Matvec/(1|8)/14336/|BM_CopyBandwidth'
for b in $B $OLD; do
  [ -x $b/eaglevk_bench_ops ] || continue
  echo "-- $b"
  timeout 60 $b/eaglevk_bench_ops --benchmark_filter="$F" 2>&1 | grep -E '^BM_' | sed 's/min_time:0.500.manual_time//'
done | tee "$OUT/matvec.txt"
for s in ${SHAPES:-}; do
  echo "-- shape $s"
  EAGLEVK_MATVEC_SHAPE=$s timeout 40 $B/eaglevk_bench_ops --benchmark_filter="$F" 2>&1 | grep -E '^BM_'
done | tee -a "$OUT/matvec.txt"

stamp "waiting for the 8B files"
wait $GGUF; tail -2 "$OUT/gguf.log"; ls -la $M/*.gguf

bench() {  # bench FILE: eaglevk (new, old) and llama-bench on one file
  stamp "bench $1"
  for b in $B $OLD; do
    [ -x $b/eaglevk ] || continue
    echo "-- $b"; timeout 120 $b/eaglevk bench -m $M/$1 -p 512 -n 128 -r 2 2>&1 | grep -E '^\| [^m-]|^load:' 
  done
  [ -x $P/llama/llama-bench ] &&
    timeout 120 $P/llama/llama-bench -m $M/$1 -p 512 -n 128 -r 2 -ngl 99 2>&1 | grep -E '^\||ggml_vulkan: 0'
}
[ -f $M/8b-q4_k_m.gguf ] && bench 8b-q4_k_m.gguf
stamp profile
timeout 60 env EAGLEVK_PROFILE=1 $B/eaglevk run -m $M/8b-q4_k_m.gguf -p "The capital of France is" -n 32 > "$OUT/profile.txt" 2>&1
tail -26 "$OUT/profile.txt"

stamp tests
# The tests find the assets where they were built (/work/main).
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
for t in ops_test ops_quant_test moe_ops_test model_golden_test speculative_test replay_test split_attention_test; do
  [ -x $B/$t ] || continue
  timeout 90 $B/$t --gtest_brief=1 > /tmp/test_$t.txt 2>&1
  echo "$t: exit $?, $(grep -c '^\[  FAILED' /tmp/test_$t.txt) failed"
  grep -E '^\[  (PASSED|FAILED) |Failure|Expected|Which is' /tmp/test_$t.txt | head -20
done | tee "$OUT/tests.txt"
[ -f $M/8b-f16.gguf ] && bench 8b-f16.gguf
# Prefill on cooperative matrices or on the scalar GEMM (bin/ must be built with a glslc that
# knows them: -DEAGLEVK_VULKAN_STACK or -DEAGLEVK_GLSLC_COOPMAT; `devices` shows the device's
# matrix shape), then the products and golden prefills on them against their references.
stamp "prefill: cooperative matrices or not"
$B/eaglevk devices 2>&1 | grep -i cooperative
# Both GEMM kernels and the MoE block on this build; the scalar GEMM tile and the MoE block on
# the previous main's too (its scalar tile was 256 threads of 4 x 4 outputs).
for b in $B $OLD; do
  [ -x $b/eaglevk_bench_ops ] || continue
  echo "-- $b"; timeout 180 $b/eaglevk_bench_ops --benchmark_filter='BM_Gemm|BM_MoeExperts' 2>&1 | grep -E '^BM_'
done | tee "$OUT/gemm.txt"
# Verify passes' experts: up to 8 rows of one expert a workgroup (the GPUs' default) or one.
for v in EAGLEVK_EXPERT_ROWS=8 EAGLEVK_EXPERT_ROWS=1; do
  echo "-- $v"; timeout 60 env $v $B/eaglevk_bench_ops --benchmark_filter='BM_MoeExperts/(1|4)/' 2>&1 | grep -E '^BM_'
done | tee "$OUT/expert_rows.txt"
for f in 8b-q4_k_m.gguf 8b-f16.gguf; do
  [ -f $M/$f ] || continue
  for v in EAGLEVK_COOPMAT=1 EAGLEVK_COOPMAT=0; do
    echo "-- $f $v"; timeout 120 env $v $B/eaglevk bench -m $M/$f -p 512 -n 0 -r 3 2>&1 | grep -E '^\| [^m-]|error'
  done
done | tee "$OUT/coopmat.txt"
for t in "ops_test Shapes/MatmulTest.*:OpsTest.Coopmat*" "ops_quant_test Shapes/QuantMatmulTest.*" "model_golden_test *"; do
  set -- $t
  [ -x $B/$1 ] || continue
  EAGLEVK_COOPMAT=1 timeout 90 $B/$1 --gtest_brief=1 --gtest_filter="$2" > /tmp/coopmat_$1.txt 2>&1
  echo "coopmat $1: exit $?, $(grep -c '^\[  FAILED' /tmp/coopmat_$1.txt) failed"; tail -3 /tmp/coopmat_$1.txt
done | tee -a "$OUT/coopmat.txt"
# Choices made on lavapipe and waiting for a GPU's verdict: RMSNorm folded into the products
# (off by default on GPUs), rope and the KV write folded into the q/k/v product (on; the
# 8B-shaped product both ways first) and replayed decode steps (on): F16 decode each way.
timeout 60 $B/eaglevk_bench_ops --benchmark_filter='BM_QkvRope' 2>&1 | grep -E '^BM_' | tee "$OUT/qkv_rope.txt"
if [ -f $M/8b-f16.gguf ]; then
  stamp "f16 decode: norms folded or not, rope not folded, replay off"
  for v in EAGLEVK_FOLD_NORMS=0 EAGLEVK_FOLD_NORMS=1 EAGLEVK_FOLD_ROPE=0 EAGLEVK_REPLAY=0; do
    echo "-- $v"; timeout 90 env $v $B/eaglevk bench -m $M/8b-f16.gguf -p 0 -n 128 -r 3 2>&1 | grep -E '^\| [^m-]'
  done | tee "$OUT/choices.txt"
fi
# Attention split along the context (flash-decoding; GPUs split at 256 keys by default, chosen
# on lavapipe without a GPU's verdict): the 8B-shaped kernel both ways at each depth, with the
# rows of a batch sharing workgroups or not (EAGLEVK_ATTENTION_ROWS=1), then Q4_K_M decode both
# ways at depth 0, 512 and 2048.
if [ -f $M/8b-q4_k_m.gguf ]; then
  stamp "attention split or not, rows shared or not"
  for v in EAGLEVK_ATTENTION_ROWS=8 EAGLEVK_ATTENTION_ROWS=1; do
    echo "-- $v"; timeout 60 env $v $B/eaglevk_bench_ops --benchmark_filter='BM_Attention/1/' 2>&1 | grep -E '^BM_'
  done
  for v in EAGLEVK_ATTENTION_SPLIT=0 EAGLEVK_ATTENTION_SPLIT=256 EAGLEVK_ATTENTION_SPLIT=512; do
    for d in 0 512 2048; do
      echo "-- $v depth $d"; timeout 60 env $v $B/eaglevk bench -m $M/8b-q4_k_m.gguf -p 0 -n 64 -r 2 --depth $d 2>&1 | grep -E '^\| [^m-]'
    done
  done | tee "$OUT/split.txt"
fi
stamp end
