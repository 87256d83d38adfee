#!/usr/bin/env bash
# Runs every eaglevk command line that README.md and docs/*.md show (tests/tools/doc_commands.py
# lists them), as written, from the repository root. A command must finish with status 0, or
# still be running after LIMIT seconds (the measurements take minutes on lavapipe; by then the
# flags were accepted, the files found and the models loaded, which is where a command in the
# docs goes stale). Usage: check_doc_commands.sh ROOT EAGLEVK [LIMIT]
set -uo pipefail
root=$1 eaglevk=$2 limit=${3:-10}
cd "$root" || exit 1
failed=0 count=0
while IFS=$'\t' read -r doc command; do
  count=$((count + 1))
  line=$(printf '%s' "$command" | sed -E "s#^(\./build/)?eaglevk#$eaglevk#")
  err=$(mktemp)
  timeout "$limit" sh -c "$line" >/dev/null 2>"$err"
  status=$?
  if [ "$status" -eq 0 ]; then
    echo "ok      $doc: $command"
  elif [ "$status" -eq 124 ]; then
    echo "started $doc: $command (still running after ${limit} s)"
  else
    echo "FAILED  $doc: $command (status $status)"
    sed 's/^/    /' "$err" | tail -5
    failed=$((failed + 1))
  fi
  rm -f "$err"
done < <(python3 tests/tools/doc_commands.py "$root")
if [ "$count" -lt 8 ]; then
  echo "only $count commands found in the docs: the extraction is broken"
  exit 1
fi
echo "$count commands, $failed failed"
[ "$failed" -eq 0 ]
