#!/usr/bin/env bash
# The project is self-contained (issue 35): no tracked file names a path in
# the machine's shared work area or a sibling `shared` folder, i.e. outside
# the repository (system paths such as /usr are fine; tests/fuzz/corpus holds
# fuzzer inputs, not references). The patterns are spelled in two pieces so
# that this file does not match itself. Then the check is shown to fail on a
# scratch repository with such a path planted.
#   repo_self_contained.sh [ROOT]     exit 77 (skipped) outside a git checkout
set -uo pipefail
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
pattern='/wor''k/|\.\./sha''red'

# check DIR: prints the offending lines; exit 1 when there is any.
check() {
  local hits
  hits=$(git -C "$1" grep -n -E "$pattern" -- . ':!tests/fuzz/corpus') || true
  [ -z "$hits" ] && return 0
  echo "$hits"
  return 1
}

git -C "$root" rev-parse --git-dir >/dev/null 2>&1 || { echo "SKIP: $root is not a git checkout"; exit 77; }
if ! out=$(check "$root"); then
  echo "FAIL: tracked files name paths outside the repository (cite docs/ instead):"
  echo "$out"
  exit 1
fi
echo "ok: no tracked file names a path outside the repository"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git -C "$tmp" init -q
mkdir -p "$tmp/scripts" "$tmp/tests/fuzz/corpus"
printf '# recipe: %s\n' "/wor""k/shared/notes/platform.md" > "$tmp/scripts/a.sh"
printf 'corpus %s\n' "../sha""red/x" > "$tmp/tests/fuzz/corpus/seed"
git -C "$tmp" add -A
out=$(check "$tmp") && { echo "FAIL: a planted path outside the repository passed"; exit 1; }
grep -q '^scripts/a.sh:1:' <<<"$out" || { echo "FAIL: the planted path was not named: $out"; exit 1; }
grep -q 'corpus' <<<"$out" && { echo "FAIL: tests/fuzz/corpus was not left out: $out"; exit 1; }
echo "ok: a planted path is found, naming its file and line"
