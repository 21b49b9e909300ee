#!/usr/bin/env bash
# Flash vs cuDNN (vs materialized) causal attention, forward + backward, on a GPU:
#   bench/kernels/attention.sh [--build-dir DIR] [bench_attention_gpu options...]
# e.g. bench/kernels/attention.sh --T 1024,4096 --json > attention.jsonl
# Runs DIR/bench/kernels/bench_attention_gpu (default DIR: build): per T and
# implementation a correctness pass against the cpu backend, warm-up, then ms
# and TFLOP/s per forward and backward (see bench_attention_gpu.cpp for the FLOP
# convention). Defaults: d12's attention (B=8, 12 heads of 64), T = 512..4096.
#
# Exit codes: bench_attention_gpu's (0 measured, 1 an implementation was wrong,
# 2 bad usage), and 69 when there is no GPU (EX_UNAVAILABLE, as
# scripts/gpu-check.sh): nothing measured.
#   attention.sh --expect-no-gpu BINARY   (CTest, machines without a GPU)
# passes when BINARY exits 69 saying "no GPU"; 77 (skipped) if a GPU is present.
set -uo pipefail
cd "$(dirname "$0")/../.."

if [ "${1:-}" = --expect-no-gpu ]; then
  bin=$2
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q GPU; then
    echo "attention.sh: a GPU is present; the no-GPU check does not apply"; exit 77
  fi
  out=$("$bin" --T 64 2>&1); rc=$?
  echo "$out"
  if [ $rc -eq 69 ] && printf '%s' "$out" | grep -q "no GPU"; then
    echo "attention.sh: no GPU, exit 69 as expected"; exit 0
  fi
  echo "attention.sh: expected exit 69 and 'no GPU', got exit $rc" >&2; exit 1
fi

build=build
if [ "${1:-}" = --build-dir ]; then build=$2; shift 2; fi
bin=$build/bench/kernels/bench_attention_gpu
if [ ! -x "$bin" ]; then
  echo "attention.sh: $bin not found: build it (cmake --build $build --target bench_attention_gpu;" \
       "needs the CUDA toolkit, and cuDNN for the cudnn rows)" >&2
  exit 2
fi
exec "$bin" "$@"
