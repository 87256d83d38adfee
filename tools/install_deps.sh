#!/usr/bin/env bash
# Installs what eaglevk needs: Debian 12 packages through apt and, for the tests, the tokenizer
# reference's npm packages through npm. README.md's two commands and .ci/run all use this list.
#
#   install_deps.sh build   the compiler, CMake, the libraries and lavapipe (the demo's needs)
#   install_deps.sh tests   also GoogleTest, Google Benchmark, the validation layer, valgrind,
#                           clang with libFuzzer, python3, Node.js and npm, then `npm ci` in
#                           tests/tokenizer_ref and tests/openai_client (pinned by their
#                           package-lock.json files)
#
# apt is asked only for the packages not installed yet, so on a machine that has them all this
# runs as any user and touches nothing; otherwise it needs root, or sudo. Node.js and npm come
# from Debian only when no `node` and `npm` are on PATH: a Node.js from elsewhere (NodeSource's
# nodejs, for one, carries its own npm) conflicts with Debian's npm package, and apt would then
# install nothing at all.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-build}

build_packages=(build-essential cmake ninja-build pkg-config ca-certificates libvulkan-dev glslc
  libfmt-dev libcli11-dev nlohmann-json3-dev libpcre2-dev libpng-dev libjpeg62-turbo-dev
  libcpp-httplib-dev mesa-vulkan-drivers)
test_packages=(libgtest-dev libgmock-dev libbenchmark-dev libglm-dev vulkan-validationlayers valgrind
  clang libclang-rt-dev bsdutils python3 python3-jinja2 git)

case "$mode" in
  build) wanted=("${build_packages[@]}") ;;
  tests) wanted=("${build_packages[@]}" "${test_packages[@]}") ;;
  *) echo "usage: tools/install_deps.sh [build|tests]" >&2; exit 2 ;;
esac
if [ "$mode" = tests ] && ! { command -v node && command -v npm; } >/dev/null; then
  wanted+=(nodejs npm)
fi

missing=()
for package in "${wanted[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$package" 2>/dev/null || true)
  [ "$status" = installed ] || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  as_root=()
  if [ "$(id -u)" != 0 ]; then
    if ! command -v sudo >/dev/null; then
      echo "install_deps.sh: these Debian packages are missing and this is not root (no sudo either):" \
           "${missing[*]}" >&2
      exit 1
    fi
    as_root=(sudo)
  fi
  echo "install_deps.sh: installing ${missing[*]}"
  "${as_root[@]}" apt-get update
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
fi

if [ "$mode" = tests ]; then
  # `npm ci` starts from an empty node_modules each time; skip it when the installed tree is
  # the one the lock file describes (npm ls checks it without the network). tests/tokenizer_ref
  # makes the tokenizer reference; tests/openai_client drives `eaglevk serve` with OpenAI's client.
  for folder in tests/tokenizer_ref tests/openai_client; do
    if [ -f "$folder/node_modules/.package-lock.json" ] &&
       [ "$folder/node_modules/.package-lock.json" -nt "$folder/package-lock.json" ] &&
       (cd "$folder" && npm ls --all >/dev/null 2>&1); then
      echo "install_deps.sh: $folder/node_modules is up to date"
    else
      (cd "$folder" && npm ci --no-audit --no-fund)
    fi
  done
fi
