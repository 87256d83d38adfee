#!/usr/bin/env bash
# Fuzzes the image decoders (PNG, JPEG) and the Llama-4 image preprocessing for SECONDS
# (default 60): builds eaglevk_image_fuzz with clang's libFuzzer, ASan and UBSan, seeds a
# corpus, runs it. Exits non-zero when the fuzzer finds a crash, a sanitizer report, a leak, a
# timeout or an out-of-memory; the input that did it is left in $BUILD/fuzz-artifacts-image/.
# BUILD (default build-fuzz, which run_gguf_fuzz.sh shares) is the build directory.
#
# Seeds: the 6 PNGs of assets/tiny-llama4-vision/images/ (8-bit RGB) and tests/fuzz/seeds/image/
# (written with tests/support/image_writers.h, i.e. libpng's and libjpeg's own encoders: baseline,
# progressive and greyscale JPEGs; palette + tRNS, 16-bit grey, 1-bit grey, grey + alpha and
# interlaced RGBA PNGs). tests/fuzz/image.dict holds PNG chunk names and JPEG markers.
set -euo pipefail
seconds=${1:-60}
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${BUILD:-$root/build-fuzz}"

CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DEAGLEVK_FUZZ=ON -DEAGLEVK_BUILD_TESTS=OFF >/dev/null
cmake --build "$build" --target eaglevk_image_fuzz

corpus="$build/fuzz-corpus-image"
artifacts="$build/fuzz-artifacts-image"
mkdir -p "$corpus" "$artifacts"
cp "$root"/assets/tiny-llama4-vision/images/*.png "$root"/tests/fuzz/seeds/image/* "$corpus"/

# libFuzzer returns non-zero on any finding; set -e turns that into this script's status.
# -max_len 65536: the seeds are under 9 KB; larger inputs only slow each run down.
"$build/eaglevk_image_fuzz" "$corpus" -dict="$root/tests/fuzz/image.dict" -max_total_time="$seconds" \
  -rss_limit_mb=2048 -max_len=65536 -timeout=10 -print_final_stats=1 -artifact_prefix="$artifacts/"
