#!/usr/bin/env bash
# Prepares the GPU check on the CPU machine: one compressed pack (at most 56 MiB) holding what
# a bare GPU machine needs to run tools/gpu/gpu_check.sh, and the exact call to make
# (docs/gpu-check.md). Run from the repository root:
#   bash tools/gpu/pack.sh [--build DIR] [--out FILE] [--no-llama] [--lavapipe]
# --build   a build folder configured with the Vulkan stack (cooperative-matrix kernels);
#           default build/ (tests/run_all.sh makes it so)
# --out     the pack; default .gpu/pack.tar.xz (.gpu/ is ignored by git, carried to the device)
# --no-llama  leave llama.cpp's llama-bench and llama-quantize out (the dry run: CI has no
#           time to build them)
# --lavapipe  the test suite's dry run: a build without cooperative-matrix kernels is accepted
# --prebuilt  take the binaries as BUILD holds them (the suite's dry run, while other tests run)
# The pack holds: stripped eaglevk binaries (the CLI, the kernel table, the checkpoint writer,
# the GPU tests), the shared libraries they need beyond glibc, Debian's Vulkan loader and glvnd
# packages (unpacked into / on the device: it has none), Debian's validation layer (unpacked
# under the pack, found through VK_ADD_LAYER_PATH), llama.cpp's two tools built from the
# node-llama-cpp bundle with the same glslc, the tiny pair A, the real Llama-3 tokenizer, and
# gpu_check.sh with summarize.py. Cached between runs under ${XDG_CACHE_HOME:-~/.cache}/eaglevk-gpu.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
BUILD=build
OUT_FILE=.gpu/pack.tar.xz
LLAMA=1
LAVAPIPE=0
PREBUILT=0
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD=$2; shift ;;
    --out) OUT_FILE=$2; shift ;;
    --no-llama) LLAMA=0 ;;
    --lavapipe) LAVAPIPE=1 ;;
    --prebuilt) PREBUILT=1 ;;
    *) echo "pack.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
BUILD=$(cd "$BUILD" && pwd)
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/eaglevk-gpu
LIMIT=$((56 << 20))
mkdir -p "$CACHE" "$(dirname "$OUT_FILE")"
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
say() { echo "pack.sh: $*" >&2; }

# The GPU tests: binary, its gtest filter on a GPU, and a short one for the dry run on lavapipe
# (the suite runs them whole). Pair A's assets only travel.
GPU_TESTS="ops_test OpsTest.CoopmatGemm:OpsTest.RmsNormFolded*:OpsTest.AttentionValuesStaged*:OpsTest.AttentionIsBatchInvariant:OpsTest.MatvecIsBatchInvariant:OpsTest.MatvecRowsOuts* OpsTest.MatvecIsBatchInvariant
ops_quant_test QuantTest.MatvecIsBatchInvariant:QuantTest.MatvecRowsOuts* QuantTest.EmbeddingGathersRows
moe_ops_test * GpuTest.*
split_attention_test */0 */0
replay_test */0 Pairs/Replay.ChainRoundsGiveWhatRecordingEveryRoundGives/0
model_golden_test Llama3Golden.*:TinyModels/ModelGolden.*/llama3 TinyModels/ModelGolden.*/llama3
speculative_test PairA.* PairA.VerifyLogitsEqualDecodeLogitsBitwise
tree_speculative_test Pairs/TreeGolden.*/0:Pairs/TreeTopOne.*/0:TreeParams.* Pairs/TreeTopOne.*/0"
BINARIES="eaglevk eaglevk_kernel_table eaglevk-synth $(echo "$GPU_TESTS" | cut -d' ' -f1 | tr '\n' ' ')"

# --- 1. Binaries: built in BUILD (with the cooperative-matrix kernels unless --lavapipe).
cache_value() { sed -n "s/^$1:[A-Z]*=//p" "$BUILD/CMakeCache.txt"; }
stack=$(cache_value EAGLEVK_VULKAN_STACK)
if [ -z "$stack" ] && [ $LAVAPIPE = 0 ]; then
  say "$BUILD was not configured with the Vulkan stack (-DEAGLEVK_VULKAN_STACK=...): its shaders lack the"
  say "cooperative-matrix kernels a GPU's prefill uses. Run tests/run_all.sh first, or pass --lavapipe."
  exit 1
fi
if [ $PREBUILT = 0 ]; then
  say "building $BINARIES in $BUILD"
  cmake --build "$BUILD" --target $BINARIES >/dev/null
fi
mkdir -p "$STAGE/bin" "$STAGE/lib"
for b in $BINARIES; do
  f=$(find "$BUILD" -maxdepth 2 -type f -name "$b" -perm -u+x | head -1)
  [ -n "$f" ] || { say "no binary $b under $BUILD"; exit 1; }
  strip -o "$STAGE/bin/$b" "$f"
done
if [ $LAVAPIPE = 0 ] && ! grep -q gemm_f16_coopmat "$STAGE/bin/eaglevk"; then
  say "eaglevk has no cooperative-matrix kernels (gemm_f16_coopmat): the build's glslc did not know them"
  exit 1
fi
echo "$GPU_TESTS" > "$STAGE/gpu_tests.txt"

