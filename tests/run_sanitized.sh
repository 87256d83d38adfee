#!/usr/bin/env bash
# The host-side suites under AddressSanitizer and UndefinedBehaviorSanitizer: every parser of
# a file users download (safetensors, GGUF, config.json, tokenizer.json, chat templates, images,
# quantized blocks) through its loader test, in a build of its own (build-asan/, the
# EAGLEVK_SANITIZE option). Only the loader library and its tests are built: they need no
# Vulkan device, so this stays a few minutes. Any sanitizer report fails the run.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$root/build-asan"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEAGLEVK_SANITIZE=ON >/dev/null
targets=$(cd "$root/tests" && ls loader_*_test.cpp | sed 's/\.cpp$//')
# shellcheck disable=SC2086
cmake --build "$build" --target $targets
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export EAGLEVK_LLAMA3_REF="${EAGLEVK_LLAMA3_REF:-$root/build/llama3-ref}"
ctest --test-dir "$build" --output-on-failure -j2 -R '^loader_'
