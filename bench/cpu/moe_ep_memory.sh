#!/usr/bin/env bash
# What --expert-parallel saves at --zero ZERO (0, 1 or 2; default 0; issue
# 39; docs/moe.md "What each rank keeps"): each rank's peak resident memory
# (GNU time's maximum RSS) for
# a MoE model whose experts dominate (qwen3_moe, 4 layers all MoE, 32
# experts, top 2, C 256, expert hidden 512: 50.3M expert parameters of
# 53.2M; B 8, T 64, KJV bytes, one thread a rank), trained STEPS steps on
# `mpirun -np 2` at --expert-parallel 1 and 2, beside `ratchet plan`'s
# per-rank count of the model states (parameters, gradients, AdamW moments,
# and the stage's reduction buffers) for the same run. RSS also holds the process's own code, MPI and
# OpenBLAS buffers, the data and the host copies made at start-up, the same
# at both sizes: the difference is what to compare.
#
#   bench/cpu/moe_ep_memory.sh WORK_DIR RATCHET [STEPS] [ZERO]
set -euo pipefail
if [[ $# -lt 2 ]]; then
  sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
work=$(mkdir -p "$1" && cd "$1" && pwd); ratchet=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
steps=${3:-5}
zero=${4:-0}
export OMP_NUM_THREADS=1
. "$(dirname "$0")/../sweep/kjv_tiny.sh"
kjv_tiny_setup "$work" "$ratchet"
model=(--model custom --arch llama --family qwen3_moe --layers 4 --heads 4 --kv-heads 2
       --channels 256 --num-experts 32 --experts-per-tok 2 --moe-ffn-hidden 512
       --max-seq-len 64 --seq-len 64 --batch-size 8 --total-batch-tokens 1024)
for n in 1 2; do
  rm -rf "$work/ep$n"
  mkdir -p "$work/ep$n"
  # The single quotes are meant: each rank's own shell expands its rank.
  # shellcheck disable=SC2016
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
    mpirun -np 2 --bind-to none sh -c '/usr/bin/time -f "rank $OMPI_COMM_WORLD_RANK max_rss_kb %M" \
      -o "$0/rss.$OMPI_COMM_WORLD_RANK" "$@"' "$work/ep$n" "$ratchet" train "${model[@]}" \
    --zero "$zero" --expert-parallel "$n" --threads 1 \
    --train-data "$work/data/train_*.h5" --val-data "$work/data/val_*.h5" --eval-every 0 \
    --steps "$steps" --quiet --run-dir "$work/ep$n/run" >"$work/ep$n.log" 2>&1 ||
    { cat "$work/ep$n.log"; exit 1; }
  # The stage's model states (ZeRO-2: its gradient shard and bucket buffers
  # hold the gradients).
  states=$("$ratchet" plan "${model[@]}" --device cpu --world-size 2 --zero "$zero" --expert-parallel "$n" --json |
           python3 -c 'import json,sys; z=json.load(sys.stdin)["zero"]["stages"][int(sys.argv[1])]
print(z["params_bytes"] + z["grads_bytes"] + z["bucket_bytes"] + z["staging_bytes"] + z["moments_bytes"])' "$zero")
  echo "--expert-parallel $n: $(cat "$work/ep$n"/rss.* | tr '\n' ' ')plan model states ${states} bytes/rank"
  grep -h "expert state" "$work/ep$n.log" | head -1
done
