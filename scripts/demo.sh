#!/usr/bin/env bash
# The demo: installs what is needed, builds the CPU trainer, turns the King
# James Bible (Debian's bible-kjv) into byte-level HDF5 shards and trains a
# small GPT on the CPU, printing progress, validation loss, a generated sample
# and the cost ledger (at a stated price per device-hour), and evaluates it on
# a shipped multiple-choice task (`ratchet eval`). Then it shows what
# makes ratchet different: a short run preempted with SIGUSR1 and rerun with
# the same command ends with weights bit-identical to an uninterrupted run
# (cmp), and `ratchet report` draws the main run's loss and throughput (PNG).
# About 3-4 minutes on 2 cores (most of it training).
#   scripts/demo.sh            (as root on a fresh Debian 12; or with sudo)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
run=${RATCHET_DEMO_DIR:-$root/demo-run}
price=2.50  # an illustrative price per device-hour (USD) for the ledger

if [ "$(id -u)" -eq 0 ]; then scripts/install-deps.sh demo; else sudo scripts/install-deps.sh demo; fi
# The demo needs only the single-process CPU trainer: skip the CUDA and MPI
# builds (an MPI runtime without its headers must not stop the demo either).
RATCHET_BUILD_DIR=build-demo RATCHET_BUILD_TARGETS=ratchet scripts/build.sh \
  -DRATCHET_CUDA=OFF -DRATCHET_MPI=OFF -DRATCHET_KERNELS=OFF -DRATCHET_TESTS=OFF -DRATCHET_BENCH=OFF
ratchet=$root/build-demo/ratchet

mkdir -p "$run"
echo "== corpus: the King James Bible (bible-kjv)"
bible -f "Gen1:1-Rev22:21" > "$run/kjv.txt"
echo "== shard: byte-level tokens, 2% held out for validation"
"$ratchet" shard --tokenizer byte --input "$run/kjv.txt" --output-dir "$run/data" \
  --val-fraction 0.02 --seed 1 --overwrite  # the demo's own directory: re-runs replace it
# The demo's run directories are its own: a re-run of the demo starts them anew
# (otherwise the trainer would resume them, which is its job).
rm -rf "$run/main" "$run/whole" "$run/preempted"

echo "== train: 4 layers x 256 channels on the CPU, ledger at \$$price per device-hour"
"$ratchet" train --model d4 --max-seq-len 128 \
  --train-data "$run/data/train_*.h5" --val-data "$run/data/val_*.h5" \
  --batch-size 16 --seq-len 128 --steps 400 \
  --lr 2e-3 --warmup-steps 20 --lr-schedule cosine --final-lr-fraction 0.1 \
  --weight-decay 0.1 --eval-every 100 --eval-batches 10 \
  --sample-tokens 300 --temperature 0.8 \
  --run-dir "$run/main" --price-per-device-hour "$price" --export "$run/model.bin"

# ---- evaluation: the trained model on a small multiple-choice task shipped
# with ratchet (complete a KJV verse: its true second half among 4) and on the
# held-out shards; the tokenizer (byte) comes from the checkpoint.
echo "== eval: $run/main/ckpt on data_tools/tasks/kjv_complete_verse.jsonl and the validation shards"
"$ratchet" eval --init-from "$run/main/ckpt" --task kjv=data_tools/tasks/kjv_complete_verse.jsonl \
  --data val="$run/data/val_*.h5"

# ---- preemption: the same short run, once straight through and once stopped
# by SIGUSR1 (what Slurm sends before a preemption or the time limit) and rerun.
short=(train --model d4 --max-seq-len 128
  --train-data "$run/data/train_*.h5" --val-data "$run/data/val_*.h5"
  --batch-size 8 --seq-len 64 --steps 60 --lr 2e-3 --warmup-steps 5
  --eval-every 0 --sample-tokens 0 --price-per-device-hour "$price")
echo "== preemption: a 60-step run straight through ($run/whole)"
"$ratchet" "${short[@]}" --run-dir "$run/whole" --export "$run/whole.bin" >"$run/whole.out"
echo "== preemption: the same run, SIGUSR1 after step 20 ($run/preempted)"
"$ratchet" "${short[@]}" --run-dir "$run/preempted" --export "$run/preempted.bin" \
  >"$run/preempted-1.out" &
pid=$!
# wait for step 20 in the run's JSONL log, then preempt
until grep -qs '"step": *2[0-9]' "$run/preempted/train.jsonl" || ! kill -0 "$pid" 2>/dev/null; do
  sleep 0.1
done
kill -USR1 "$pid" 2>/dev/null || true
rc=0
wait "$pid" || rc=$?
if [ "$rc" -ne 75 ]; then
  echo "demo: the preempted run exited $rc, not 75 (saved, requeue me); see $run/preempted-1.out" >&2
  exit 1
fi
grep -E "^(stopping at|checkpoint \(stop signal\)|exiting with code)" "$run/preempted-1.out" | sed 's/^/   /' || true
echo "   Rerunning the same command:"
"$ratchet" "${short[@]}" --run-dir "$run/preempted" --export "$run/preempted.bin" \
  >"$run/preempted-2.out"
grep -E "^resume: continuing" "$run/preempted-2.out" | sed 's/^/   /' || true
tail -n 1 "$run/preempted-2.out" | sed 's/^/   /'
if cmp "$run/whole.bin" "$run/preempted.bin"; then
  echo "== preemption: cmp $run/whole.bin $run/preempted.bin: bit-identical weights" \
       "($(stat -c %s "$run/whole.bin") bytes)"
else
  echo "demo: the resumed run's weights differ from the uninterrupted run's" >&2
  exit 1
fi

echo "== cost ledger and plots: ratchet report $run/main"
"$ratchet" report "$run/main"
echo "== done: run directory $run/main (log, ledger, checkpoints), llm.c checkpoint $run/model.bin"
echo "   plots: $run/main/report.png $run/main/report.svg"
