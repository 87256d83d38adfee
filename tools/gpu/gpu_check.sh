#!/usr/bin/env bash
# The GPU check: one call on a lent GPU machine, from a pack that tools/gpu/pack.sh made on the
# CPU machine (docs/gpu-check.md). Run from the unpacked pack:
#   bash PACK/gpu_check.sh [--lavapipe] [--budget SECONDS]
# The most wanted figures come first, so that a run cut short still answers the main question:
#   1. the device, and (in the background) the 8B-shaped F16 and Q4_K_M GGUF files and drafts;
#   2. the ceiling (a copy, a read-only reduction) and the kernel table from GPU timestamps;
#   3. eaglevk bench next to llama-bench on the same files (-p 512 -n 128), and at depth 2048;
#   4. profiles: a decode step, a k=3 chain round, a 16-node tree verify; Scout-shaped MoE;
#   5. the layer split's hop: one device against the same device opened twice (--devices 0,0);
#   6. EAGLE-3 end to end on the tiny pair A;
#   7. variants: eaglevk bench under the switches tools/gpu/variants.txt lists (A/B of kernel
#      choices in one run, each beside the default on the same file);
#   8. the GPU tests.
# --steps LIST runs only the named groups (comma-separated: table, bench, depth, profiles, split,
# scout, variants, tiny, tests; the device and, where a step needs them, the files always come
# first): a second call in one loan measures what the first left open without repeating the rest.
# The default, main, is every group but the variants; all is every one (the dry run).
# Every step runs under a deadline inside the budget (default 480 s). Everything goes to $OUT
# (default ./gpu-out): summary.json (tools/gpu/summarize.py) and gpu_check.log, plus the raw
# kernel table and raw.tar.gz (every step's own output: the tests' full logs, the profiles).
# --lavapipe is the dry run on a CPU device (the test suite's gpu_pack_dry_run): short sizes,
# the same steps, no change to / (the system's Vulkan loader is used).
set -u
P=$(cd "$(dirname "$0")" && pwd)
LAVAPIPE=0
BUDGET=480
STEPS=main
TESTS_FIRST=0
while [ $# -gt 0 ]; do
  case "$1" in
    --lavapipe) LAVAPIPE=1 ;;
    --budget) BUDGET=$2; shift ;;
    --steps) STEPS=$2; shift ;;
    --tests-first) TESTS_FIRST=1 ;;
    *) echo "gpu_check.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
RAW=$OUT/raw            # step outputs; summarize.py folds them into summary.json
mkdir -p "$RAW"
LOG=$OUT/gpu_check.log
exec > >(tee -a "$LOG") 2>&1
exec 3>&1  # the log, for the steps' own lines while their output goes to a file
T0=$(date +%s)
elapsed() { echo $(( $(date +%s) - T0 )); }
stamp() { echo "=== [$(elapsed)s] $*" >&3; }
# step NAME MAX_SECONDS COMMAND...: runs it with at most MAX_SECONDS, never past the budget
# (keeping RESERVE seconds for the summary); records its exit status in raw/steps.tsv.
RESERVE=15
step() {
  local name=$1 max=$2; shift 2
  local left=$(( BUDGET - RESERVE - $(elapsed) ))
  if [ "$left" -lt 5 ]; then
    echo "=== skipped $name: the budget is spent" >&3
    printf '%s\tskipped\t0\n' "$name" >> "$RAW/steps.tsv"
    return 1
  fi
  [ "$max" -gt "$left" ] && max=$left
  stamp "$name (at most ${max}s)"
  local t=$(date +%s)
  timeout -k 5 "$max" "$@"
  local rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$(( $(date +%s) - t ))" >> "$RAW/steps.tsv"
  [ $rc -eq 124 ] && echo "=== $name: stopped at its deadline (${max}s)" >&3
  return $rc
}
: > "$RAW/steps.tsv"
# wanted GROUP: whether --steps asks for this group of steps.
# main (the default): every group but the variants, which a second call times; all: every one.
wanted() { [ "$STEPS" = all ] || { [ "$STEPS" = main ] && [ "$1" != variants ]; } || [[ ",$STEPS," == *",$1,"* ]]; }
echo "gpu_check: pack $(cat "$P/manifest.json" 2>/dev/null | tr -d '\n' | cut -c1-400)"

