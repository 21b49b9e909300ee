#!/usr/bin/env bash
# Issue 38's CPU speed target: each 2026 family's training step costs at most
# 10% more per FLOP than a Llama of the same shape. For each family, the
# family's step (bench_train_step --family F) and the same shape without the
# family's options (--as-llama) run alternately, ROUNDS times each; the
# figure compared is FLOPs per CPU-second (train_flops_per_token, which
# counts a sliding layer's attention from its window, over the process's
# user+sys time), which foreign load disturbs far less than wall time.
#   bench/cpu/families.sh BUILD_DIR [ROUNDS=2] [MODEL=l8] [T=256]
set -euo pipefail
build=${1:?usage: bench/cpu/families.sh BUILD_DIR [ROUNDS] [MODEL] [T]}
rounds=${2:-2} model=${3:-l8} T=${4:-256}
bench=$build/bench/bench_train_step
[ -x "$bench" ] || { echo "families.sh: no $bench (build the bench_train_step target)" >&2; exit 2; }
common=(--model "$model" --vocab-size 1024 -B 1 -T "$T" --steps 3 --warmup 1 --threads 1 --json)
# GFLOP per CPU-second of one run's JSON line
rate() { python3 -c 'import json,sys; j=json.loads(sys.stdin.read()); print(j["gflops"]*j["step_ms"]/j["cpu_ms"])'; }
printf '%-9s %14s %14s %8s\n' family "GFLOP/cpu-s" "as llama" ratio
for fam in qwen2 qwen3 olmo2 smollm3 mistral gemma3; do
  extra=()
  case $fam in mistral|gemma3) extra=(--sliding-window $((T / 2))) ;; esac
  best_f=0 best_l=0
  for _ in $(seq "$rounds"); do
    f=$("$bench" "${common[@]}" --family "$fam" "${extra[@]}" | rate)
    l=$("$bench" "${common[@]}" --family "$fam" "${extra[@]}" --as-llama | rate)
    best_f=$(python3 -c "print(max($best_f, $f))")
    best_l=$(python3 -c "print(max($best_l, $l))")
  done
  printf '%-9s %14.2f %14.2f %8.3f\n' "$fam" "$best_f" "$best_l" "$(python3 -c "print($best_f / $best_l)")"
done
