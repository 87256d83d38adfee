#!/usr/bin/env bash
# The test command README.md gives (after tools/install_deps.sh tests): configure, build,
# produce the Llama-3 tokenizer reference, run every test with the validation layer on.
set -euo pipefail
cd "$(dirname "$0")/.."
# Debian 13's glslc and lavapipe, unpacked into build/vulkan-stack, build and run the
# cooperative-matrix kernels that Debian 12's cannot (tools/vulkan_stack/fetch.py says why).
# EAGLEVK_NO_VULKAN_STACK=1 tests without them, where Debian's archive cannot be reached.
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
  stack=(-DEAGLEVK_VULKAN_STACK=)
fi
# The tests are switched on explicitly: README's demo command configures the same folder
# without them.
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEAGLEVK_BUILD_TESTS=ON "${stack[@]}"
# EAGLEVK_TEST_TARGETS and EAGLEVK_TEST_REGEX narrow the build and the run to a few tests, for
# tests/tools/check_readme_commands.sh, which runs this script in a scratch copy; they are said.
targets=()
if [ -n "${EAGLEVK_TEST_TARGETS:-}" ]; then
  read -r -a names <<<"$EAGLEVK_TEST_TARGETS"
  targets=(--target "${names[@]}")
  echo "run_all.sh: EAGLEVK_TEST_TARGETS: building only ${names[*]}" >&2
fi
cmake --build build "${targets[@]}"
node tests/tokenizer_ref/make_reference.mjs build/llama3-ref
export EAGLEVK_LLAMA3_REF="$PWD/build/llama3-ref"
select=()
if [ -n "${EAGLEVK_TEST_REGEX:-}" ]; then
  select=(-R "$EAGLEVK_TEST_REGEX")
  echo "run_all.sh: EAGLEVK_TEST_REGEX: running only the tests matching $EAGLEVK_TEST_REGEX" >&2
fi
ctest --test-dir build --output-on-failure --no-tests=error -j2 "${select[@]}"