# --- Environment: the pack's libraries first, the machine's driver directories kept.
if [ $LAVAPIPE = 0 ]; then
  # The Vulkan loader and glvnd (the NVIDIA ICD loads through them) go into /, as the device
  # machine has none; everything else stays under the pack.
  for f in "$P"/debs/*.deb; do [ -f "$f" ] && dpkg -x "$f" /; done
  ldconfig
  ICD=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
  [ -f $ICD ] && export VK_DRIVER_FILES=$ICD
  EGL=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
  [ -f $EGL ] && export __EGL_VENDOR_LIBRARY_FILENAMES=$EGL
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>/dev/null
fi
export LD_LIBRARY_PATH=$P/lib:$P/vk/usr/lib/x86_64-linux-gnu:$P/llama${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export VK_ADD_LAYER_PATH=$P/vk/usr/share/vulkan/explicit_layer.d
export EAGLEVK_LLAMA3_REF=$P/tokenizer
B=$P/bin
# The test binaries look for the assets and the CLI where they were built (manifest.json). Where
# that path does not hold what the pack holds (on the device the repository copy may sit at the
# same path with its assets moved aside: an empty or partial folder), the thing there is renamed
# aside (never deleted) and the path links to the pack's. The dry run's is the real checkout:
# left alone. The golden helper (tests/support/golden.cpp) takes EAGLEVK_TEST_ASSETS first;
# other test helpers use the compiled-in path, hence the link too.
# holds_pack KEY PATH: whether PATH has what the pack's KEY has (every asset file; an executable).
holds_pack() {
  case $1 in
    assets) [ -d "$2" ] || return 1
            (cd "$P/assets" && find . -type f) | while read -r f; do [ -f "$2/$f" ] || { echo missing; break; }; done | grep -q missing && return 1
            return 0 ;;
    cli) [ -f "$2" ] && [ -x "$2" ] ;;
  esac
}
for pair in assets:assets cli:bin/eaglevk; do
  key=${pair%%:*}; target=$P/${pair#*:}
  built=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['$key'])" "$P/manifest.json" 2>/dev/null)
  [ -n "$built" ] || continue
  holds_pack "$key" "$built" && continue
  if [ -e "$built" ] || [ -L "$built" ]; then
    aside="$built.aside-by-gpu-check-$(date +%s)"
    mv "$built" "$aside" && echo "gpu_check: $built lacks the pack's $key: moved aside to $aside"
  fi
  mkdir -p "$(dirname "$built")" && ln -s "$target" "$built"
done
export EAGLEVK_TEST_ASSETS=$P/assets

if [ $LAVAPIPE = 1 ]; then
  WORK=${WORK:-$(mktemp -d)}
  export GGML_VK_VISIBLE_DEVICES=0  # llama.cpp hides CPU devices (lavapipe) unless named
  GGUF_KIND=llama3-small-gguf; LAYERS=2
  TABLE_ARGS=(--scale 16 --l2-mib 1 --read-mib 64 --reps 20 --types f16,q4_k --rows 1,8 --gemm-rows 64 --gemm-variants)
  BENCH_P=64; BENCH_N=16; DEPTH=128; VARIANT_DEPTH=64; TINY_N=32; TREE=(--spec-steps 3 --spec-topk 2 --spec-draft-tokens 6)
else
  WORK=/dev/shm
  GGUF_KIND=llama3-8b-gguf; LAYERS=32
  TABLE_ARGS=(--l2-mib 60 --read-mib 4096 --reps 24 --shapes "128,2;128,4;256,2" --gemm-variants)
  BENCH_P=512; BENCH_N=128; DEPTH=2048; VARIANT_DEPTH=1024; TINY_N=128; TREE=(--spec-steps 4 --spec-topk 4 --spec-draft-tokens 16)
fi
F16=$WORK/8b-f16.gguf; Q4=$WORK/8b-q4_k_m.gguf; DRAFT=$WORK/8b-eagle3

step devices 30 "$B/eaglevk" devices --env > "$RAW/devices.txt" 2>&1
rc=$?
cat "$RAW/devices.txt" | head -40
if [ $rc -ne 0 ]; then
  # No driver: say why (the loader's view) and stop rather than time a CPU fallback.
  VK_LOADER_DEBUG=error,driver "$B/eaglevk" devices 2>&1 | head -30
  python3 "$P/summarize.py" "$RAW" "$OUT/summary.json" "$BUDGET"
  exit 1
fi

# --- The files, on the CPUs while the GPU times the kernels.
(
  "$B/eaglevk-synth" $GGUF_KIND "$F16" --tokenizer "$P/tokenizer" --layers $LAYERS
  if [ -x "$P/llama/llama-quantize" ]; then
    "$P/llama/llama-quantize" "$F16" "$Q4" Q4_K_M "$(nproc)" > "$RAW/quantize.txt" 2>&1 || echo "llama-quantize failed"
  fi
  # The 8B-shaped draft (random weights: rounds accept about nothing; they are timed, not scored).
  [ $LAVAPIPE = 0 ] && "$B/eaglevk-synth" eagle3-8b "$DRAFT" --aux 2,16,29
) > "$RAW/files.txt" 2>&1 &
FILES=$!

# --- The GPU tests, with the validation layer, each under its own deadline (TEST_DEADLINE
# seconds, default 90); their whole logs go into raw.tar.gz.
# The validation layer the pack carries (Debian 12's 1.3.239) predates VK_KHR_cooperative_matrix:
# on a driver that has it, every process gets errors about the extension the layer does not know,
# which would fail every test and hide the real results. EAGLEVK_VALIDATION_IGNORE prints those
# without counting them: unknown pNext structures in vkGetPhysicalDeviceProperties2 (0xdd73dbcf)
# and vkCreateDevice (0x901f59ec); the SPIR-V extension SPV_KHR_cooperative_matrix (0xd80a42ae)
# and its capability (0x2c00a3d6); spirv-val's "invalid capability operand 6022"
# (InconsistentSpirv 0x6bbb14, and again at pipeline creation, module-parameter 0xfd71dc70); and
# spirv-opt failing to specialize such a module (0x6002c3e1). VUID-...-pNext-02757 (0xce5474db,
# "workgroup size x (1) is not a multiple of the subgroup size", read from the unspecialized
# module) stays counted: it also catches real errors. In the H200 run it came only for
# cooperative-matrix pipelines (the module of each had failed specialization), so it fails
# exactly the tests that build them. A layer that knows the extension would make all this
# unnecessary. Not on lavapipe, which has no cooperative matrices: nothing is ignored there.
VALIDATION_IGNORE=0xdd73dbcf,0x901f59ec,0xd80a42ae,0x2c00a3d6,0x6bbb14,0xfd71dc70,0x6002c3e1
[ $LAVAPIPE = 1 ] && VALIDATION_IGNORE=
run_tests() {
  : > "$RAW/tests.txt"
  while read -r t filter dry_filter; do
    [ -x "$B/$t" ] || continue
    [ $LAVAPIPE = 1 ] && filter=$dry_filter
    step "test_$t" "${TEST_DEADLINE:-90}" env EAGLEVK_VALIDATE=1 EAGLEVK_VALIDATION_IGNORE="$VALIDATION_IGNORE" "$B/$t" --gtest_brief=1 --gtest_filter="$filter" > "$RAW/test_$t.txt" 2>&1 < /dev/null
    rc=$?
    echo "$t: exit $rc, $(grep -c '^\[  FAILED' "$RAW/test_$t.txt") failed" | tee -a "$RAW/tests.txt"
    grep -E '^\[  (PASSED|FAILED) |Failure|Expected|Which is' "$RAW/test_$t.txt" | head -20 | tee -a "$RAW/tests.txt"
  done < "$P/gpu_tests.txt"
  # The coopmat GEMM's numerics once more without the validation layer, which (above) fails its
  # pipelines for the layer's age: the products against the f64 reference, the experts' too.
  if [ $LAVAPIPE = 0 ]; then
    for t in ops_test:OpsTest.CoopmatGemm moe_ops_test:Batches/MoeTest.*; do
      b=${t%%:*}
      step "test_${b}_coopmat_unvalidated" "${TEST_DEADLINE:-90}" "$B/$b" --gtest_brief=1 --gtest_filter="${t#*:}" > "$RAW/test_${b}_coopmat.txt" 2>&1 < /dev/null
      rc=$?
      echo "${b}_coopmat_unvalidated: exit $rc, $(grep -c '^\[  FAILED' "$RAW/test_${b}_coopmat.txt") failed" | tee -a "$RAW/tests.txt"
      grep -E '^\[  (PASSED|FAILED) |Failure|Expected|Which is' "$RAW/test_${b}_coopmat.txt" | head -20 | tee -a "$RAW/tests.txt"
    done
  fi
}
# --tests-first: the tests run while the files are written (a second call that wants them early).
wanted tests && [ $TESTS_FIRST = 1 ] && run_tests

wanted table && step kernel_table 110 "$B/eaglevk_kernel_table" "${TABLE_ARGS[@]}" --deadline-s 95 -o "$RAW/kernel_table.json"

stamp "waiting for the files"
step files 150 bash -c "while kill -0 $FILES 2>/dev/null; do sleep 1; done"
cat "$RAW/files.txt"; ls -la "$WORK"/*.gguf 2>/dev/null

# bench NAME FILE "ARGS": eaglevk bench and llama-bench on one file with the same arguments
# (llama-bench's -d is eaglevk's --depth), JSON each.
bench() {
  local name=$1 file=$2 args=$3
  [ -f "$file" ] || { echo "=== $name: no file $file"; return; }
  step "eaglevk_$name" 120 "$B/eaglevk" bench -m "$file" $args -o json > "$RAW/eaglevk_$name.json"
  if [ -x "$P/llama/llama-bench" ]; then
    step "llama_$name" 120 "$P/llama/llama-bench" -m "$file" ${args/--depth/-d} -ngl 99 -o json > "$RAW/llama_$name.json"
  fi
}
if wanted bench; then
  bench q4_k_m "$Q4" "-p $BENCH_P -n $BENCH_N -r 2"
  bench f16 "$F16" "-p $BENCH_P -n $BENCH_N -r 2"
fi
if wanted depth; then
  bench q4_k_m_depth "$Q4" "-p 0 -n $BENCH_N --depth $DEPTH -r 1"
  [ -f "$Q4" ] || bench f16_depth "$F16" "-p 0 -n $BENCH_N --depth $DEPTH -r 1"
fi

# --- Profiles: a decode step, a k=3 chain round and a 16-node tree verify (GPU timestamps after
# every command), on the 8B shape with its draft; on lavapipe, on the tiny pair A.
if [ $LAVAPIPE = 0 ] && [ -f "$Q4" ] && [ -d "$DRAFT" ]; then PT=$Q4; PD=$DRAFT
else PT=$P/assets/tiny-llama3; PD=$P/assets/tiny-llama3-eagle3; fi
if wanted profiles; then
  step profile_chain 90 "$B/eaglevk" bench -m "$PT" -d "$PD" -k 3 -p 0 -n 32 -r 1 --profile -o json > "$RAW/profile_chain.json"
  step profile_tree 90 "$B/eaglevk" bench -m "$PT" -d "$PD" "${TREE[@]}" -p 0 -n 32 -r 1 --profile -o json > "$RAW/profile_tree.json"
fi

# --- Layer split (issue 47): what a hop between devices costs. One device against the same
# device opened twice (--devices 0,0 --split 1,1: two logical devices, the layers half and half,
# one hop per pass through host staging), in the same run: a prefill and a plain decode on the
# Q4_K_M file (the small F16 one on lavapipe, which has no Q4_K_M), a k=3 chain on the pair. On
# the 8B pair the target is the Q4_K_M file: one load a side gives all three tests. inspect's
# hidden size gives summarize.py the bytes a hop carries. About 30 s on a GPU (the deadlines are
# for a slow first load).
# split_part NAME MODEL BENCH-ARGS...: inspect MODEL, then bench it on one device and on two.
split_part() {
  local name=$1 model=$2; shift 2
  step "split_${name}_model" 20 "$B/eaglevk" inspect "$model" --json > "$RAW/split_${name}_model.json" < /dev/null
  step "split_${name}_one" 60 "$B/eaglevk" bench -m "$model" "$@" --device 0 -r 2 -o json > "$RAW/split_${name}_one.json" < /dev/null
  step "split_${name}_two" 60 "$B/eaglevk" bench -m "$model" "$@" --devices 0,0 --split 1,1 -r 2 -o json > "$RAW/split_${name}_two.json" < /dev/null
}
if wanted split; then
  SM=$Q4; [ -f "$SM" ] || SM=$F16
  if [ "$PT" = "$SM" ]; then
    split_part pair "$PT" -d "$PD" -k 3 -p $BENCH_P -n 64
  else
    if [ -f "$SM" ]; then split_part plain "$SM" -p $BENCH_P -n 64; else echo "=== split: no file $SM"; fi
    split_part chain "$PT" -d "$PD" -k 3 -p 0 -n 32
  fi
fi

# --- Variants (tools/gpu/variants.txt): NAME | ENV | MODEL | ARGS, each an `eaglevk bench` under
# the switches ENV on MODEL (q4, f16, or pair: the 8B shape with its draft, the tiny pair A on
# lavapipe); $BENCH_P, $BENCH_N, $DEPTH (1024 on a GPU, 64 on lavapipe) and $TREE in ARGS take
# this run's sizes. A line whose ENV
# is "-" is the default it is compared with, measured in the same run.
if wanted variants && [ -f "$P/variants.txt" ]; then
  while IFS='|' read -r vname venv vmodel vargs; do
    vname=$(echo $vname); venv=$(echo $venv); vmodel=$(echo $vmodel)
    case "$vname" in ''|'#'*) continue ;; esac
    case "$vmodel" in
      q4) vm=(-m "$Q4") ;; f16) vm=(-m "$F16") ;; pair) vm=(-m "$PT" -d "$PD") ;;
      *) echo "=== variant $vname: unknown model $vmodel"; continue ;;
    esac
    [ -e "${vm[1]}" ] || { echo "=== variant $vname: no file ${vm[1]}"; continue; }
    vargs=${vargs//\$BENCH_P/$BENCH_P}; vargs=${vargs//\$BENCH_N/$BENCH_N}; vargs=${vargs//\$DEPTH/$VARIANT_DEPTH}
    vargs=${vargs//\$TREE/${TREE[*]}}
    [ "$venv" = - ] && venv=
    echo "$vname|$venv|$vmodel|$vargs" >> "$RAW/variants.tsv"
    step "variant_$vname" 60 env $venv "$B/eaglevk" bench "${vm[@]}" $vargs -o json > "$RAW/variant_$vname.json" < /dev/null
  done < "$P/variants.txt"
fi

# --- Scout-shaped mixture of experts (16 experts, top-1; two layers): decode and verify.
if [ $LAVAPIPE = 0 ] && wanted scout; then
  step scout_files 90 bash -c "'$B/eaglevk-synth' llama4-scout '$WORK/scout' --layers 2 --tokenizer '$P/tokenizer' && '$B/eaglevk-synth' eagle3-scout '$WORK/scout-eagle3' --aux 0,1,2" > "$RAW/scout_files.txt" 2>&1
  step profile_scout 90 "$B/eaglevk" bench -m "$WORK/scout" -d "$WORK/scout-eagle3" -k 3 -p 0 -n 16 -r 1 --profile -o json > "$RAW/profile_scout.json"
fi

# --- EAGLE-3 end to end on the tiny pair A: spec-tg / tg.
wanted tiny && step tiny_pair_a 60 "$B/eaglevk" bench -m "$P/assets/tiny-llama3" -d "$P/assets/tiny-llama3-eagle3" -k 3 -p 0 -n $TINY_N -r 3 -o json > "$RAW/tiny_pair_a.json"

wanted tests && [ $TESTS_FIRST = 0 ] && run_tests

stamp "summary"
python3 "$P/summarize.py" "$RAW" "$OUT/summary.json" "$BUDGET"
# Only the summary, the log and the kernel table come back (the device returns at most 8 files).
cp "$RAW/kernel_table.json" "$OUT/kernel_table.json" 2>/dev/null
# Every step's own output in one file (the tests' whole logs, the profiles), at most 16 MiB.
tar -czf "$OUT/raw.tar.gz" -C "$RAW" --exclude kernel_table.json . 2>/dev/null
[ "$(stat -c %s "$OUT/raw.tar.gz" 2>/dev/null || echo 0)" -le $((16 << 20)) ] || rm -f "$OUT/raw.tar.gz"
[ -n "${KEEP_RAW:-}" ] || rm -rf "$RAW"
stamp end
