#!/usr/bin/env bash
# The test command README.md gives: configure, build, produce the Llama-3 tokenizer
# reference, run every test with the validation layer on.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build
node tests/tokenizer_ref/make_reference.mjs build/llama3-ref
export EAGLEVK_LLAMA3_REF="$PWD/build/llama3-ref"
ctest --test-dir build --output-on-failure -j2
