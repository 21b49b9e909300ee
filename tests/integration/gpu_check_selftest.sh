#!/usr/bin/env bash
# scripts/gpu-check.sh's new parts without a GPU:
#   gpu_check_selftest.sh RATCHET_EXE
# 1. --prebuilt DIR (programs built elsewhere, bundle.sh's layout: DIR/bin)
#    on a node without a GPU: exit 69, nothing run; a DIR that is not a
#    bundle is bad usage (2).
# 2. --selftest-cpu: the training checks (same run twice, SIGUSR1 + resume,
#    mpirun -np 1 --zero 1, 2 and 3 == --zero 0, a 2-rank ZeRO-1 checkpoint resumed on
#    1 rank, a Llama trains) for real on the CPU
#    backend with tiny models, through the --prebuilt program lookup: all PASS.
# 3. The same with GPU_CHECK_PERTURB (another seed in each check's second
#    run): each comparison FAILs and the exit code is 1, so a PASS means the
#    files were compared.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
exe=${1:?usage: gpu_check_selftest.sh RATCHET_EXE}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
check() { if ! eval "$2"; then echo "FAIL: $1" >&2; fails=1; fi; }
mkdir -p "$tmp/pre/bin"
ln -s "$exe" "$tmp/pre/bin/ratchet"

CUDA_VISIBLE_DEVICES= GPU_CHECK_WORK=$tmp/w0 "$root/scripts/gpu-check.sh" --prebuilt "$tmp/pre" \
  --report "$tmp/r0.md" > "$tmp/out0" 2>&1
rc=$?
check "--prebuilt exits 69 without a GPU (got $rc)" '[ $rc = 69 ]'
check "it says there is no GPU" 'grep -q "no GPU on this node" "$tmp/out0"'
check "nothing was run" '[ -z "$(ls "$tmp/w0" 2>/dev/null)" ]'
"$root/scripts/gpu-check.sh" --prebuilt "$tmp/nowhere" > "$tmp/u" 2>&1
rc=$?
check "--prebuilt of a missing directory exits 2 (got $rc)" '[ $rc = 2 ] && grep -q "is not a directory" "$tmp/u"'
mkdir -p "$tmp/empty"
"$root/scripts/gpu-check.sh" --prebuilt "$tmp/empty" > "$tmp/u" 2>&1
rc=$?
check "--prebuilt of a directory without bin/ exits 2 (got $rc)" '[ $rc = 2 ] && grep -q "bundle.sh" "$tmp/u"'

GPU_CHECK_WORK=$tmp/w1 "$root/scripts/gpu-check.sh" --prebuilt "$tmp/pre" --selftest-cpu \
  --report "$tmp/r1.md" > "$tmp/out1" 2>&1
rc=$?
cat "$tmp/r1.md"
check "the CPU self-test passes (got $rc; $tmp/out1)" '[ $rc = 0 ]'
for c in "same run twice" "SIGUSR1 + resume" "llama trains"; do
  check "'$c' PASS" 'grep -q "| $c | PASS |" "$tmp/r1.md"'
done
if command -v mpirun >/dev/null; then
  for z in 1 2 3; do
    check "'mpirun -np 1 --zero $z' PASS" 'grep -q "| mpirun -np 1 --zero $z | PASS |" "$tmp/r1.md"'
  done
  if "$exe" --version | grep -q "MPI yes"; then
    check "'ZeRO-1 resume 2 -> 1 rank' PASS" 'grep -q "| ZeRO-1 resume 2 -> 1 rank | PASS |" "$tmp/r1.md"'
  else  # a build without MPI (the sanitizer builds) cannot start 2 ranks: said, not failed
    check "'ZeRO-1 resume 2 -> 1 rank' NOT-RUN without MPI" \
      'grep -q "| ZeRO-1 resume 2 -> 1 rank | NOT-RUN | .*built without MPI" "$tmp/r1.md"'
  fi
fi
check "transformers: PASS or NOT-RUN, never silent" 'grep -qE "\| export-hf in transformers \| (PASS|NOT-RUN) \|" "$tmp/r1.md"'

GPU_CHECK_PERTURB=twice,resume,zero GPU_CHECK_WORK=$tmp/w2 "$root/scripts/gpu-check.sh" \
  --prebuilt "$tmp/pre" --selftest-cpu --report "$tmp/r2.md" > "$tmp/out2" 2>&1
rc=$?
check "a perturbed self-test exits 1 (got $rc)" '[ $rc = 1 ]'
check "same run twice FAILs when the runs differ" 'grep -q "| same run twice | FAIL | weights differ" "$tmp/r2.md"'
check "resume FAILs when it differs" 'grep -q "| SIGUSR1 + resume | FAIL |" "$tmp/r2.md"'
if command -v mpirun >/dev/null; then
  for z in 1 2 3; do
    check "zero $z FAILs when it differs" 'grep -q "| mpirun -np 1 --zero $z | FAIL | --zero $z weights differ" "$tmp/r2.md"'
  done
fi
# --deadline in the past: every training check is NOT-RUN "window closed", exit 0;
# --only with an unknown section is bad usage.
GPU_CHECK_WORK=$tmp/w3 "$root/scripts/gpu-check.sh" --prebuilt "$tmp/pre" --selftest-cpu \
  --deadline 1 --report "$tmp/r3.md" > "$tmp/out3" 2>&1
rc=$?
check "a passed --deadline exits 0 (got $rc)" '[ $rc = 0 ]'
check "a passed --deadline runs nothing" 'grep -q "| same run twice | NOT-RUN | window closed" "$tmp/r3.md" && ! grep -q "| PASS |" "$tmp/r3.md"'
"$root/scripts/gpu-check.sh" --prebuilt "$tmp/pre" --only tests,speed > "$tmp/u" 2>&1
rc=$?
check "--only with an unknown section exits 2 (got $rc)" '[ $rc = 2 ] && grep -q "unknown section .speed." "$tmp/u"'
[ $fails = 0 ] && echo "gpu-check self-test: all checks passed"
exit $fails
