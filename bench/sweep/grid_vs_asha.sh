#!/usr/bin/env bash
# The sweep benchmark (issue 16): KJV byte shards, a small model of d4's
# depth (4 layers, 4 heads, 64 channels: d4's 256 would take an hour here) on
# the CPU, 27 configurations (3 learning rates x 3 warmup lengths x 3 weight
# decays) as a grid, run over the same 27 with --scheduler none (every trial
# to R) and --scheduler asha (eta 3, r = R/9). Prints the device-hours each
# spent and the best validation loss each found, from `ratchet sweep
# report`'s sweep.json. Target: ASHA's best within 1% of the grid's best for
# at most 35% of its device-hours.
#
#   bench/sweep/grid_vs_asha.sh [BUILD_DIR] [WORK_DIR] [R] [SEEDS]
#
# Why several seeds: a --grid sweep runs its trials in a seeded random order,
# and ASHA's early promotions are judged on the few results recorded so far,
# so what it spends depends on the order (the grid's cost does not). ASHA
# runs once per seed in SEEDS (default "1 2 3 4 5 6 7 8"), the grid once.
# Then every configuration is trained straight to R once more, evaluating at
# each rung boundary (not counted in either sweep), and bench_sweep_orders
# replays the real scheduler over those curves for 10000 random orders, and
# for the order of each ASHA sweep above to check the replay against it.
#
# R (default 81 steps) and the model below keep the whole run to minutes on
# 2 cores; two trials run at once, one thread each (--parallel 2). A trial's
# device-hours are its wall time (start-up, evaluations and saves included).
set -euo pipefail
build=$(realpath "${1:-build}")
work=${2:-$(mktemp -d)}
R=${3:-81}
seeds=${4:-1 2 3 4 5 6 7 8}
r=$((R / 9))
ratchet="$build/ratchet"
orders="$build/bench/sweep/bench_sweep_orders"
mkdir -p "$work"
work=$(realpath "$work")
. "$(dirname "$0")/kjv_tiny.sh"
kjv_tiny_setup "$work" "$ratchet"
echo "steps = $R" >>"$work/base.ini"
cat >"$work/space.ini" <<INI
lr = choice(1e-3, 3e-3, 1e-2)
warmup-steps = choice(0, 10, 30)
weight-decay = choice(0, 0.1, 0.3)
INI
sweep() {  # name scheduler seed
  local dir="$work/$1"
  [ -f "$dir/journal.jsonl" ] ||
    "$ratchet" sweep init "$dir" --space "$work/space.ini" --base "$work/base.ini" --grid \
      --seed "$3" --tag bench="$2" >/dev/null
  # CPU time of the controller and its trainers (the machine may be shared:
  # the ledgers' device-hours are wall time), and the load around the run.
  echo "$1: load before $(cut -d' ' -f1-3 /proc/loadavg)"
  /usr/bin/time -f "$1: wall %e s, CPU %U s user + %S s system (controller and trainers)" \
    "$ratchet" sweep run "$dir" --scheduler "$2" --eta 3 --min-steps $r --parallel 2 \
      --threads-per-trial 1 --quiet
  echo "$1: load after $(cut -d' ' -f1-3 /proc/loadavg)"
  "$ratchet" sweep report "$dir" >/dev/null
}
sweep none none 1
for s in $seeds; do sweep "asha-s$s" asha "$s"; done

# The curves for the replay: every configuration straight to R, evaluated at
# each rung (the rungs r*3^k are multiples of r), in the grid's own order.
python3 - "$work" <<'PY' >"$work/curves.args"
import json, sys
w = sys.argv[1]
for l in open(f"{w}/none/journal.jsonl"):
    j = json.loads(l)
    if j["event"] == "created":
        print(f"t{j['trial']:04d} " + " ".join(f"--{k} {v}" for k, v in j["config"].items()))
PY
mkdir -p "$work/curves"
curve() {  # tNNNN --option value ...
  local d="$work/curves/$1"
  shift
  [ -f "$d/done" ] && return
  rm -rf "$d"
  "$ratchet" train --config "$work/base.ini" --run-dir "$d" --eval-every $r --threads 1 --quiet \
    --log-jsonl "$d/log.jsonl" "$@" >/dev/null 2>"$d.err" && touch "$d/done"
}
while read -r -a args; do
  curve "${args[@]}" &
  while [ "$(jobs -rp | wc -l)" -ge 2 ]; do wait -n || true; done
