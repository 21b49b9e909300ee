#!/usr/bin/env bash
# `ratchet shard` streaming and thread scaling (issue 29, item 4):
#   1. max RSS (/usr/bin/time) sharding growing inputs with gpt2 and
#      llama3_1 (one document: the KJV and the fortunes repeated, each copy
#      starting with its number, so dedup would keep them): it must not grow
#      with the input;
#   2. --threads 1 against --threads 2 for every family (byte, gpt2 and the
#      tokenizer.json files in /usr/local/share/ratchet/hf-tokenizers):
#      the summary line's MB/s (tokenizing, compressing, writing) and the
#      wall time end to end (loading, reading twice included), median of
#      --repeats runs, with the CPU seconds, on the KJV --copies times (10:
#      44 MB, one document: the threads share it only through its safe cuts).
#      --rt runs each of these under `chrt -f 1` (root): real-time priority,
#      so that other work on a shared machine does not take the cores from
#      under one of the two runs (it then waits; the kernel still leaves it
#      5% of each second).
# The machine's load is printed before and after each part (other work on a
# shared machine slows both runs of a pair alike only when it is steady:
# compare only figures from quiet runs).
#
#   bench/data/shard_stream_bench.sh [--build DIR] [--sizes "100 1000"] [--repeats N] [--copies N]
#                                    [--rt] [--skip-rss] [--skip-threads]
set -euo pipefail
build=build
sizes="100 1000"
repeats=5
copies=10
rt=()
do_rss=1
do_threads=1
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --copies) copies=$2; shift 2 ;;
    --rt) rt=(chrt -f 1); shift ;;
    --skip-rss) do_rss=0; shift ;;
    --skip-threads) do_threads=0; shift ;;
    *) echo "shard_stream_bench.sh: unknown argument '$1'; see the top of $0" >&2; exit 2 ;;
  esac
done
ratchet="$build/ratchet"
[ -x "$ratchet" ] || { echo "shard_stream_bench.sh: no $ratchet: build first (scripts/build.sh)" >&2; exit 2; }
hf_dir=${RATCHET_HF_TOKENIZERS:-/usr/local/share/ratchet/hf-tokenizers}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
load() { echo "load $(cut -d' ' -f1-3 /proc/loadavg), cpu pressure $(sed -n 's/^some avg10=\([0-9.]*\).*/\1%/p' /proc/pressure/cpu 2>/dev/null || echo -)"; }

echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p' | head -1); $(date -u +%Y-%m-%dT%H:%MZ)"
bible -f "Gen1:1-Rev22:21" > "$work/kjv.txt"
cat "$work/kjv.txt" /usr/share/games/fortunes/fortunes > "$work/base.txt"

if [ "$do_rss" = 1 ]; then
  echo
  echo "max RSS, --threads 2 ($(load)):"
  for mb in $sizes; do
    i=0
    : > "$work/big.txt"
    while [ "$(stat -c %s "$work/big.txt")" -lt $((mb * 1000000)) ]; do
      { echo "copy $i"; cat "$work/base.txt"; } >> "$work/big.txt"
      i=$((i + 1))
    done
    for tok in gpt2 llama3_1; do
      spec=$tok
      [ "$tok" != gpt2 ] && spec="$hf_dir/$tok/tokenizer.json"
      rm -rf "$work/out"
      /usr/bin/time -f "%M %e" -o "$work/t" "$ratchet" shard --tokenizer "$spec" --input "$work/big.txt" \
        --output-dir "$work/out" --threads 2 --no-progress > "$work/log"
      read -r kb secs < <(tail -1 "$work/t")
      printf "  %-9s %7.1f MB of text: max RSS %4d MiB (%s s wall)\n" "$tok" \
        "$(awk -v b="$(stat -c %s "$work/big.txt")" 'BEGIN{printf "%.1f", b/1e6}')" $((kb / 1024)) "$secs"
    done
  done
  rm -f "$work/big.txt"
  echo "  ($(load))"
fi

if [ "$do_threads" = 1 ]; then
  for _ in $(seq 1 "$copies"); do cat "$work/kjv.txt"; done > "$work/text3.txt"
  families=(byte gpt2)
  for f in llama3_1 llama2 qwen3 gemma3; do
    [ -f "$hf_dir/$f/tokenizer.json" ] && families+=("$f") || echo "NOT-RUN $f: no $hf_dir/$f/tokenizer.json"
  done
  median() { sort -n | awk '{a[NR]=$1} END{print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
  run() {  # SPEC THREADS -> "MB/s wall cpu" (MB/s: the summary line's, after loading and the first pass)
    rm -rf "$work/out"
    ${rt[@]+"${rt[@]}"} /usr/bin/time -f "%e %U %S" -o "$work/t" "$ratchet" shard --tokenizer "$1" --input "$work/text3.txt" \
      --output-dir "$work/out" --val-fraction 0 --threads "$2" --no-progress > "$work/log"
    local rate
    rate=$(sed -n 's/.* thread(s): \([0-9.]*\) MB\/s.*/\1/p' "$work/log")
    awk -v r="$rate" '{printf "%s %s %.2f\n", r, $1, $2 + $3}' < <(tail -1 "$work/t")
  }
  col() { awk -v k="$1" '{print $k}' | median; }
  echo
  echo "--threads 1 vs 2${rt[@]+ (under ${rt[*]})}, median of $repeats (KJV x $copies, $(awk -v b="$(stat -c %s "$work/text3.txt")" 'BEGIN{printf "%.1f MB", b/1e6}'), one document; $(load)):"
  echo "  MB/s: tokenizing, compressing and writing (the summary line); wall: end to end (loading the"
  echo "  tokenizer and the first reading included); cpu: user+sys seconds of the whole run"
  printf "  %-9s %8s %8s %7s   %7s %7s %7s   %6s %6s\n" tokenizer "MB/s 1" "MB/s 2" scaling "wall 1" "wall 2" scaling "cpu 1" "cpu 2"
  for f in "${families[@]}"; do
    spec=$f
    [ "$f" != byte ] && [ "$f" != gpt2 ] && spec="$hf_dir/$f/tokenizer.json"
    run "$spec" 1 > /dev/null  # warm the page cache and the tokenizer file
    for _ in $(seq 1 "$repeats"); do run "$spec" 1; done > "$work/r1"
    for _ in $(seq 1 "$repeats"); do run "$spec" 2; done > "$work/r2"
    r1=$(col 1 < "$work/r1"); r2=$(col 1 < "$work/r2"); w1=$(col 2 < "$work/r1"); w2=$(col 2 < "$work/r2")
    printf "  %-9s %8s %8s %6sx   %7s %7s %6sx   %6s %6s\n" "$f" "$r1" "$r2" \
      "$(awk -v a="$r2" -v b="$r1" 'BEGIN{printf "%.2f", a/b}')" "$w1" "$w2" \
      "$(awk -v a="$w1" -v b="$w2" 'BEGIN{printf "%.2f", a/b}')" "$(col 3 < "$work/r1")" "$(col 3 < "$work/r2")"
  done
  echo "  ($(load))"
fi