# Shared libraries beyond glibc and the Vulkan loader (which comes as a package).
copy_libs() {
  ldd "$@" 2>/dev/null | awk '/=> \// {print $3}' | sort -u | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*|libvulkan.so*|libstdc++.so*|libgcc_s.so*) ;;
      *) [ -e "$STAGE/llama/$(basename "$lib")" ] || cp -Ln "$lib" "$STAGE/lib/" ;;
    esac
  done
}
copy_libs "$STAGE"/bin/*

# --- 2. Debian's packages: the Vulkan loader and glvnd for /, the validation layer for the pack.
DEBS=$CACHE/debs-$(. /etc/os-release; echo "$VERSION_CODENAME")
mkdir -p "$DEBS"
(cd "$DEBS" && for p in libvulkan1 libglvnd0 libglx0 libegl1 libgl1 libgles2 libopengl0 vulkan-validationlayers; do
  ls "${p}"_*.deb >/dev/null 2>&1 || apt-get -q -o APT::Sandbox::User=root download "$p" >/dev/null
done)
mkdir -p "$STAGE/debs" "$STAGE/vk"
for f in "$DEBS"/*.deb; do
  case "$(basename "$f")" in
    vulkan-validationlayers_*) dpkg -x "$f" "$STAGE/vk" ;;
    *) cp "$f" "$STAGE/debs/" ;;
  esac
done
rm -rf "$STAGE/vk/usr/share/doc"
# The layer's manifest names its library by file name: found through LD_LIBRARY_PATH.
[ -f "$STAGE/vk/usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json" ] ||
  { say "vulkan-validationlayers did not unpack its manifest"; exit 1; }

# --- 3. llama.cpp's llama-bench and llama-quantize, from the node-llama-cpp bundle.
if [ $LLAMA = 1 ]; then
  LLAMA_DIR=$(bash "$ROOT/tools/gpu/build_llama.sh" "$CACHE" "${stack}")
  mkdir -p "$STAGE/llama"
  for b in llama-bench llama-quantize; do strip -o "$STAGE/llama/$b" "$LLAMA_DIR/bin/$b"; done
  # Each library once, under the name the binaries ask for: unversioned real files and the
  # .so.0 sonames (links, taken as their targets); not the links' other names.
  for l in "$LLAMA_DIR"/bin/*.so "$LLAMA_DIR"/bin/*.so.0; do
    [ -e "$l" ] || continue
    case "$l" in *.so) [ -L "$l" ] && continue ;; esac
    strip -o "$STAGE/llama/$(basename "$l")" "$l"
  done
  copy_libs "$STAGE"/llama/llama-bench
fi

# --- 4. Assets: the tiny pair A (the GPU tests, EAGLE-3 end to end), the Llama-3 tokenizer.
mkdir -p "$STAGE/assets" "$STAGE/tokenizer"
cp -r assets/tiny-llama3 assets/tiny-llama3-eagle3 "$STAGE/assets/"
REF=${EAGLEVK_LLAMA3_REF:-$BUILD/llama3-ref}
[ -f "$REF/tokenizer.json" ] || { say "no Llama-3 tokenizer at $REF (tests/run_all.sh makes it)"; exit 1; }
cp "$REF/tokenizer.json" "$REF/tokenizer_config.json" "$STAGE/tokenizer/" 2>/dev/null ||
  cp "$REF/tokenizer.json" "$STAGE/tokenizer/"
cp tools/gpu/gpu_check.sh tools/gpu/summarize.py tools/gpu/variants.txt "$STAGE/"
python3 - "$STAGE/manifest.json" "$ROOT" "$BUILD" "$LLAMA" <<'EOF'
import json, subprocess, sys, datetime
out, root, build, llama = sys.argv[1:]
commit = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True).stdout.strip()
json.dump({"commit": commit + ("+changes" if dirty else ""), "made": datetime.datetime.utcnow().isoformat() + "Z",
           "assets": root + "/assets", "cli": build + "/eaglevk", "llama": llama == "1"}, open(out, "w"), indent=1)
EOF

# --- 5. One xz stream (a 64 MiB window: the binaries' common code and shaders compress once).
tar -C "$STAGE" -cf - . | xz -9 -T1 > "$OUT_FILE"
size=$(stat -c %s "$OUT_FILE")
if [ "$size" -gt "$LIMIT" ]; then
  say "the pack is $((size >> 20)) MiB, over the 56 MiB that may travel; its largest parts:"
  du -a "$STAGE" | sort -n | tail -8 >&2
  exit 1
fi
say "wrote $OUT_FILE: $((size >> 10)) KiB (limit 56 MiB)"
cat <<EOF
The GPU calls (device tool \`run\`), two per loan of about 15 minutes:
  1. Move the tracked assets aside so that the tree travels under 64 MiB:
       mv assets ../eaglevk-assets-aside
  2. run with carry [".gpu"], timeout_s 540, and the command:
       mkdir -p /tmp/pack && tar -xJf $OUT_FILE -C /tmp/pack && OUT=\$OUT bash /tmp/pack/gpu_check.sh --budget 480
  3. With the device time left (status; the machine's start took about 40 s), a second call
     with timeout_s 330 for what the first leaves (tools/gpu/variants.txt, Scout, the tests):
       mkdir -p /tmp/pack && tar -xJf $OUT_FILE -C /tmp/pack && OUT=\$OUT TEST_DEADLINE=30 bash /tmp/pack/gpu_check.sh --budget 300 --steps variants,scout,tests --tests-first
  4. Put the assets back at once, whatever the calls returned, and give the device back:
       mv ../eaglevk-assets-aside assets
  Back come summary.json, gpu_check.log, kernel_table.json and raw.tar.gz; docs/gpu-check.md says how to read them.
EOF
