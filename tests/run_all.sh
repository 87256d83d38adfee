#!/usr/bin/env bash
# The test command README.md gives: configure, build, produce the Llama-3 tokenizer
# reference, run every test with the validation layer on.
set -euo pipefail
cd "$(dirname "$0")/.."
# Debian 13's glslc and lavapipe, unpacked into build/vulkan-stack, build and run the
# cooperative-matrix kernels that Debian 12's cannot (tools/vulkan_stack/fetch.py says why).
# EAGLEVK_NO_VULKAN_STACK=1 tests without them, where deb.debian.org cannot be reached.
stack=()
if [ "${EAGLEVK_NO_VULKAN_STACK:-0}" != 1 ]; then
  if ! python3 tools/vulkan_stack/fetch.py build/vulkan-stack; then
    echo "run_all.sh: could not unpack Debian 13's Vulkan stack; EAGLEVK_NO_VULKAN_STACK=1 runs the" \
         "tests without the cooperative-matrix kernels" >&2
    exit 1
  fi
  stack=(-DEAGLEVK_VULKAN_STACK="$PWD/build/vulkan-stack")
else
  echo "run_all.sh: EAGLEVK_NO_VULKAN_STACK=1: the cooperative-matrix kernels are neither built nor tested" >&2
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${stack[@]}"
cmake --build build
node tests/tokenizer_ref/make_reference.mjs build/llama3-ref
export EAGLEVK_LLAMA3_REF="$PWD/build/llama3-ref"
ctest --test-dir build --output-on-failure -j2
