#!/usr/bin/env bash
# bench/gpu/window.sh (issue 41's GPU window) rehearsed without a GPU:
#   gpu_window_selftest.sh RATCHET_EXE
# 1. prepare into a bundle holding only bin/ratchet: the KJV shards and the
#    llm.c token files are made (valid header, 2M tokens).
# 2. run --selftest-cpu: every step has its summary line, in priority order;
#    the training checks, profile and determinism steps PASS on the CPU
#    backend; the GPU-only steps say NOT-RUN with their reason.
# 3. a budget too small for the later steps: they are NOT-RUN, never started.
# 4. bad usage exits 2.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
exe=${1:?usage: gpu_window_selftest.sh RATCHET_EXE}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
check() { if ! eval "$2"; then echo "FAIL: $1" >&2; fails=1; fi; }
w=$root/bench/gpu/window.sh
mkdir -p "$tmp/b/bin"; ln -s "$exe" "$tmp/b/bin/ratchet"

RATCHET=$exe "$w" prepare --bundle "$tmp/b" > "$tmp/prep" 2>&1
rc=$?
check "prepare exits 0 (got $rc: $(tail -2 "$tmp/prep"))" '[ $rc = 0 ]'
check "prepare made shards" 'compgen -G "$tmp/b/data/kjv/train_*.h5" > /dev/null'
check "prepare made llm.c token files" 'python3 - "$tmp/b/data/llmc/kjv_train.bin" <<PY
import struct, sys, os
h = struct.unpack("<3i", open(sys.argv[1], "rb").read(12))
assert h[0] == 20240520 and h[1] == 1 and h[2] == 2000000, h
assert os.path.getsize(sys.argv[1]) == 1024 + 2 * h[2]
PY'

"$w" run --bundle "$tmp/b" --out "$tmp/o" --selftest-cpu --budget 600 > "$tmp/run" 2>&1
rc=$?
cat "$tmp/o/summary.md"
check "the rehearsal exits 0 (got $rc)" '[ $rc = 0 ]'
order=$(grep -oE '^\| [a-z]+ \|' "$tmp/o/summary.md" | tr -d '| ' | tr '\n' ' ')
check "every step, in priority order (got: $order)" \
  '[ "$order" = "step machine tests train families compare llmc kernels window sliding profile determinism moe bench sanitizer curve " ]'
for s in machine train profile determinism moe; do
  check "$s PASS" 'grep -q "^| $s | PASS |" "$tmp/o/summary.md"'
done
for s in tests families llmc kernels window sliding bench sanitizer curve; do
  check "$s NOT-RUN for want of a GPU" 'grep -q "^| $s | NOT-RUN | .* | --selftest-cpu: needs a GPU |" "$tmp/o/summary.md"'
done
check "train's own report is kept" 'grep -q "| mpirun -np 1 --zero 3 | PASS |" "$tmp/o/train.md"'
check "determinism says both times" 'grep -q "deterministic on .* ms/step, off .* ms/step" "$tmp/o/summary.md"'

"$w" run --bundle "$tmp/b" --out "$tmp/o2" --selftest-cpu --budget 100 > "$tmp/run2" 2>&1
check "with 100 s the 150 s training step is not started" \
  'grep -q "^| train | NOT-RUN | 0 | needs 150s" "$tmp/o2/summary.md"'
check "nor anything after it that needs more than is left" \
  'grep -q "^| curve | NOT-RUN | 0 | needs 300s" "$tmp/o2/summary.md"'

"$w" run --bundle "$tmp/b" --out "$tmp/o4" --selftest-cpu --steps profile,zero --budget 100 > "$tmp/run4" 2>&1
order=$(grep -oE '^\| [a-z]+ \|' "$tmp/o4/summary.md" | tr -d '| ' | tr '\n' ' ')
check "--steps runs only the steps named, zero (a diagnosis) included (got: $order)" \
  '[ "$order" = "step profile zero " ] && grep -q "^| zero | NOT-RUN | .* | --selftest-cpu: needs a GPU |" "$tmp/o4/summary.md"'
"$w" run --bundle "$tmp/b" --out "$tmp/o5" --steps profile,bogus > "$tmp/u" 2>&1
rc=$?
check "an unknown step exits 2 naming it (got $rc)" '[ $rc = 2 ] && grep -q "unknown step .bogus." "$tmp/u"'

"$w" run --bundle "$tmp/b" --budget 10 > "$tmp/u" 2>&1
rc=$?
check "run without --out exits 2 (got $rc)" '[ $rc = 2 ] && grep -q "needs --out" "$tmp/u"'
"$w" run --bundle "$tmp/b" --out "$tmp/o3" --budget soon > "$tmp/u" 2>&1
rc=$?
check "a budget that is not a number exits 2 (got $rc)" '[ $rc = 2 ] && grep -q "not a number" "$tmp/u"'
"$w" sometime > "$tmp/u" 2>&1
rc=$?
check "an unknown mode exits 2 (got $rc)" '[ $rc = 2 ]'
[ $fails = 0 ] && echo "gpu window self-test: all checks passed"
exit $fails
