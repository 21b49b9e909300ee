#!/usr/bin/env bash
# Issue 40's goodput measurement: a 2-node run of the real `ratchet train`
# (slurm/train-multinode.sbatch, one rank per node, partition `all` of the
# three-node namespace cluster) with one injected hang and one preemption,
# and where its device-seconds went (the ledger's device_seconds_by_cause):
#  - run 1: rank 1 freezes itself (SIGSTOP, RATCHET_FAULT=rank1/STOP@step-K)
#    mid-run; rank 0's watchdog (--hang-timeout T) ends the job with 75; the
#    wrapper requeues it without rank 1's node;
#  - run 2: once it is past step P, the batch shell gets USR1 (`scancel
#    --signal=USR1 --batch`, as Slurm's warning before a preemption or the
#    time limit): both ranks save and exit 75; the wrapper requeues;
#  - run 3: resumes and finishes STEPS steps.
# Prints the ledger's breakdown by cause, the goodput, `ratchet doctor`'s
# lines, and the run's wall time from submission to the end.
# bench/sweep's tiny model (L=4 H=4 C=64, B=8 T=64, KJV bytes), one thread a
# rank, a checkpoint every 50 steps.
#
# Needs the namespace cluster with three nodes, sharing WORK_DIR:
#   RATCHET_SLURM2_NODES=3 RATCHET_SLURM2_SHARE=$PWD/build:WORK_DIR scripts/slurm-cluster-2node.sh start
#   bench/cpu/goodput.sh WORK_DIR RATCHET [STEPS=400] [T=10] [K=120] [P=260]
#   ... scripts/slurm-cluster-2node.sh stop
set -euo pipefail
if [[ $# -lt 2 ]]; then
  sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
work=$(mkdir -p "$1" && cd "$1" && pwd); ratchet=$(realpath "$2")
steps=${3:-400} T=${4:-10} K=${5:-120} P=${6:-260}
cluster=$src/scripts/slurm-cluster-2node.sh
export RATCHET_SLURM2_NODES=3
eval "$("$cluster" env)"
"$cluster" status >/dev/null || { echo "goodput.sh: the namespace cluster is not up (see the usage)" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none \
  OMPI_MCA_mpi_yield_when_idle=1
. "$src/bench/sweep/kjv_tiny.sh"
kjv_tiny_setup "$work" "$ratchet"
echo "machine: $(nproc --all) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); load before: $(cut -d' ' -f1-3 /proc/loadavg)"
run=$work/goodput-run
rm -rf "$run" && mkdir -p "$run"
cd "$run"
{ cat "$work/base.ini"; echo "steps = $steps"; echo "ckpt-every-steps = 50"; echo "threads = 1"; echo "quiet = true"; } >train.ini
cat >trainer.sh <<SH
#!/bin/bash
[ -z "\${SLURM_RESTART_COUNT:-}" ] || unset RATCHET_FAULT
exec $ratchet "\$@"
SH
chmod +x trainer.sh
field() { { timeout 15 scontrol show job -o "$id" 2>/dev/null || true; } | tr ' ' '\n' | sed -n "s/^$1=//p" | head -n1; }
# The ledger's max_step ("" before the first write; not an error under set -e).
max_step() { { sed -n 's/.*"max_step": \([0-9]*\).*/\1/p' ckpt/ledger.json 2>/dev/null || true; } | head -n1; }
t0=$(date +%s.%N)
id=$(sbatch --parsable -J goodput -p all --nodes=2 --ntasks-per-node=1 -c1 -t15 \
  --export="ALL,RATCHET_BIN=$run/trainer.sh,RATCHET_DOCTOR_BIN=$ratchet,RATCHET_MODULES=,RATCHET_CKPT_DIR=$run/ckpt,RATCHET_CONFIG=$run/train.ini,RATCHET_SLURM_LIB=$src/slurm/requeue-lib.sh,RATCHET_FAULT=rank1/STOP@step-$K" \
  "$src/slurm/train-multinode.sbatch" --hang-timeout "$T")
echo "job $id: $steps steps; rank 1 frozen at step $K of run 1 (--hang-timeout $T); USR1 past step $P of run 2"
# Run 2: past step P, the preemption warning.
deadline=$((SECONDS + 900))
while :; do
  s=$(max_step)
  if [ "$(field Restarts)" = 1 ] && [ "$(field JobState)" = RUNNING ] && [ -n "$s" ] && [ "$s" -ge "$P" ]; then break; fi
  ((SECONDS < deadline)) || { scancel "$id"; echo "run 2 did not reach step $P" >&2; exit 1; }
  sleep 0.2
done
scancel --signal=USR1 --batch "$id"
echo "USR1 to the batch shell at step $(max_step) of run 2"
until case $(field JobState) in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL) true ;; *) false ;; esac; do
  ((SECONDS < deadline)) || { scancel "$id"; echo "job $id did not finish" >&2; exit 1; }
  sleep 0.5
done
t1=$(date +%s.%N)
echo "job $id: JobState=$(field JobState) Restarts=$(field Restarts) ExcNodeList=$(field ExcNodeList); $(python3 -c "print(f'{$t1 - $t0:.1f}')") s from submission to the end"
grep -h "hang watchdog:\|excluding suspect\|stopping at step\|resume: continuing" "$run"/*.out | sed 's/^/  log: /' | cut -c1-220
python3 - "$run/ckpt/ledger.json" <<'PY'
import json, sys
l = json.load(open(sys.argv[1]))
p = l["device_seconds_by_cause"]
whole = l["device_seconds"] + p["requeue_gap"]
print(f"ledger: {l['devices']} devices, max_step {l['max_step']}, preemptions {l['preemptions']}, resumes {l['resumes']}")
print(f"{'cause':<16} {'device-s':>9} {'share':>7}")
for k, v in p.items():
    print(f"{k:<16} {v:9.2f} {100 * v / whole:6.1f}%")
print(f"{'sum of parts':<16} {sum(p.values()):9.2f}; whole (device_seconds + requeue_gap) {whole:.2f}")
print(f"goodput {100 * l['goodput']:.1f}%")
PY
"$ratchet" doctor "$run/ckpt" | sed 's/^/doctor: /'
