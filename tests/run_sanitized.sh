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
cmake --build "$build" --target $targets eaglevk
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export EAGLEVK_LLAMA3_REF="${EAGLEVK_LLAMA3_REF:-$root/build/llama3-ref}"
ctest --test-dir "$build" --output-on-failure -j2 -R '^loader_'
# The CLI's bad inputs: the suite's cli_test (build/, from tests/run_all.sh; brought up to date
# here) runs its table against the sanitized CLI (EAGLEVK_CLI_UNDER_TEST), so the test
# support library is not built under the sanitizers. Leak checking stays off for the CLI: Mesa's
# driver and the Vulkan loader keep process-lifetime allocations that LeakSanitizer reports at
# every exit (from an unloaded module); the loader tests above check eaglevk's own parsers for
# leaks. A sanitizer report aborts the CLI, whose exit status or missing `eaglevk: error:` line
# fails the case.
if [ ! -f "$root/build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$root/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEAGLEVK_BUILD_TESTS=ON >/dev/null
fi
cmake --build "$root/build" --target cli_test
log="$build/bad_inputs.log"
EAGLEVK_CLI_UNDER_TEST="$build/eaglevk" ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:detect_stack_use_after_return=1 \
  "$root/build/tests/cli_test" --gtest_filter='Cli.EveryBadInputIsACleanError' 2>&1 | tee "$log"
# The table ran the sanitized binary, not the one cli_test was built with.
grep -qF "the bad-input table runs $build/eaglevk" "$log"