done <"$work/curves.args"
wait || true
for d in "$work"/curves/t*/; do [ -f "$d/done" ] || { echo "curve run $d failed: see ${d%/}.err" >&2; exit 1; }; done
python3 - "$work" "$r" "$R" <<'PY' >"$work/curves.json"
import json, sys
w, r, R = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rungs = [r]
while rungs[-1] * 3 <= R: rungs.append(rungs[-1] * 3)
if rungs[-1] < R: rungs.append(R)
out = {"rungs": rungs, "curves": []}
for l in open(f"{w}/none/journal.jsonl"):
    j = json.loads(l)
    if j["event"] != "created": continue
    v = {}
    for m in open(f"{w}/curves/t{j['trial']:04d}/log.jsonl"):
        m = json.loads(m)
        if "val_loss" in m: v[m["step"]] = m["val_loss"]
    out["curves"].append({"config": j["config"], "loss": [v[k] for k in rungs]})
json.dump(out, sys.stdout, indent=1)
PY

python3 - "$work" $seeds <<'PY'
import glob, json, statistics, sys
w, seeds = sys.argv[1], sys.argv[2:]
def summary(name):
    j = json.load(open(f"{w}/{name}/sweep.json"))
    segs = sum(1 for l in open(f"{w}/{name}/journal.jsonl") if '"event":"launched"' in l)
    tot = {k: 0.0 for k in ("device_seconds", "step_seconds", "ckpt_save_seconds", "ckpt_load_seconds", "data_wait_seconds", "max_step")}
    for t in glob.glob(f"{w}/{name}/trials/*/ledger.json"):
        led = json.load(open(t))
        for k in tot: tot[k] += led.get(k, 0)
    return j, segs, tot
n, nsegs, ntot = summary("none")
grid_steps = ntot["max_step"]
print(f"grid (none): {n['device_hours']:.5f} device-h, {nsegs} segments, {grid_steps:.0f} steps, best {n['best_val_loss']:.4f} {n['best_trial']['config']}")
# Where the device-seconds went, from the trials' ledgers: training steps,
# checkpoint saves and loads, data waits, and the rest (start-up inside the
# ledger's clock, shard checks, evaluations).
print(f"{'sweep':8} {'device-h':>9} {'of grid':>7} {'steps':>6} {'of grid':>7} {'best gap':>8} {'segs':>4} "
      f"{'step s':>7} {'save+load s':>11} {'wait s':>6} {'other/seg s':>11}")
def row(name, j, segs, tot, frac=None):
    other = tot["device_seconds"] - tot["step_seconds"] - tot["ckpt_save_seconds"] - tot["ckpt_load_seconds"] - tot["data_wait_seconds"]
    gap = j["best_val_loss"] / n["best_val_loss"] - 1
    print(f"{name:8} {j['device_hours']:9.5f} {100*j['device_hours']/n['device_hours']:6.1f}% {tot['max_step']:6.0f} "
          f"{100*tot['max_step']/grid_steps:6.1f}% {100*gap:+7.2f}% {segs:4d} {tot['step_seconds']:7.1f} "
          f"{tot['ckpt_save_seconds']+tot['ckpt_load_seconds']:11.1f} {tot['data_wait_seconds']:6.1f} {other/segs:11.3f}")
    return j["device_hours"] / n["device_hours"], gap
row("none", n, nsegs, ntot)
fr, met = [], 0
for s in seeds:
    f, gap = row(f"asha-s{s}", *summary(f"asha-s{s}"))
    fr.append(f)
    met += f <= 0.35 and gap <= 0.01
print(f"asha/none device-hours over {len(fr)} orders: mean {100*statistics.mean(fr):.1f}%, "
      f"median {100*statistics.median(fr):.1f}%, min {100*min(fr):.1f}%, max {100*max(fr):.1f}%; "
      f"target (gap <= 1% at <= 35%) met by {met} of {len(fr)}, "
      f"{'and' if statistics.mean(fr) <= 0.35 else 'but not'} on average")
PY
echo "replay of the scheduler over the measured curves (steps only: no start-up, evaluation or save):"
"$orders" "$work/curves.json" --parallel 2 --journal $(for s in $seeds; do echo "$work/asha-s$s/journal.jsonl"; done)
