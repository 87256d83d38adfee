#!/usr/bin/env bash
# Builds the peer's llama-bench and llama-quantize (llama.cpp's Vulkan backend) for the GPU check,
# from the llama.cpp source that the npm package node-llama-cpp ships as a git bundle, with the
# same glslc as eaglevk's shaders (the Vulkan stack's, which knows the cooperative-matrix and
# integer-dot extensions) so that both engines get the kernels the device can run. Outside the
# repository: nothing of llama.cpp is committed. Prints the build folder.
#   build_llama.sh CACHE_DIR [VULKAN_STACK_DIR]
set -euo pipefail
CACHE=$1; STACK=${2:-}
VERSION=3.22.1   # node-llama-cpp; its bundle is llama.cpp de3ff81 (docs/perf.md's peer)
SRC=$CACHE/llama.cpp-$VERSION
OUT=$CACHE/llama-build-$VERSION${STACK:+-stack}
log() { echo "build_llama.sh: $*" >&2; }
if [ -x "$OUT/bin/llama-bench" ] && [ -x "$OUT/bin/llama-quantize" ]; then echo "$OUT"; exit 0; fi
# ggml-vulkan's build needs SPIR-V's headers (a Debian package, not in the test set-up).
dpkg -s spirv-headers >/dev/null 2>&1 || { log "needs Debian's spirv-headers: apt-get install spirv-headers"; exit 1; }
if [ ! -d "$SRC/.git" ]; then
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack "node-llama-cpp@$VERSION" >/dev/null 2>&1 && tar xzf node-llama-cpp-*.tgz)
  git clone -q "$tmp/package/llama/gitRelease.bundle" "$SRC" 2>/dev/null
  rm -rf "$tmp"
fi
# ggml-vulkan needs Vulkan headers newer than Debian 12's (1.3.239): trixie's, unpacked with its
# glslc into a stack of the build's own (tools/vulkan_stack/fetch.py).
HEADERS_STACK=$CACHE/vulkan-stack-headers
if [ ! -f "$HEADERS_STACK/root/usr/include/vulkan/vulkan.hpp" ]; then
  python3 "$(dirname "$0")/../vulkan_stack/fetch.py" "$HEADERS_STACK" libvulkan-dev >&2
fi
[ -n "$STACK" ] && [ -x "$STACK/glslc" ] || STACK=$HEADERS_STACK
cmake_args=(-DVulkan_GLSLC_EXECUTABLE="$STACK/glslc" -DVulkan_INCLUDE_DIR="$HEADERS_STACK/root/usr/include")
log "configuring llama.cpp ($(git -C "$SRC" log --oneline -1 | cut -c1-20)) in $OUT"
cmake -S "$SRC" -B "$OUT" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_VULKAN=ON -DGGML_NATIVE=OFF \
  -DLLAMA_CURL=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF \
  "${cmake_args[@]}" >&2
log "building llama-bench and llama-quantize (the Vulkan shaders take most of it)"
cmake --build "$OUT" --target llama-bench llama-quantize >&2
echo "$OUT"
