#!/usr/bin/env bash
# Issue 40's measurements of the hang watchdog, on bench/sweep's tiny model
# (L=4 H=4 C=64, B=8 T=64, KJV byte shards, one thread a rank):
#  1. Detection latency: N runs under `mpirun -np 2` in which rank 1 freezes
#     itself (SIGSTOP, RATCHET_FAULT=rank1/STOP@step-K, K varied) with
#     --hang-timeout T. For each, the detecting rank's flight record gives the
#     hang's age at detection; the latency past the timeout is age - allowance
#     (the monitor polls every T/10). Prints the median and max of the age and
#     of that excess, and the exit code of every run (75 expected).
#  2. Overhead on the step: the same single-rank run with the watchdog off
#     (--hang-timeout 0) and on (default 120 s; the monitor polls every 1 s and
#     rewrites the record every 10 s: effectively free) and at T=1 (10 polls and
#     4 record writes a second: its worst case), alternated ROUNDS times each;
#     the median step_ms of steps after the first, from --log-jsonl, and the
#     process's CPU time (user + sys), which foreign load disturbs far less
#     than wall time (the monitor's cost is CPU it takes).
#
#   bench/cpu/resilience.sh WORK_DIR RATCHET [N=20] [T=2] [ROUNDS=5]
set -euo pipefail
if [[ $# -lt 2 ]]; then
  sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
work=$(mkdir -p "$1" && cd "$1" && pwd); ratchet=$(realpath "$2")
n=${3:-20} T=${4:-2} rounds=${5:-5}
export OMP_NUM_THREADS=1
. "$(dirname "$0")/../sweep/kjv_tiny.sh"
kjv_tiny_setup "$work" "$ratchet"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1 \
  OMPI_MCA_btl_vader_single_copy_mechanism=none
echo "machine: $(nproc --all) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"

echo "== detection latency: $n hangs, mpirun -np 2, --hang-timeout $T"
: >"$work/hangs.jsonl"
for ((i = 0; i < n; i++)); do
  run="$work/hang_$i"; rm -rf "$run"
  k=$((3 + i % 5))
  rc=0
  mpirun -np 2 --bind-to none -x RATCHET_FAULT="rank1/STOP@step-$k" "$ratchet" train \
    --config "$work/base.ini" --run-dir "$run" --steps 40 --quiet --threads 1 \
    --hang-timeout "$T" >"$run.log" 2>&1 || rc=$?
  python3 - "$run" "$rc" "$k" >>"$work/hangs.jsonl" <<'PY'
import json, sys
run, rc, k = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
r = json.load(open(f"{run}/flight/rank_0.json"))
h = r.get("hang") or {}
print(json.dumps({"rc": rc, "stop_step": k, "age_s": h.get("age_s"), "allowance_s": h.get("allowance_s"),
                  "reason": h.get("reason")}))
PY
done
python3 - "$work/hangs.jsonl" "$T" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
T = float(sys.argv[2])
ok = [r for r in rows if r["age_s"] is not None]
ages = [r["age_s"] for r in ok]
excess = [r["age_s"] - r["allowance_s"] for r in ok]
print(f"runs {len(rows)}, exit codes {sorted(set(r['rc'] for r in rows))}, detected by rank 0: {len(ok)}")
print(f"allowances (s): {sorted(set(r['allowance_s'] for r in ok))}")
print(f"age at detection (s): median {statistics.median(ages):.3f} max {max(ages):.3f}")
print(f"past the allowance (s): median {statistics.median(excess):.3f} max {max(excess):.3f} (poll {T/10:.2f} s)")
PY

echo "== watchdog overhead: single rank, 60 steps, $rounds rounds each, alternated"
: >"$work/overhead.txt"
for ((r = 0; r < rounds; r++)); do
  for t in 0 120 1; do
    run="$work/ovh_$t"; rm -rf "$run"; mkdir -p "$run"
    /usr/bin/time -o "$run.time" -f "%U %S" "$ratchet" train --config "$work/base.ini" \
      --run-dir "$run" --steps 60 --quiet --threads 1 --eval-every 0 --hang-timeout "$t" \
      --log-jsonl "$run/log.jsonl" >"$run.log" 2>&1 || { cat "$run.log"; exit 1; }
    python3 - "$run/log.jsonl" "$t" "$(tail -1 "$run.time")" >>"$work/overhead.txt" <<'PY'
import json, statistics, sys
ms = [json.loads(l)["step_ms"] for l in open(sys.argv[1]) if '"step_ms"' in l][1:]
print(sys.argv[2], statistics.median(ms), sum(map(float, sys.argv[3].split())))
PY
  done
done
python3 - "$work/overhead.txt" <<'PY'
import statistics, sys
by, cpu = {}, {}
for l in open(sys.argv[1]):
    t, ms, c = l.split(); by.setdefault(t, []).append(float(ms)); cpu.setdefault(t, []).append(float(c))
off, coff = statistics.median(by["0"]), statistics.median(cpu["0"])
for t in ("0", "120", "1"):
    m, c = statistics.median(by[t]), statistics.median(cpu[t])
    print(f"--hang-timeout {t:>3}: median step {m:.3f} ms ({(m / off - 1) * 100:+.2f}%), "
          f"CPU {c:.2f} s ({(c / coff - 1) * 100:+.2f}%) against off; step ms by round {by[t]}")
PY
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
