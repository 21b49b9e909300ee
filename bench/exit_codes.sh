#!/usr/bin/env bash
# Every benchmark given bad input exits 2 with a message naming it, never dies
# of an uncaught exception (134) or runs anyway (bench/bench_main.h):
#   bench/exit_codes.sh NAME=PATH...        (CTest bench_exit_codes passes the targets)
# A build that did not build the benchmarks (the sanitizer builds make only
# ratchet and the unit/integration tests) has none of them: exit 77, which
# CTest reports as Skipped; the ones that exist are all checked.
# The GPU benchmarks check their flags before they look for a device; with
# valid flags on a machine without a GPU they exit 69 (checked only when
# nvidia-smi lists no GPU).
set -uo pipefail
fails=0
present=0
no_gpu=1
nvidia-smi -L 2>/dev/null | grep -q '^GPU' && no_gpu=0
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

expect() {  # expect CODE PATTERN EXE ARGS...: exit CODE, stderr matching PATTERN (grep -E)
  local want=$1 pat=$2; shift 2
  timeout 120 "$@" > "$tmp/out" 2> "$tmp/err" < /dev/null
  local rc=$?
  if [ "$rc" -ne "$want" ]; then
    echo "FAIL: $(basename "$1") ${*:2}: exit $rc, expected $want; stderr:"; sed 's/^/    /' "$tmp/err" | head -5
    fails=$((fails + 1))
  elif ! grep -qE -- "$pat" "$tmp/err"; then
    echo "FAIL: $(basename "$1") ${*:2}: exit $rc but stderr does not match '$pat':"
    sed 's/^/    /' "$tmp/err" | head -5
    fails=$((fails + 1))
  else
    echo "ok:   $(basename "$1") ${*:2} -> $rc"
  fi
}

for arg in "$@"; do
  name=${arg%%=*}; exe=${arg#*=}
  [ -x "$exe" ] || { echo "not built: $name ($exe)"; continue; }
  present=$((present + 1))
  case "$name" in
    bench_gpu_train|bench_gpu_train_simt)
      expect 2 "unknown option '--no-such-flag'" "$exe" --no-such-flag
      expect 2 "--steps 'x' is not an integer" "$exe" --steps x
      expect 2 "--batch 0 is out of range" "$exe" --batch 0
      expect 2 "--seq needs a value" "$exe" --seq
      expect 2 "--seq 8192 is longer than --max-seq-len 1024" "$exe" --seq 8192 --max-seq-len 1024
      expect 2 "recompute" "$exe" --recompute nope
      expect 2 "attention" "$exe" --attention nope
      expect 2 "nope" "$exe" --models nope
      if [ "$name" = bench_gpu_train ] && [ $no_gpu = 1 ]; then
        expect 69 "no usable CUDA device" "$exe" --models d12 --seq 8192 --batch 2 --steps 1
      fi ;;
    bench_kernels|bench_kernels_simt)
      expect 2 "unknown option --no-such-flag" "$exe" --no-such-flag
      expect 2 "--B 'x' is not an integer" "$exe" --B x
      expect 2 "--dtype must be" "$exe" --dtype f16
      if [ "$name" = bench_kernels ] && [ $no_gpu = 1 ]; then
        expect 69 "no CUDA device" "$exe" --B 1 --T 64
      fi ;;
    bench_attention_gpu)
      expect 2 "bench_attention_gpu" "$exe" --no-such-flag
      [ $no_gpu = 1 ] && expect 69 "no GPU" "$exe" --T 64 ;;
    bench_train_step)
      expect 2 "unrecognised option|unrecognized option" "$exe" --no-such-flag
      expect 2 "nope" "$exe" --model nope
      expect 2 "seq-len" "$exe" --seq-len x ;;
    bench_allreduce)
      expect 2 "unrecognised option|unrecognized option" "$exe" --no-such-flag
      expect 2 "--op must be" "$exe" --op nope ;;
    bench_attention)
      expect 2 "usage: bench_attention" "$exe" --no-such-flag 1
      expect 2 "need positive" "$exe" -B x ;;
    bench_moe_layer)
      expect 2 "usage: bench_moe_layer" "$exe" --no-such-flag 1
      expect 2 "-N 'x' is not an integer" "$exe" -N x
      expect 2 "between 1 and num_experts" "$exe" -E 4 -k 5 ;;
    bench_loader)
      expect 2 "usage: bench_loader" "$exe"
      expect 2 "unknown option '--no-such-flag'" "$exe" 'none_*.h5' --no-such-flag
      expect 2 "--B 'x' is not an integer" "$exe" 'none_*.h5' --B x
      expect 2 "none_" "$exe" "$tmp/none_*.h5" --seconds 0.1 ;;
    bench_fma_peak)
      expect 2 "unknown option '--no-such-flag'" "$exe" --no-such-flag
      expect 2 "--seconds 'x' is not a positive number" "$exe" --seconds x ;;
    bench_sweep_orders)
      expect 2 "unrecognised option|unrecognized option" "$exe" --no-such-flag
      expect 2 "curves" "$exe" ;;
    *) echo "FAIL: $name: no bad-input cases for it in $0 (add them)"; fails=$((fails + 1)) ;;
  esac
done
if [ $present -eq 0 ]; then
  echo "bench exit codes: no benchmark is built here (cmake --build ... --target bench_gpu_train ...): skipped"
  exit 77
fi
[ $fails -eq 0 ] && echo "bench exit codes: all as expected ($present programs)" || echo "bench exit codes: $fails failure(s)"
[ $fails -eq 0 ]
