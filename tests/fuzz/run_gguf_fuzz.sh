#!/usr/bin/env bash
# Fuzzes the GGUF parser for SECONDS (default 60): builds eaglevk_gguf_fuzz with clang's
# libFuzzer, ASan and UBSan in build-fuzz/, seeds a corpus, runs it. Exits non-zero when the
# fuzzer finds a crash, a sanitizer report, a leak, a timeout or an out-of-memory; the input
# that did it is left in build-fuzz/fuzz-artifacts/.
#
# Seeds: tests/fuzz/seeds/*.gguf (small valid files written by write_gguf: metadata of every
# value type, one tensor of every supported dtype, alignment 32 and 64) and the first 256 KiB
# of each vendored llama.cpp file under assets/gguf/ (its whole header, which is ~130 KiB, and
# the start of the data).
set -euo pipefail
seconds=${1:-60}
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="$root/build-fuzz"

CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DEAGLEVK_FUZZ=ON -DEAGLEVK_BUILD_TESTS=OFF >/dev/null
cmake --build "$build" --target eaglevk_gguf_fuzz

corpus="$build/fuzz-corpus"
artifacts="$build/fuzz-artifacts"
mkdir -p "$corpus" "$artifacts"
cp "$root"/tests/fuzz/seeds/*.gguf "$corpus"/
find "$root/assets/gguf" -name '*.gguf' -print0 | while IFS= read -r -d '' f; do
  head -c 262144 "$f" >"$corpus/head-$(basename "$f")"
done

# libFuzzer returns non-zero on any finding; set -e turns that into this script's status.
"$build/eaglevk_gguf_fuzz" "$corpus" -max_total_time="$seconds" -rss_limit_mb=2048 -max_len=262144 \
  -timeout=10 -print_final_stats=1 -artifact_prefix="$artifacts/"
