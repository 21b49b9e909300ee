#!/usr/bin/env bash
# The sweep benchmark (issue 16): KJV byte shards, a small model of d4's
# depth (4 layers, 4 heads, 64 channels: d4's 256 would take an hour here) on
# the CPU, 27 configurations (3 learning rates x 3 warmup lengths x 3 weight
# decays) as a grid, run twice over the same 27: --scheduler none (every
# trial to R) and --scheduler asha (eta 3, r = R/9). Prints the device-hours
# each spent and the best validation loss each found, from `ratchet sweep
# report`'s sweep.json. Target: ASHA's best within 1% of the grid's best for
# at most 35% of its device-hours.
#
#   bench/sweep/grid_vs_asha.sh [BUILD_DIR] [WORK_DIR] [R]
#
# R (default 81 steps) and the model below keep the whole run to minutes on
# 2 cores; two trials run at once, one thread each (--parallel 2). A trial's
# device-hours are its wall time (start-up, evaluations and saves included).
set -euo pipefail
build=$(realpath "${1:-build}")
work=${2:-$(mktemp -d)}
R=${3:-81}
ratchet="$build/ratchet"
mkdir -p "$work"
work=$(realpath "$work")
if [ ! -f "$work/data/val_000000.h5" ]; then
  bible -f "Gen1:1-Rev22:21" >"$work/kjv.txt"
  "$ratchet" shard --tokenizer byte --input "$work/kjv.txt" --output-dir "$work/data" \
    --val-fraction 0.02 --no-progress >/dev/null
fi
cat >"$work/base.ini" <<INI
# d4's depth (4 layers, 4 heads) at 64 channels and a short context
model = custom
layers = 4
heads = 4
channels = 64
max-seq-len = 64
seq-len = 64
batch-size = 8
steps = $R
eval-batches = 8
price-per-device-hour = 1
train-data = $work/data/train_*.h5
val-data = $work/data/val_*.h5
INI
cat >"$work/space.ini" <<INI
lr = choice(1e-3, 3e-3, 1e-2)
warmup-steps = choice(0, 10, 30)
weight-decay = choice(0, 0.1, 0.3)
INI
for sched in none asha; do
  dir="$work/$sched"
  [ -f "$dir/journal.jsonl" ] ||
    "$ratchet" sweep init "$dir" --space "$work/space.ini" --base "$work/base.ini" --grid --tag bench=$sched
  # CPU time of the controller and its trainers (the machine may be shared:
  # the ledgers' device-hours are wall time), and the load around the run.
  echo "$sched: load before $(cut -d' ' -f1-3 /proc/loadavg)"
  /usr/bin/time -f "$sched: wall %e s, CPU %U s user + %S s system (controller and trainers)" \
    "$ratchet" sweep run "$dir" --scheduler "$sched" --eta 3 --min-steps $((R / 9)) --parallel 2 --threads-per-trial 1 --quiet
  echo "$sched: load after $(cut -d' ' -f1-3 /proc/loadavg)"
  "$ratchet" sweep report "$dir" >/dev/null
done
python3 - "$work" <<'PY'
import glob, json, sys
w = sys.argv[1]
n = json.load(open(f"{w}/none/sweep.json")); a = json.load(open(f"{w}/asha/sweep.json"))
print(f"{'scheduler':10} {'device-hours':>13} {'best val loss':>14}  best config")
for name, j in (("none", n), ("asha", a)):
    print(f"{name:10} {j['device_hours']:13.5f} {j['best_val_loss']:14.4f}  {j['best_trial']['config']}")
# Where the device-seconds went, from the trials' ledgers: training steps,
# checkpoint saves and loads, data waits, and the rest (start-up inside the
# ledger's clock, shard checks, evaluations).
print(f"{'scheduler':10} {'segments':>8} {'steps':>6} {'total s':>8} {'step s':>7} {'save s':>7} {'load s':>7} {'other s':>8} {'other/seg':>9}")
for name in ("none", "asha"):
    segs = sum(1 for l in open(f"{w}/{name}/journal.jsonl") if '"event":"launched"' in l)
    tot = {k: 0.0 for k in ("device_seconds", "step_seconds", "ckpt_save_seconds", "ckpt_load_seconds", "data_wait_seconds", "max_step")}
    for t in glob.glob(f"{w}/{name}/trials/*/ledger.json"):
        led = json.load(open(t))
        for k in tot: tot[k] += led.get(k, 0)
    other = tot["device_seconds"] - tot["step_seconds"] - tot["ckpt_save_seconds"] - tot["ckpt_load_seconds"] - tot["data_wait_seconds"]
    print(f"{name:10} {segs:8d} {tot['max_step']:6.0f} {tot['device_seconds']:8.1f} {tot['step_seconds']:7.1f} {tot['ckpt_save_seconds']:7.1f} {tot['ckpt_load_seconds']:7.1f} {other:8.1f} {other/segs:9.3f}")
frac = a["device_hours"] / n["device_hours"]
gap = a["best_val_loss"] / n["best_val_loss"] - 1
print(f"asha/none device-hours: {100*frac:.1f}%  best-loss gap: {100*gap:+.2f}%  "
      f"target (gap <= 1% at <= 35%): {'met' if frac <= 0.35 and gap <= 0.01 else 'NOT met'}")
PY
