#!/usr/bin/env bash
# How long a checkpoint save stops the step loop, on the cpu backend for d12
# (GPT-2 124M: 124,475,904 parameters; a checkpoint is the FP32 parameters
# and both AdamW moments, 1.49 GB), written synchronously against
# --ckpt-async (issue 30 item 5: the async stall should be <= 10% of the
# sync one).
#
#   bench/ckpt/save_stall.sh [BUILD_DIR] [SAVES] [THREADS]
#
# Trains d12 for SAVES + 1 steps (default 3 + 1) of one 64-token row, saving
# after every step (--ckpt-every-steps 1, --keep-last 2), once without and
# once with --ckpt-async, into a fresh directory under $TMPDIR (default
# /tmp: the disk the numbers are for). The stall per save is taken from the
# trainer's own lines: sync "checkpoint (periodic): step N, X MB in S s"
# (the whole save: the copy, the shard write with fsync, state.h5, the
# manifest and the commit), async "... the step loop stopped S s" (the copy
# of the shard into host memory, and the staging directory). The final save
# (after the last step; it always waits) is left out. Prints each periodic
# save's stall, the mean of each mode, the ratio, and the wall time of
# each whole run.
set -euo pipefail
build=${1:-build}
saves=${2:-3}
threads=${3:-2}
ratchet=$(realpath "$build/ratchet")
work=$(mktemp -d "${TMPDIR:-/tmp}/ratchet-save-stall.XXXXXX")
trap 'rm -rf "$work"' EXIT
command -v bible >/dev/null || { echo "save_stall.sh: needs bible-kjv (scripts/install-deps.sh)" >&2; exit 2; }
bible -f "Gen1:1-Gen20:18" > "$work/text.txt"
"$ratchet" shard --tokenizer gpt2 --input "$work/text.txt" --output-dir "$work/data" \
  --val-fraction 0.05 > "$work/shard.log"
steps=$((saves + 1))
declare -A mean later wall
for mode in sync async; do
  flags=""
  [ "$mode" = async ] && flags="--ckpt-async"
  t0=$(date +%s.%N)
  "$ratchet" train --model d12 --seq-len 64 --batch-size 1 --total-batch-tokens 64 \
    --threads "$threads" --train-data "$work/data/train_*.h5" --steps "$steps" \
    --ckpt-dir "$work/ck-$mode" --ckpt-every-steps 1 --keep-last 2 $flags \
    > "$work/$mode.log" 2>&1 || { cat "$work/$mode.log"; exit 1; }
  t1=$(date +%s.%N)
  wall[$mode]=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  rm -rf "$work/ck-$mode"
  if [ "$mode" = sync ]; then
    stalls=$(sed -n 's/^checkpoint (periodic): step [0-9]*, [0-9.]* MB in \([0-9.]*\) s.*/\1/p' "$work/$mode.log")
  else
    stalls=$(sed -n 's/^checkpoint (periodic):.*the step loop stopped \([0-9.]*\) s.*/\1/p' "$work/$mode.log")
  fi
  [ -n "$stalls" ] || { echo "save_stall.sh: no periodic save found in the $mode run's log:"; cat "$work/$mode.log"; exit 1; }
  echo "$mode: stall per save (s): $(echo $stalls)"
  mean[$mode]=$(echo "$stalls" | awk '{ s += $1; n++ } END { printf "%.4f", s / n }')
  # After the first save (whose host buffers are allocated then, and kept).
  later[$mode]=$(echo "$stalls" | awk 'NR > 1 { s += $1; n++ } END { printf "%.4f", n ? s / n : 0 }')
done
echo "d12 (124M parameters, 1.49 GB per checkpoint), cpu backend, $threads thread(s), $saves periodic saves each"
printf "sync  save: mean stall %8.4f s per save, %8.4f after the first (run %s s)\n" \
  "${mean[sync]}" "${later[sync]}" "${wall[sync]}"
printf "async save: mean stall %8.4f s per save, %8.4f after the first (run %s s)\n" \
  "${mean[async]}" "${later[async]}" "${wall[async]}"
awk -v a="${mean[async]}" -v s="${mean[sync]}" 'BEGIN { printf "async / sync stall: %.3f (target <= 0.10)\n", a / s }'
