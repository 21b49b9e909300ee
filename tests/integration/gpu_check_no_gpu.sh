#!/usr/bin/env bash
# scripts/gpu-check.sh and slurm/gpu-check.sbatch on a node without a GPU (or
# with every GPU hidden by CUDA_VISIBLE_DEVICES): they say so, write a report
# that says nothing was checked, and exit 69, the code documented for it,
# without building anything. Bad usage exits 2.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
check() { if ! eval "$2"; then echo "FAIL: $1" >&2; fails=1; fi; }

CUDA_VISIBLE_DEVICES= "$root/scripts/gpu-check.sh" --build-dir "$tmp/b" \
  --report "$tmp/r.md" > "$tmp/out" 2>&1
rc=$?
check "gpu-check exits 69 without a GPU (got $rc)" '[ $rc = 69 ]'
check "it says there is no GPU" 'grep -q "no GPU on this node" "$tmp/out"'
check "the report says nothing was checked" 'grep -q "^NO GPU: .*Nothing was checked (exit 69)" "$tmp/r.md"'
check "nothing was built" '[ ! -e "$tmp/b/CMakeCache.txt" ]'

# The Slurm template, run as its own batch shell would run it.
CUDA_VISIBLE_DEVICES=-1 RATCHET_SRC="$root" RATCHET_GPU_REPORT="$tmp/s.md" \
  bash "$root/slurm/gpu-check.sbatch" --build-dir "$tmp/b2" > "$tmp/sout" 2>&1
rc=$?
check "gpu-check.sbatch exits 69 without a GPU (got $rc)" '[ $rc = 69 ]'
check "the sbatch report says so" 'grep -q "^NO GPU" "$tmp/s.md"'

"$root/scripts/gpu-check.sh" --steps x > "$tmp/u" 2>&1
rc=$?
check "bad --steps exits 2 (got $rc)" '[ $rc = 2 ]'
check "and names the flag" 'grep -q -- "--steps .x. is not a count" "$tmp/u"'
"$root/scripts/gpu-check.sh" --frobnicate > "$tmp/u" 2>&1
rc=$?
check "an unknown option exits 2 (got $rc)" '[ $rc = 2 ]'

[ $fails = 0 ] && echo "gpu-check without a GPU: all checks passed"
exit $fails
