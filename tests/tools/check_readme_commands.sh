#!/usr/bin/env bash
# Runs README.md's two commands, as its text gives them, in a scratch copy of the sources: the
# demo command, then the test command on the build folder the demo left, then the demo again on
# the folder the tests left. Each must succeed, so a build folder configured by one command must
# not break the other (a cached compiler of the other Vulkan-stack choice, the tests switched
# off, ...). Usage: check_readme_commands.sh ROOT BUILD
#
# Kept to a minute or two: the scratch build takes the objects of BUILD where their sources are
# byte for byte the same (tests/tools/reuse_objects.py), the npm packages and the Vulkan stack's
# .debs already here are copied in (apt-get update still asks Debian's archive for its lists),
# everything tools/install_deps.sh would install is installed already, and the test command
# builds and runs only EAGLEVK_TEST_TARGETS / EAGLEVK_TEST_REGEX (tests/run_all.sh says them).
set -euo pipefail
root=$(cd "$1" && pwd) build=$(cd "$2" && pwd)
scratch=$build/readme-commands
tools=$root/tests/tools
rm -rf "$scratch"
mkdir -p "$scratch/src" "$scratch/bin"

# The two commands: the fenced blocks of README.md's "Two commands" section, in order.
python3 - "$root/README.md" "$scratch" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
section = re.search(r"^## Two commands\n(.*?)(?=^## )", text, re.S | re.M)
if not section:
    sys.exit("check_readme_commands.sh: README.md has no '## Two commands' section")
blocks = re.findall(r"^```sh\n(.*?)^```", section.group(1), re.S | re.M)
if len(blocks) != 2:
    sys.exit(f"check_readme_commands.sh: {len(blocks)} sh blocks under '## Two commands', not 2")
for name, block in zip(("demo", "tests"), blocks):
    open(f"{sys.argv[2]}/{name}.sh", "w").write(block)
    print(f"{name} command:\n{block}")
PY
if ! grep -q 'build/eaglevk' "$scratch/demo.sh" || ! grep -q 'run_all.sh' "$scratch/tests.sh"; then
  echo "check_readme_commands.sh: the first block must build and run the demo, the second run tests/run_all.sh"
  exit 1
fi

# The sources as they are now (tracked and new files, not ignored ones), plus what the install
# step and fetch.py would otherwise download again.
git -C "$root" ls-files -z -co --exclude-standard | tar -C "$root" --null -T - -cf - | tar -C "$scratch/src" -xf -
for folder in tests/tokenizer_ref tests/openai_client; do
  if [ -d "$root/$folder/node_modules" ]; then
    cp -a "$root/$folder/node_modules" "$scratch/src/$folder/"
  fi
done
if [ -d "$build/vulkan-stack/debs" ]; then
  mkdir -p "$scratch/src/build/vulkan-stack"
  cp -a "$build/vulkan-stack/debs" "$scratch/src/build/vulkan-stack/"
fi

python3 "$tools/reuse_objects.py" index "$root" "$build" "$scratch/src" "$scratch/index"
glslc=$(grep -m1 '^GLSLC:' "$build/CMakeCache.txt" | cut -d= -f2-)
case "$glslc" in */reuse/glslc|"") glslc=$(command -v glslc) ;; esac
printf '#!/bin/sh\nexec python3 "%s" glslc "%s" "$@"\n' "$tools/reuse_objects.py" "$glslc" >"$scratch/bin/glslc"
printf '#!/bin/sh\nexec python3 "%s" compile "$@"\n' "$tools/reuse_objects.py" >"$scratch/bin/launch"
chmod +x "$scratch/bin/glslc" "$scratch/bin/launch"
export PATH="$scratch/bin:$PATH" EAGLEVK_REUSE_INDEX="$scratch/index"
export CMAKE_CXX_COMPILER_LAUNCHER="$scratch/bin/launch" CMAKE_C_COMPILER_LAUNCHER="$scratch/bin/launch"
export EAGLEVK_TEST_TARGETS="eaglevk" EAGLEVK_TEST_REGEX='^(layers|cli_help)$'

step() {
  echo "== $1 (README.md's $2 command)"
  local start=$SECONDS
  if ! (cd "$scratch/src" && bash -eo pipefail "$scratch/$2.sh") >"$scratch/$1.log" 2>&1; then
    echo "FAILED: $1; the end of its output:"
    tail -30 "$scratch/$1.log"
    exit 1
  fi
  echo "   ok in $((SECONDS - start)) s"
}
step "demo on a fresh clone" demo
test -x "$scratch/src/build/eaglevk"
step "tests after the demo" tests
# The test command must have switched the folder to the Vulkan stack's glslc and built the
# coopmat kernels with it (under EAGLEVK_NO_VULKAN_STACK=1, which run_all.sh honours, to the
# system's glslc without them).
if [ "${EAGLEVK_NO_VULKAN_STACK:-0}" = 1 ]; then
  echo "   EAGLEVK_NO_VULKAN_STACK=1: checking that the test command configured without the Vulkan stack"
  want_glslc=$scratch/bin/glslc want_coopmat=OFF
else
  want_glslc=$scratch/src/build/vulkan-stack/glslc want_coopmat=ON
fi
if ! grep -qx "EAGLEVK_GLSLC_COOPMAT:FILEPATH=$want_glslc" "$scratch/src/build/CMakeCache.txt" ||
   ! grep -q "cooperative-matrix kernels: $want_coopmat" "$scratch/tests after the demo.log"; then
  echo "FAILED: after the test command the coopmat glslc is not $want_glslc, or the kernels not $want_coopmat:"
  grep '^EAGLEVK_GLSLC_COOPMAT:' "$scratch/src/build/CMakeCache.txt"
  grep 'cooperative-matrix kernels:' "$scratch/tests after the demo.log"
  exit 1
fi
step "demo after the tests" demo
rm -rf "$scratch"
echo "README.md's commands ran in order in a scratch copy"
