#!/usr/bin/env bash
# The fixed cost of a short `ratchet train` segment, as a sweep runs them
# (bench/sweep's tiny model L=4 H=4 C=64, B=8 T=64, one thread, KJV byte
# shards): a fresh segment of 27 steps, then a resumed one to step 54. For
# each binary given, runs the pair N times, interleaved with the other
# binaries (the machine may be shared: compare within one run), and prints the
# medians of: the ledger's device seconds, its step, save, load and data-wait
# seconds, the rest ("other": start-up inside the ledger's clock, the final
# evaluation), step 1 and the median later step in ms (from --log-jsonl),
# and the process's wall and CPU time (user + sys, start-up before the
# ledger's clock included).
#
#   bench/cpu/segment_overhead.sh WORK_DIR N RATCHET [RATCHET ...]
#
# OMP_NUM_THREADS=1 as the sweep's local executor sets it.
set -euo pipefail
if [[ $# -lt 3 ]]; then
  sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
work=$(mkdir -p "$1" && cd "$1" && pwd); n=$2; shift 2
bins=("$@")
export OMP_NUM_THREADS=1
. "$(dirname "$0")/../sweep/kjv_tiny.sh"
kjv_tiny_setup "$work" "${bins[0]}"
out="$work/runs.jsonl"
: >"$out"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for ((i = 0; i < n; i++)); do
  for b in "${!bins[@]}"; do
    run="$work/run_$b"
    rm -rf "$run"
    for steps in 27 54; do
      kind=$([ "$steps" = 27 ] && echo fresh || echo resumed)
      /usr/bin/time -o "$run.time" -f "%e %U %S" "${bins[$b]}" train --config "$work/base.ini" \
        --run-dir "$run" --steps $steps --schedule-steps 243 --quiet --threads 1 \
        --lr 1e-2 --log-jsonl "$run/log.jsonl" >"$run.log" 2>&1 || { cat "$run.log"; exit 1; }
      python3 - "$run" "$b" "$kind" "$steps" "$(tail -1 "$run.time")" >>"$out" <<'PY'
import json, sys
run, b, kind, steps, t = sys.argv[1:6]
wall, user, sys_ = map(float, t.split())
led = json.load(open(f"{run}/ledger.json"))
recs = [json.loads(l) for l in open(f"{run}/log.jsonl") if '"step_ms"' in l]
first = int(steps) - 27  # this segment's steps
seg = [r["step_ms"] for r in recs if r["step"] > first]
print(json.dumps({"bin": int(b), "kind": kind, "wall": wall, "cpu": user + sys_,
                  "led": led, "step1_ms": seg[0], "steady_ms": sorted(seg[1:])[len(seg[1:]) // 2]}))
PY
    done
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$out" "${bins[@]}" <<'PY'
import json, statistics, sys
out, bins = sys.argv[1], sys.argv[2:]
rows = [json.loads(l) for l in open(out)]
keys = ("device_seconds", "step_seconds", "ckpt_save_seconds", "ckpt_load_seconds", "data_wait_seconds")
print(f"{'binary':40} {'segment':8} {'device s':>8} {'step s':>7} {'save s':>7} {'load s':>7} "
      f"{'wait s':>7} {'other s':>7} {'step1 ms':>8} {'steady':>7} {'wall s':>7} {'cpu s':>6}")
for b, path in enumerate(bins):
    prev = {}
    for kind in ("fresh", "resumed"):
        rs = [r for r in rows if r["bin"] == b and r["kind"] == kind]
        # Per segment: the resumed run's ledger minus the fresh one's.
        def seg(r, k):
            return r["led"].get(k, 0) - (prev_of(r).get(k, 0) if kind == "resumed" else 0)
        def prev_of(r):
            i = rows.index(r)
            return next(x["led"] for x in reversed(rows[:i]) if x["bin"] == b and x["kind"] == "fresh")
        med = lambda f: statistics.median(f(r) for r in rs)
        v = {k: med(lambda r, k=k: seg(r, k)) for k in keys}
        other = med(lambda r: seg(r, "device_seconds") - seg(r, "step_seconds") -
                    seg(r, "ckpt_save_seconds") - seg(r, "ckpt_load_seconds"))
        print(f"{path[-40:]:40} {kind:8} {v['device_seconds']:8.3f} {v['step_seconds']:7.3f} "
              f"{v['ckpt_save_seconds']:7.3f} {v['ckpt_load_seconds']:7.3f} {v['data_wait_seconds']:7.4f} "
              f"{other:7.3f} {med(lambda r: r['step1_ms']):8.1f} {med(lambda r: r['steady_ms']):7.1f} "
              f"{med(lambda r: r['wall']):7.2f} {med(lambda r: r['cpu']):6.2f}")
PY
