#!/bin/bash
# GPU checks in one call on a lent machine (docs/perf.md, "Notes on device runs"). Run from the
# repository root; $1 is a folder holding what was built elsewhere:
#   bin/    eaglevk, eaglevk_bench_ops and test binaries (stripped)
#   lib/    the Debian shared libraries they link (libfmt, libpng16, libjpeg, libbenchmark)
#   debs/   Debian's libvulkan1 and glvnd packages (the NVIDIA ICD needs glvnd)
#   llama/  optional: a llama.cpp Vulkan build (llama-bench, llama-quantize and their libraries)
#   gguf-py/, llama3-ref/  gguf-py and the Llama-3 tokenizer, for make_8b_gguf.py
# Writes logs under $OUT (or ./gpu-out). Steps: matrix-vector shape sweep, the 8B-shaped GGUF
# files, eaglevk bench next to llama-bench, a profiled run, the GPU tests.
set -u
P=$(realpath "$1"); OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
T0=$(date +%s); stamp() { echo "=== [$(( $(date +%s) - T0 ))s] $*"; }
for f in "$P"/debs/*.deb; do dpkg -x "$f" /; done; ldconfig
ICD=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[ -f $ICD ] && export VK_DRIVER_FILES=$ICD
export LD_LIBRARY_PATH=$P/lib:$P/llama${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}  # keep the driver's own
B=$P/bin; M=/dev/shm; TOOLS=$(dirname "$(realpath "$0")")
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>/dev/null
if ! $B/eaglevk devices > "$OUT/devices.txt" 2>&1; then
  # No driver: say why (the loader's view) and stop, rather than time a CPU fallback.
  VK_LOADER_DEBUG=error,driver $B/eaglevk devices 2>&1 | head -30
  exit 1
fi
head -12 "$OUT/devices.txt"

stamp "matrix-vector shapes"
F='BM_Matvec/(1|8)/(4096|14336)/4096/1/'
for s in default ${SHAPES:-32,2,1 32,2,4 32,4,1 64,2,1 64,1,4}; do
  if [ $s = default ]; then unset EAGLEVK_MATVEC_SHAPE; else export EAGLEVK_MATVEC_SHAPE=$s; fi
  timeout 40 $B/eaglevk_bench_ops --benchmark_filter="$F" --benchmark_format=csv 2>>"$OUT/sweep_err.txt" |
    grep '^"BM_' | sed "s/^/$s;/"
done > "$OUT/sweep.csv"
unset EAGLEVK_MATVEC_SHAPE
python3 "$TOOLS/sweep_summary.py" "$OUT/sweep.csv" | tee "$OUT/sweep.txt"

stamp "8B-shaped GGUF files"
[ -f $M/8b-f16.gguf ] || PYTHONPATH=$P/gguf-py python3 "$TOOLS/make_8b_gguf.py" $M/8b-f16.gguf $P/llama3-ref 32
[ -f $M/8b-q4_k_m.gguf ] || [ ! -x $P/llama/llama-quantize ] ||
  $P/llama/llama-quantize $M/8b-f16.gguf $M/8b-q4_k_m.gguf Q4_K_M "$(nproc)" > "$OUT/quantize.log" 2>&1

for m in q4_k_m f16; do
  [ -f $M/8b-$m.gguf ] || continue
  stamp "bench $m"
  $B/eaglevk bench -m $M/8b-$m.gguf -p 512 -n 128 -r 3 2>&1 | tail -4
  [ -x $P/llama/llama-bench ] && $P/llama/llama-bench -m $M/8b-$m.gguf -p 512 -n 128 -r 3 -ngl 99 2>&1 | grep -E '^\||ggml_vulkan: 0'
done
EAGLEVK_PROFILE=1 $B/eaglevk run -m $M/8b-q4_k_m.gguf -p "The capital of France is" -n 32 > "$OUT/profile.txt" 2>&1
tail -24 "$OUT/profile.txt"

stamp tests
# The tests find the assets where they were built (/work/main).
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
for t in ops_test ops_quant_test moe_ops_test model_golden_test speculative_test; do
  [ -x $B/$t ] || continue
  timeout 90 $B/$t --gtest_brief=1 > "$OUT/test_$t.txt" 2>&1
  echo "$t: exit $?, $(grep -c '^\[  FAILED' "$OUT/test_$t.txt") failed"
done
stamp end
