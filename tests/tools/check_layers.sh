#!/usr/bin/env bash
# The layers, enforced: vk -> ops -> models -> engine -> api -> apps, with loader beside
# models (it may use only itself). Every `#include "dir/..."` in a layer must name that layer
# or one below it; the public C++ facade (<eaglevk/eaglevk.hpp>, <eaglevk/eaglevk.h>) belongs
# to api and apps, and apps load weights only through it. Prints each violation as file:line
# and exits 1 when there is one. The build runs it (target check_layers), so a wrong include
# fails the build; ctest runs it too.
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
)
facade_users="runtime/api apps"

status=0
for rule in "${rules[@]}"; do
  dir="${rule%%|*}"
  allowed="${rule#*|}"
  while IFS= read -r hit; do
    file="${hit%%:*}"
    rest="${hit#*:}"
    line="${rest%%:*}"
    target="$(sed -E 's/.*#include "([^"]+)".*/\1/' <<<"$rest")"
    # Includes relative to the file itself ("x.h" with no folder) are the layer's own.
    [[ "$target" != */* ]] && continue
    ok=0
    for prefix in $allowed; do
      [[ "$target" == "$prefix"* ]] && ok=1
    done
    if [[ $ok == 0 ]]; then
      echo "$file:$line: layer $dir may not include \"$target\" (allowed: $allowed)"
      status=1
    fi
  done < <(grep -rnE '^\s*#\s*include\s+"' "$dir" --include='*.h' --include='*.cpp' || true)
  if [[ " $facade_users " != *" $dir "* ]]; then
    while IFS= read -r hit; do
      echo "$hit: layer $dir may not include the public facade (api and apps only)"
      status=1
    done < <(grep -rnE '^\s*#\s*include\s+<eaglevk/eaglevk\.hp?p?>' "$dir" --include='*.h' --include='*.cpp' || true)
  fi
done

# The command line loads weights as the C API does, through the facade (api::plan_load and
# api::load_model): a second loading path in apps/ is refused. (`inspect` reads headers only.)
while IFS= read -r hit; do
  echo "$hit: apps load models through the facade (api::plan_load, api::load_model), not models::load_*"
  status=1
done < <(grep -rnE 'models::load_(target|eagle3)\s*\(' apps --include='*.h' --include='*.cpp' || true)
# Below the front doors no message names a CLI flag: an error about a setting describes it and
# is tagged with it (eaglevk::Setting), and the CLI and the C API each name it in their own words.
# A string literal holding `--word` (comments aside) in runtime/, models/ or loader/ is refused.
while IFS= read -r hit; do
  code="${hit#*:*:}"
  code="${code%%//*}"
  if grep -qE '"[^"]*(^|[ (`])--[a-z][a-z0-9-]+' <<<"$code"; then
    where="${hit%%:*}:$(cut -d: -f2 <<<"$hit")"
    echo "$where: a layer below apps/ names a CLI flag; describe the setting and tag the error (fail_setting)"
    status=1
  fi
done < <(grep -rnE --include='*.h' --include='*.cpp' -e '--[a-z][a-z0-9-]+' runtime models loader |
         grep -vE '^[^:]+:[0-9]+:\s*(//|/?\*)' || true)
exit $status
