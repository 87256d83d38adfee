#!/usr/bin/env bash
# `eaglevk --help` and every subcommand's --help (the subcommands as the top page lists them)
# fit a terminal page, at most 50 lines of at most 100 columns, and end with one example that
# calls eaglevk (with the subcommand, for a subcommand's page). Usage: check_help.sh EAGLEVK
set -uo pipefail
eaglevk=$1
failed=0
check() {  # NAME ARGS...
  local name=$1 out lines widest last
  shift
  if ! out=$("$eaglevk" "$@" --help 2>&1); then
    echo "FAILED  $name: --help exited with an error"; failed=1; return
  fi
  lines=$(printf '%s\n' "$out" | wc -l)
  widest=$(printf '%s\n' "$out" | awk '{ if (length > w) w = length } END { print w + 0 }')
  last=$(printf '%s\n' "$out" | awk 'NF { line = $0 } END { print line }')
  local problems=()
  [ "$lines" -le 50 ] || problems+=("$lines lines")
  [ "$widest" -le 100 ] || problems+=("a line of $widest columns")
  [ "$(printf '%s\n' "$out" | grep -c '^Example: ')" -eq 1 ] || problems+=("not one Example line")
  case "$last" in
    "Example: eaglevk ${1:-}"*) ;;
    *) problems+=("last line is not an example of eaglevk ${1:-}: '$last'") ;;
  esac
  if [ ${#problems[@]} -eq 0 ]; then
    echo "ok      $name ($lines lines, $widest columns)"
  else
    echo "FAILED  $name: ${problems[*]}"
    failed=1
  fi
}
check "eaglevk --help"
subcommands=$("$eaglevk" --help | awk '/^Subcommands:/ { on = 1; next } on && !NF { exit } on { print $1 }')
if ! grep -qx run <<<"$subcommands"; then
  echo "FAILED  the top page lists no 'run' subcommand: the listing was not read ($subcommands)"
  exit 1
fi
for sub in $subcommands; do
  check "eaglevk $sub --help" "$sub"
done
exit $failed
