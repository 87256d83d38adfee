#!/usr/bin/env bash
# check_layers.sh must catch each kind of violation: a tree of small files, each breaking one
# rule, must be reported line by line, and the same tree without them must pass. (The `layers`
# test runs the check on the repository itself, where it must pass: without this test a check
# that caught nothing would pass there too.)
set -euo pipefail
check="$(cd "$(dirname "$0")" && pwd)/check_layers.sh"
tree="$(mktemp -d)"
trap 'rm -rf "$tree"' EXIT
cd "$tree"
mkdir -p runtime/vk runtime/ops runtime/engine runtime/api runtime/include/eaglevk models loader apps/cli shaders tests

# What is allowed: each layer including itself and below, the error type everywhere, the facade
# in apps, system and library headers anywhere, and tests including anything.
printf '#include "runtime/vk/context.h"\n#include <eaglevk/error.h>\n#include <vector>\n' >runtime/vk/context.cpp
printf '#include "runtime/vk/context.h"\n#include <fmt/core.h>\n' >runtime/ops/gpu.cpp
printf '#include "runtime/ops/gpu.h"\n#include "loader/gguf.h"\n' >models/llama3.cpp
printf '#include "models/llama3.h"\n#include <runtime/ops/gpu.h>\n' >runtime/engine/decoder.cpp
printf '#include "runtime/engine/decoder.h"\n#include <eaglevk/eaglevk.hpp>\n' >runtime/api/session.cpp
printf '#include "runtime/engine/spec_stats.h"\n#include "loader/tokenizer.h"\n' >runtime/include/eaglevk/eaglevk.hpp
printf '#include <eaglevk/eaglevk.hpp>\n#include "loader/dataset.h"\n#include "apps/cli/usage.h"\n#include "local.h"\n' >apps/cli/run.cpp
printf '#include "runtime/engine/decoder.h"\n#include "models/llama3.h"\n' >tests/decoder_test.cpp
printf '#include "shaders/common.h"\n' >shaders/ops.h
if ! out="$(bash "$check" "$tree")"; then
  echo "FAILED: a clean tree was refused:"
  echo "$out"
  exit 1
fi

# Each violation, and the words its report must hold.
violations=(
  'apps/cli/bench.cpp|#include "runtime/engine/decoder.h"|layer apps may not include "runtime/engine/decoder.h"'
  'apps/cli/devices.cpp|#include <runtime/vk/context.h>|layer apps may not include "runtime/vk/context.h"'
  'apps/cli/inspect.cpp|#  include "models/llama4.h"|layer apps may not include "models/llama4.h"'
  'apps/cli/eval.cpp|#include "runtime/ops/gpu.h"|layer apps may not include "runtime/ops/gpu.h"'
  'apps/cli/eval.h|#include "runtime/api/errors.h"|layer apps may not include "runtime/api/errors.h"'
  'runtime/vk/buffer.cpp|#include "runtime/ops/gpu.h"|layer runtime/vk may not include "runtime/ops/gpu.h"'
  'loader/gguf.cpp|#include <models/llama3.h>|layer loader may not include "models/llama3.h"'
  'models/eagle3.cpp|#include "runtime/engine/decoder.h"|layer models may not include "runtime/engine/decoder.h"'
  'runtime/engine/bad.cpp|#include "runtime/api/errors.h"|layer runtime/engine may not include "runtime/api/errors.h"'
  'runtime/engine/facade.cpp|#include <eaglevk/eaglevk.hpp>|may not include the public facade'
  'shaders/bad.h|#include "runtime/vk/context.h"|layer shaders may not include'
  'tools/extra/helper.cpp|int x;|C++ outside every layer folder'
  'apps/cli/decode.cpp|auto d = engine::make_decoder(gpu, target);|not engine::make_decoder'
  'apps/cli/load.cpp|auto t = models::load_target(dir);|not models::load_*'
  'runtime/engine/message.cpp|fail("use --spec-topk");|names a CLI flag'
)
for v in "${violations[@]}"; do
  IFS='|' read -r file line words <<<"$v"
  mkdir -p "$(dirname "$file")"
  printf '%s\n' "$line" >"$file"
done
status=0
out="$(bash "$check" "$tree")" || status=$?
failed=0
if [[ $status != 1 ]]; then
  echo "FAILED: the check exited $status on a tree with violations"
  failed=1
fi
for v in "${violations[@]}"; do
  IFS='|' read -r file line words <<<"$v"
  if ! grep -F "$file" <<<"$out" | grep -qF "$words"; then
    echo "FAILED: $file ($line) was not reported with '$words'"
    failed=1
  fi
done
count="$(grep -c . <<<"$out")"
if [[ $count != "${#violations[@]}" ]]; then
  echo "FAILED: ${#violations[@]} violations, $count reports:"
  echo "$out"
  failed=1
fi
[[ $failed == 0 ]] && echo "check_layers_test: every violation reported, the clean tree passed"
exit $failed
