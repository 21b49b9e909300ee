#!/usr/bin/env bash
# Training-step scaling on this machine: 1 rank vs 2 ranks (mpirun), the same
# global batch, so the 2-rank run does half the work per rank and adds one
# all-reduce (or reduce-scatter + all-gather with ZeRO-1 and 2; ZeRO-3 gathers
# each block's parameters in forward and backward instead) of every gradient.
#
#   bench/allreduce/scaling.sh BUILD_DIR [MODEL] [STEPS]     (default d4, 20 steps)
#
# Prints one markdown row per configuration: ms/step and tokens/s as printed
# by `ratchet train` ("trained N steps ..."), the mean over all steps.
set -euo pipefail
build=${1:?usage: scaling.sh BUILD_DIR [MODEL] [STEPS]}
model=${2:-d4}
steps=${3:-20}
exe=$build/ratchet
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bible -f "Gen1:1-Rev22:21" >"$work/bible.txt"
"$exe" shard --tokenizer byte --input "$work/bible.txt" --output-dir "$work/data" --seed 1 >/dev/null
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  OMPI_MCA_btl_vader_single_copy_mechanism=none
common="train --model $model --seq-len 64 --total-batch-tokens 512 --steps $steps --lr 1e-3
  --train-data $work/data/train_*.h5 --quiet --max-seq-len 64"
row() {  # row LABEL RANKS THREADS B [more flags]
  local label=$1 ranks=$2 threads=$3 B=$4
  shift 4
  local -; set -f  # $common's glob reaches ratchet unexpanded
  local out
  if [ "$ranks" = 1 ]; then
    out=$("$exe" $common --threads "$threads" --batch-size "$B" "$@" 2>&1)
  else
    out=$(mpirun -np "$ranks" --bind-to core "$exe" $common --threads "$threads" --batch-size "$B" "$@" 2>&1)
  fi
  local params line
  params=$(sed -n 's/.*, \([0-9.]*M\) parameters.*/\1/p' <<<"$out" | head -n1)
  line=$(grep -m1 "^trained" <<<"$out") || { echo "$out" >&2; exit 1; }
  # trained 20 steps in 3s (152.3 ms/step, 3361 tok/s, 40.2 GFLOP/s)
  echo "| $label | $ranks | $threads | $B | $params | $(sed -E 's/.*\(([0-9.]+) ms\/step, ([0-9]+) tok\/s, ([0-9.]+) GFLOP\/s\).*/\1 | \2 | \3/' <<<"$line") |"
}
echo "| configuration | ranks | threads/rank | B/rank | params | ms/step | tok/s | GFLOP/s |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
row "1 rank, 1 thread" 1 1 8
row "1 rank, 2 threads" 1 2 8
row "2 ranks (all-reduce)" 2 1 4
row "2 ranks, ZeRO-1" 2 1 4 --zero 1
row "2 ranks, ZeRO-2" 2 1 4 --zero 2
row "2 ranks, ZeRO-3" 2 1 4 --zero 3
row "2 ranks, ZeRO-3, --reshard-after-forward off" 2 1 4 --zero 3 --reshard-after-forward off
