#!/usr/bin/env bash
# The installed package: `cmake --install` into a temporary prefix, build apps/examples/embed.c
# with nothing but the compiler and pkg-config, run it on the installed assets, and check
# that it generates. Usage: install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
source=$2
prefix=$(mktemp -d "${TMPDIR:-/tmp}/eaglevk-install.XXXXXX")
trap 'rm -rf "$prefix"' EXIT

cmake --install "$build" --prefix "$prefix" >/dev/null

pc=$(find "$prefix" -name eaglevk.pc)
test -n "$pc" || { echo "install_test: no eaglevk.pc under $prefix"; exit 1; }
export PKG_CONFIG_PATH=$(dirname "$pc")
cflags=$(pkg-config --cflags eaglevk)
libs=$(pkg-config --libs eaglevk)
assets=$(pkg-config --variable=assetsdir eaglevk)
echo "install_test: cflags '$cflags' libs '$libs' assets '$assets'"
# Everything must come from the prefix: no path into the build or source tree.
case "$cflags $libs $assets" in
  *"$build"*|*"$source"*) echo "install_test: pkg-config points outside the prefix"; exit 1 ;;
esac
test -f "$assets/tiny-llama3/model.safetensors"
test -f "$assets/tiny-llama3-eagle3/model.safetensors"
test -x "$prefix/bin/eaglevk"
# The installed CLI's demo runs (it looks for the model under the prefix first).
"$prefix/bin/eaglevk" run --prompt-ids 4091,692 -n 4 --json 2>/dev/null | grep -q '"tokens"'

# Only the C API is exported.
lib=$(find "$prefix" -name 'libeaglevk.so.0' | head -n1)
test -n "$lib" || { echo "install_test: no libeaglevk.so.0"; exit 1; }
if nm -D --defined-only "$lib" | awk '{print $3}' | grep -v '^eaglevk_' | grep -q .; then
  echo "install_test: libeaglevk.so exports more than eaglevk_*:"
  nm -D --defined-only "$lib" | grep -v ' eaglevk_' | head
  exit 1
fi

# The example, built as a user would: C99, no CMake, no include path into the sources.
cc -std=c99 -Wall -Wextra -Werror "$source/apps/examples/embed.c" $cflags $libs -o "$prefix/embed"
out=$(LD_LIBRARY_PATH=$(dirname "$lib") "$prefix/embed" --assets "$assets" -n 8 "The Python standard library")
echo "$out"
ids=$(printf '%s\n' "$out" | sed -n 's/^ids: //p')
test "$(echo "$ids" | wc -w)" -eq 8 || { echo "install_test: expected 8 ids, got '$ids'"; exit 1; }
printf '%s\n' "$out" | grep -q '^mean acceptance length: '
echo "install_test: ok"
