#!/usr/bin/env bash
# Issue 39's CPU speed targets (bench/cpu/results.md, "MoE"):
#  (a) a MoE model's training step (bench_train_step --family qwen3_moe) takes
#      at most 1.3x the time of the dense model with the same active shape
#      (--family qwen3 --ffn-hidden k*I: the same attention, and an MLP of
#      the k experts' total hidden size);
#  (b) one MoE layer's forward + backward (bench_moe_layer) is at least 1.5x
#      faster than PyTorch eager looping over the experts
#      (bench/cpu/pytorch_moe.py, Debian's torch, float32, the same threads).
# Each pair runs alternately ROUNDS times, each in its own process; the
# medians are printed, of wall time and of CPU time (user+sys of every
# thread: on a machine shared with other jobs it moves far less than wall
# time, so the ratios are given for both).
#   bench/cpu/moe.sh BUILD_DIR [ROUNDS=5] [THREADS=2]
# Env: PARTS (ab: both; a or b alone), REPS (5: timed layer reps per run).
# Env: MODEL (l8), B (2), T (256), E (8), K (2), I (256) for (a);
#      LAYERS ("2048:512:8:2:512 2048:512:64:8:128", N:C:E:k:I each) for (b);
#      PYTHON (/usr/bin/python3: Debian's torch). OPENBLAS_CORETYPE applies to
#      both programs (Debian's torch calls the same OpenBLAS): a VM whose CPU
#      OpenBLAS does not recognise gets its generic Prescott kernels (the
#      script prints which), e.g. OPENBLAS_CORETYPE=SkylakeX on AVX-512.
set -euo pipefail
build=${1:?usage: bench/cpu/moe.sh BUILD_DIR [ROUNDS] [THREADS]}
rounds=${2:-5} threads=${3:-2}
here=$(cd "$(dirname "$0")" && pwd)
model=${MODEL:-l8} B=${B:-2} T=${T:-256} E=${E:-8} K=${K:-2} I=${I:-256}
layers=${LAYERS:-"2048:512:8:2:512 2048:512:64:8:128"}
parts=${PARTS:-ab} reps=${REPS:-5}
PYTHON=${PYTHON:-/usr/bin/python3}
step=$build/bench/bench_train_step layer=$build/bench/cpu/bench_moe_layer
for exe in "$step" "$layer"; do
  [ -x "$exe" ] || { echo "moe.sh: no $exe (build bench_train_step and bench_moe_layer)" >&2; exit 2; }
done
"$PYTHON" -c 'import torch' 2>/dev/null || { echo "moe.sh: $PYTHON has no torch (scripts/install-deps.sh installs python3-torch)" >&2; exit 2; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# median KEY FILE: the median of one JSON field over the lines of FILE
median() { python3 -c 'import json,sys,statistics as s; print(s.median(json.loads(l)[sys.argv[1]] for l in open(sys.argv[2])))' "$1" "$2"; }
ratio() { python3 -c "print('%.3f' % ($1 / $2))"; }

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg)"
if [[ $parts == *a* ]]; then
echo "(a) training step, $model B=$B T=$T vocab 1024, threads $threads, median of $rounds (3 timed steps after 1 warm-up each):"
common=(--model "$model" --vocab-size 1024 -B "$B" -T "$T" --steps 3 --warmup 1 --threads "$threads" --json)
for _ in $(seq "$rounds"); do
  "$step" "${common[@]}" --family qwen3_moe --num-experts "$E" --experts-per-tok "$K" --moe-ffn-hidden "$I" >> "$tmp/moe"
  "$step" "${common[@]}" --family qwen3 --ffn-hidden $((K * I)) >> "$tmp/dense"
done
echo "  OpenBLAS kernels: $(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["blas_core"])' "$tmp/moe") (OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}; PyTorch uses the same libblas)"
mw=$(median step_ms "$tmp/moe") mc=$(median cpu_ms "$tmp/moe")
dw=$(median step_ms "$tmp/dense") dc=$(median cpu_ms "$tmp/dense")
printf '  %-44s %10s %10s\n' "" "ms/step" "cpu ms"
printf '  %-44s %10.1f %10.1f\n' "qwen3_moe E=$E k=$K I=$I" "$mw" "$mc"
printf '  %-44s %10.1f %10.1f\n' "qwen3 dense ffn_hidden=$((K * I))" "$dw" "$dc"
echo "  MoE / dense: wall $(ratio "$mw" "$dw"), cpu $(ratio "$mc" "$dc") (target <= 1.3)"
fi
[[ $parts == *b* ]] || exit 0

echo "(b) one MoE layer forward + backward, threads $threads, median of $rounds ($reps timed reps after 1 warm-up each):"
printf '  %-32s %10s %10s %10s %10s %8s %8s\n' "N C E k I" "ratchet ms" "cpu ms" "torch ms" "cpu ms" "wall x" "cpu x"
for shape in $layers; do
  IFS=: read -r n c e k i <<< "$shape"
  : > "$tmp/r"; : > "$tmp/p"
  for _ in $(seq "$rounds"); do
    "$layer" -N "$n" -C "$c" -E "$e" -k "$k" -I "$i" --threads "$threads" --reps "$reps" --warmup 1 --json >> "$tmp/r"
    "$PYTHON" "$here/pytorch_moe.py" -N "$n" -C "$c" -E "$e" -k "$k" -I "$i" --threads "$threads" --reps "$reps" --warmup 1 --json >> "$tmp/p"
  done
  rw=$(median ms "$tmp/r") rc=$(median cpu_ms "$tmp/r") pw=$(median ms "$tmp/p") pc=$(median cpu_ms "$tmp/p")
  printf '  %-32s %10.2f %10.2f %10.2f %10.2f %8s %8s\n' "$n $c $e $k $i" "$rw" "$rc" "$pw" "$pc" \
    "$(ratio "$pw" "$rw")" "$(ratio "$pc" "$rc")"
done
echo "  (x: PyTorch time / ratchet time; target >= 1.5)"
