#!/usr/bin/env bash
# The demo: installs what is needed, builds the CPU trainer, turns the King
# James Bible (Debian's bible-kjv) into byte-level HDF5 shards and trains a
# small GPT on the CPU, printing progress, validation loss and a generated
# sample. About 3-4 minutes on 2 cores (most of it training).
#   scripts/demo.sh            (as root on a fresh Debian 12; or with sudo)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
run=${RATCHET_DEMO_DIR:-$root/demo-run}

if [ "$(id -u)" -eq 0 ]; then scripts/install-deps.sh demo; else sudo scripts/install-deps.sh demo; fi
# The demo needs only the CPU trainer: skip the CUDA build to save minutes.
RATCHET_BUILD_DIR=build-demo RATCHET_BUILD_TARGETS=ratchet scripts/build.sh \
  -DRATCHET_CUDA=OFF -DRATCHET_KERNELS=OFF -DRATCHET_TESTS=OFF -DRATCHET_BENCH=OFF
ratchet=$root/build-demo/ratchet

mkdir -p "$run"
echo "== corpus: the King James Bible (bible-kjv)"
bible -f "Gen1:1-Rev22:21" > "$run/kjv.txt"
echo "== shard: byte-level tokens, 2% held out for validation"
"$ratchet" shard --tokenizer byte --input "$run/kjv.txt" --output-dir "$run/data" \
  --val-fraction 0.02 --seed 1 --overwrite  # the demo's own directory: re-runs replace it
echo "== train: 4 layers x 256 channels on the CPU"
"$ratchet" train --model d4 --max-seq-len 128 \
  --train-data "$run/data/train_*.h5" --val-data "$run/data/val_*.h5" \
  --batch-size 16 --seq-len 128 --steps 400 \
  --lr 2e-3 --warmup-steps 20 --lr-schedule cosine --final-lr-fraction 0.1 \
  --weight-decay 0.1 --eval-every 100 --eval-batches 10 \
  --sample-tokens 300 --temperature 0.8 \
  --log-jsonl "$run/train.jsonl" --export "$run/model.bin"
echo "== done: log in $run/train.jsonl, llm.c checkpoint in $run/model.bin"
