#!/usr/bin/env bash
# Side-by-side CPU training-step benchmark: ratchet (bench_train_step) vs.
# PyTorch (pytorch_step.py, same model and step), plus the FMA peak probe.
#
#   bench/cpu/compare.sh BUILD_DIR [CONFIG ...]
#
# CONFIG is MODEL:B:T[:STEPS[:WARMUP]], MODEL dN (GPT-2) or lN (Llama: the
# arch column; PyTorch side in pytorch_llama.py), default:
#   d12:4:64:5:2  d6:4:64:5:2  d12:4:256:3:1  d12:4:1024:2:1  l12:4:256:3:1
# (about 7-8 minutes on 2 Zen cores, most of it PyTorch at T=1024).
# Each implementation runs in its own process, one after the other, with all
# cores; peak RSS is that process's ru_maxrss (cross-checked by /usr/bin/time
# when present). % of peak is against the all-thread FMA probe (the widest
# FMA the CPU has: AVX-512 where present); ratio is PyTorch ms / ratchet ms
# (issue 15's targets: >= 2.5x at every T, >= 75% of peak at T >= 256);
# cpu ratio is the same from each process's CPU time per step (user + sys of
# all threads), the figure to read when other jobs share the machine.
# Both run on the OpenBLAS kernels OPENBLAS_CORETYPE selects (the header line
# shows it; unset, OpenBLAS picks by CPU: AVX-512 kernels on AVX-512 CPUs).
#
# Env: PYTHON (default /usr/bin/python3: Debian's torch), OUT (JSON-lines
# file, default BUILD_DIR/bench_cpu_compare.jsonl).
set -euo pipefail
if [[ $# -lt 1 || "$1" == -h || "$1" == --help ]]; then
  sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
  exit $([[ $# -lt 1 ]] && echo 2 || echo 0)
fi
BUILD=$(cd "$1" && pwd); shift
HERE=$(cd "$(dirname "$0")" && pwd)
PYTHON=${PYTHON:-/usr/bin/python3}
OUT=${OUT:-$BUILD/bench_cpu_compare.jsonl}
CONFIGS=("$@")
[[ ${#CONFIGS[@]} -gt 0 ]] || CONFIGS=(d12:4:64:5:2 d6:4:64:5:2 d12:4:256:3:1 d12:4:1024:2:1 l12:4:256:3:1)

find_bin() {  # first existing path among the arguments
  for p in "$@"; do [[ -x "$p" ]] && { echo "$p"; return; }; done
  echo "compare.sh: none of $* found (build the targets first)" >&2; exit 1
}
FMA=$(find_bin "$BUILD/bench/cpu/bench_fma_peak" "$BUILD/bench_fma_peak")
STEP=$(find_bin "$BUILD/bench/bench_train_step" "$BUILD/bench_train_step")
"$PYTHON" -c 'import torch' 2>/dev/null || { echo "compare.sh: $PYTHON has no torch" >&2; exit 1; }

TIMEV=""; [[ -x /usr/bin/time ]] && TIMEV=/usr/bin/time
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
: > "$OUT"

echo "# $(date -u +%FT%TZ)  $(nproc) cores  $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)  load: $(cut -d' ' -f1-3 /proc/loadavg)  OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE-(unset)}" >&2
busy=$(ps -eo pcpu=,pid=,comm= --sort=-pcpu | awk -v me=$$ '$1 > 20 && $2 != me' | head -3)
[[ -z "$busy" ]] || { echo "# WARNING: machine not quiet:" >&2; echo "$busy" | sed 's/^/#   /' >&2; }

echo "# FMA peak probe: $FMA --json" >&2
"$FMA" --json | tee -a "$OUT" >&2

busy_jiffies() {  # all CPUs' non-idle jiffies (user nice system irq softirq steal)
  awk '/^cpu /{print $2 + $3 + $4 + $7 + $8 + $9; exit}' /proc/stat
}
HZ=$(getconf CLK_TCK)

run() {  # run IMPL CMD...: one JSON line, plus time_maxrss_mb and other_cpu_pct
  local impl=$1; shift
  echo "# $impl: $*" >&2
  local line j0 j1 t0 t1
  j0=$(busy_jiffies); t0=$(date +%s.%N)
  if [[ -n "$TIMEV" ]]; then
    line=$("$TIMEV" -f '%M %U %S' -o "$TMP/rss" "$@" | tail -n 1)
    j1=$(busy_jiffies); t1=$(date +%s.%N)
    read -r kb ut st < <(tail -n 1 "$TMP/rss")
    # other_cpu_pct: CPU time used by everything except this process during
    # its run, as % of all cores' wall time (interference check; ~0 is quiet).
    local other
    other=$(awk -v j="$((j1 - j0))" -v hz="$HZ" -v own="$(awk -v u="$ut" -v s="$st" 'BEGIN{print u + s}')" \
      -v w="$(awk -v a="$t0" -v b="$t1" 'BEGIN{print b - a}')" -v n="$(nproc)" \
      'BEGIN{o = (j / hz - own) / (w * n) * 100; printf "%.1f", o < 0 ? 0 : o}')
    line=$(echo "$line" | jq -c --argjson kb "$kb" --argjson other "$other" \
      '. + {time_maxrss_mb: (($kb / 1024) * 10 | round / 10), other_cpu_pct: $other}')
  else
    line=$("$@" | tail -n 1)
  fi
  echo "$line" | tee -a "$OUT" >&2
}

for c in "${CONFIGS[@]}"; do
  IFS=: read -r model B T steps warmup <<< "$c"
  steps=${steps:-3}; warmup=${warmup:-1}
  run ratchet "$STEP" --model "$model" -B "$B" -T "$T" --steps "$steps" --warmup "$warmup" --json
  run pytorch "$PYTHON" "$HERE/pytorch_step.py" --model "$model" -B "$B" -T "$T" \
    --steps "$steps" --warmup "$warmup" --json
done

echo "# JSON lines: $OUT" >&2
echo
# Table (plain awk over the JSON lines via jq).
jq -r 'if .impl == "fma_peak" then "PEAK \(.gflops_all) \(.gflops_1) \(.threads) \(.isa // "avx2")"
       else "ROW \(.model) \(.B) \(.T) \(.impl) \(.step_ms) \(.tokens_per_s) \(.gflops) \(.peak_rss_mb) \(.time_maxrss_mb // "-") \(.other_cpu_pct // "-") \(.cpu_ms // 0)" end' "$OUT" |
awk '
  $1 == "PEAK" { peak = $2; printf "FP32 FMA peak (%s): %.1f GFLOP/s (%d threads), %.1f GFLOP/s (1 thread)\n\n", $5, $2, $4, $3
                 printf "%-6s %-16s %-8s %10s %10s %9s %8s %8s %10s %10s %7s %9s\n", "arch", "config", "impl", "ms/step", "tokens/s", "GFLOP/s", "% peak", "ratio", "RSS MB", "time -v MB", "other%", "cpu ratio"
                 next }
  $1 == "ROW" {
    cfg = sprintf("%s B=%s T=%s", $2, $3, $4)
    if ($5 == "ratchet") { rms[cfg] = $6; rcpu[cfg] = $12 }
    ratio = "-"; cratio = "-"
    if ($5 == "pytorch" && (cfg in rms)) ratio = sprintf("%.2fx", $6 / rms[cfg])
    if ($5 == "pytorch" && rcpu[cfg] > 0 && $12 > 0) cratio = sprintf("%.2fx", $12 / rcpu[cfg])
    arch = substr($2, 1, 1) == "l" ? "llama" : "gpt2"
    printf "%-6s %-16s %-8s %10.1f %10.1f %9.1f %7.1f%% %8s %10.1f %10s %7s %9s\n", arch, cfg, $5, $6, $7, $8, 100 * $8 / peak, ratio, $9, $10, $11, cratio
  }'
echo
echo "other% = CPU used by other processes during the run, % of all cores (interference; should be ~0)."
echo "ratio = PyTorch ms/step / ratchet ms/step (target >= 2.50x); cpu ratio = the same from CPU time per step;"
echo "% peak vs. the all-thread FMA probe (target >= 75% for ratchet at T >= 256)."
