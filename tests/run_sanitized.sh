#!/usr/bin/env bash
# The host-side suites under AddressSanitizer and UndefinedBehaviorSanitizer: every parser of
# a file users download (safetensors, GGUF, config.json, tokenizer.json, chat templates, images,
# quantized blocks) through its loader test, in a build of its own (build-asan/, the
# EAGLEVK_SANITIZE option); then the CLI itself, sanitized, over the bad-input table
# (tests/data/bad_inputs.json, cli_test's EveryBadInputIsACleanError): broken files and values
# through the whole program, on lavapipe. Any sanitizer report fails the run.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$root/build-asan"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEAGLEVK_SANITIZE=ON >/dev/null
targets=$(cd "$root/tests" && ls loader_*_test.cpp | sed 's/\.cpp$//')
# shellcheck disable=SC2086
cmake --build "$build" --target $targets eaglevk cli_test
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export EAGLEVK_LLAMA3_REF="${EAGLEVK_LLAMA3_REF:-$root/build/llama3-ref}"
ctest --test-dir "$build" --output-on-failure -j2 -R '^loader_'
# The CLI's bad inputs. Leak checking stays off here: Mesa's driver and the Vulkan loader keep
# process-lifetime allocations that LeakSanitizer would report at every exit; the loader tests
# above check eaglevk's own parsers for leaks. A sanitizer report aborts the CLI, whose exit
# status (not 1) or missing `eaglevk: error:` line fails the case.
ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:detect_stack_use_after_return=1 \
  "$build/tests/cli_test" --gtest_filter='Cli.EveryBadInputIsACleanError'
