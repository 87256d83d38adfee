#!/usr/bin/env bash
# The layers, enforced: vk -> ops -> models -> engine -> api -> apps, with loader beside
# models (it may use only itself). Every include of a project file in a layer, quoted
# (`#include "dir/..."`) or angle-bracketed (`#include <dir/...>`), must name that layer or one
# below it. apps/ uses only the public facade (<eaglevk/eaglevk.hpp>, <eaglevk/eaglevk.h>),
# loader/ for files and itself: no runtime/vk, ops, models or engine. The facade belongs to api
# and apps (<eaglevk/error.h>, the error type, to every layer). Every folder holding C++ has a rule (tests/ and third_party/ aside), so a new folder
# cannot slip past. Prints each violation as file:line and exits 1 when there is one. The build
# runs it (target check_layers), so a wrong include fails the build; ctest runs it too, and
# tests/tools/check_layers_test.sh checks that it catches each kind of violation.
set -euo pipefail
root="${1:-$(cd "$(dirname "$0")/../.." && pwd)}"
cd "$root"

# layer directory | the include prefixes it may use
rules=(
  "runtime/vk|runtime/vk/"
  "runtime/ops|runtime/vk/ runtime/ops/ shaders/"
  "loader|loader/ shaders/"
  "models|runtime/vk/ runtime/ops/ loader/ models/ shaders/"
  "runtime/engine|runtime/vk/ runtime/ops/ loader/ models/ runtime/engine/ shaders/"
  "runtime/api|runtime/vk/ runtime/ops/ loader/ models/ runtime/engine/ runtime/api/ shaders/"
  # The facade's headers: what a program that embeds eaglevk sees (the engine's plain value types,
  # and the profiler's summary: the profiler's public switch is the one part of vk apps may use).
  "runtime/include|loader/ runtime/engine/ runtime/vk/profile.h"
  "shaders|shaders/"
  "apps|apps/ loader/"
)
facade_users="runtime/api runtime/include apps"
# The first folders of the project's own include paths; any other angle include is a library's.
project_roots="runtime models loader apps shaders tests"
unchecked="tests third_party"

status=0
complain() {
  echo "$1"
  status=1
}

cpp_files() { find "$1" -type f \( -name '*.h' -o -name '*.hpp' -o -name '*.cpp' -o -name '*.inl' \) 2>/dev/null; }

for rule in "${rules[@]}"; do
  dir="${rule%%|*}"
  allowed="${rule#*|}"
  [[ -d "$dir" ]] || continue
  while IFS= read -r hit; do
    file="${hit%%:*}"
    rest="${hit#*:}"
    line="${rest%%:*}"
    [[ "$rest" =~ include[[:space:]]*[\"\<]([^\">]+) ]] || continue
    target="${BASH_REMATCH[1]}"
    # Includes relative to the file itself ("x.h" with no folder) are the layer's own.
    [[ "$target" != */* ]] && continue
    first="${target%%/*}"
    if [[ "$first" == eaglevk ]]; then
      # <eaglevk/error.h> (eaglevk::Error, the one error type) is every layer's.
      [[ "$target" == eaglevk/error.h || " $facade_users " == *" $dir "* ]] ||
        complain "$file:$line: layer $dir may not include the public facade <$target> (api and apps only)"
      continue
    fi
    [[ " $project_roots " == *" $first "* ]] || continue  # a library's header (fmt/, vulkan/, ...)
    ok=0
    for prefix in $allowed; do
      [[ "$target" == "$prefix"* ]] && ok=1
    done
    [[ $ok == 1 ]] || complain "$file:$line: layer $dir may not include \"$target\" (allowed: $allowed)"
  done < <(cpp_files "$dir" | sort | xargs -r grep -nHE '^\s*#\s*include\s*["<]' || true)
done

# Every folder with C++ in it is a layer above (or tests/, third_party/): a file elsewhere has
# no rule and would escape the check.
while IFS= read -r file; do
  file="${file#./}"
  known=0
  for rule in "${rules[@]}"; do
    [[ "$file" == "${rule%%|*}/"* ]] && known=1
  done
  for dir in $unchecked; do
    [[ "$file" == "$dir/"* ]] && known=1
  done
  [[ $known == 1 ]] || complain "$file: C++ outside every layer folder (add its folder to tests/tools/check_layers.sh)"
done < <(find . \( -name 'build*' -o -name '.git' -o -name 'node_modules' \) -prune -o -type f \
           \( -name '*.h' -o -name '*.hpp' -o -name '*.cpp' -o -name '*.inl' \) -print | sort)

# The command line loads weights as the C API does, through the facade (api::plan_load and
# api::load_model): a second loading path in apps/ is refused. (`inspect` reads headers only.)
while IFS= read -r hit; do
  complain "$hit: apps load models through the facade (api::plan_load, api::load_model), not models::load_*"
done < <(grep -rnE 'models::load_(target|eagle3)\s*\(' apps --include='*.h' --include='*.cpp' || true)
# Decoders are built by the api layer alone (engine::make_decoder): apps go through api::Session
# and api::BatchSession.
while IFS= read -r hit; do
  complain "$hit: apps decode through api::Session and api::BatchSession, not engine::make_decoder"
done < <(grep -rnE 'engine::make_decoder\s*\(' apps --include='*.h' --include='*.cpp' || true)
# Below the front doors no message names a CLI flag: an error about a setting describes it and
# is tagged with it (eaglevk::Setting), and the CLI and the C API each name it in their own words.
# A string literal holding `--word` (comments aside) in runtime/, models/ or loader/ is refused.
while IFS= read -r hit; do
  code="${hit#*:*:}"
  code="${code%%//*}"
  if grep -qE '"[^"]*(^|[ (`])--[a-z][a-z0-9-]+' <<<"$code"; then
    where="${hit%%:*}:$(cut -d: -f2 <<<"$hit")"
    complain "$where: a layer below apps/ names a CLI flag; describe the setting and tag the error (fail_setting)"
  fi
done < <(grep -rnE --include='*.h' --include='*.cpp' -e '--[a-z][a-z0-9-]+' runtime models loader |
         grep -vE '^[^:]+:[0-9]+:\s*(//|/?\*)' || true)
exit $status
