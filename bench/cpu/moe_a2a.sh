#!/usr/bin/env bash
# --expert-parallel's all-to-all traffic measured against `ratchet plan`'s
# formula (issue 39, "Speed": bytes and time per step, against the plan's
# formula). A small qwen3_moe model (4 layers, all MoE, 8 experts, top 2,
# C 64, expert hidden 32; B 8, T 64, KJV bytes, one thread a rank) trained
# STEPS steps on `mpirun -np 2` with --expert-parallel 2. Prints, from the
# JSONL's step records, rank 0's a2a_bytes and a2a_ms (median, min, max over
# the steps after the first) beside `ratchet plan --expert-parallel 2`'s
# bytes for the same config (uniform routing: the measured bytes follow
# rank 0's routing, which is not uniform).
#
#   bench/cpu/moe_a2a.sh WORK_DIR RATCHET [STEPS]
set -euo pipefail
if [[ $# -lt 2 ]]; then
  sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
work=$(mkdir -p "$1" && cd "$1" && pwd); ratchet=$2; steps=${3:-20}
export OMP_NUM_THREADS=1
. "$(dirname "$0")/../sweep/kjv_tiny.sh"
kjv_tiny_setup "$work" "$ratchet"
model=(--model custom --arch llama --family qwen3_moe --layers 4 --heads 4 --kv-heads 2
       --channels 64 --num-experts 8 --experts-per-tok 2 --moe-ffn-hidden 32 --max-seq-len 64
       --seq-len 64 --batch-size 8 --total-batch-tokens 1024)
rm -rf "$work/ep"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
  mpirun -np 2 --bind-to none "$ratchet" train "${model[@]}" --expert-parallel 2 --threads 1 \
  --train-data "$work/data/train_*.h5" --val-data "$work/data/val_*.h5" --eval-every 0 \
  --steps "$steps" --quiet --run-dir "$work/ep" --log-jsonl "$work/ep/log.jsonl" \
  >"$work/ep.log" 2>&1 || { cat "$work/ep.log"; exit 1; }
plan=$("$ratchet" plan "${model[@]}" --device cpu --world-size 2 --expert-parallel 2 |
       sed -n 's/^all-to-all (--expert-parallel 2): \([0-9]*\) bytes.*/\1/p')
python3 - "$work/ep/log.jsonl" "$plan" <<'PY'
import json, statistics, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
recs = [r for r in recs if "a2a_bytes" in r][1:]  # the first step warms up
b = [r["a2a_bytes"] for r in recs]
ms = [r["a2a_ms"] for r in recs]
step = [r["step_ms"] for r in recs if "step_ms" in r]
plan = float(sys.argv[2])
print(f"steps measured: {len(recs)}")
print(f"a2a_bytes  median {statistics.median(b):.0f}  min {min(b):.0f}  max {max(b):.0f}")
print(f"plan       {plan:.0f}  (measured median / plan = {statistics.median(b) / plan:.3f})")
print(f"a2a_ms     median {statistics.median(ms):.2f}  min {min(ms):.2f}  max {max(ms):.2f}")
if step:
    print(f"step_ms    median {statistics.median(step):.1f}")
PY
