#!/usr/bin/env bash
# Tokenizer throughput side by side (issue 29), one run, on the same text:
#   - `ratchet shard` end to end (tokenize + compress + write; the summary
#     line's MB/s, which leaves out reading the input and loading the
#     tokenizer) for byte, gpt2 and each tokenizer.json family in
#     /usr/local/share/ratchet/hf-tokenizers (llama3_1, llama2, qwen3, gemma3),
#     one thread;
#   - Hugging Face `tokenizers` (Node binding, encodeBatch of 1000 lines,
#     RAYON_NUM_THREADS=1) on the same tokenizer.json, and tiktoken (npm WASM,
#     "gpt2") for gpt2: encoding time only (bench/data/peer_tokenize.js);
#   - --threads 1 vs 2, one word without spaces of 1 MB and 10 MB, and max
#     RSS (/usr/bin/time) for growing inputs.
# Prints the ratios: ratchet / HF, ratchet / tiktoken, and each row against
# the gpt2 row (and against --baseline, an older ratchet binary, if given).
#
#   bench/data/tokenizer_compare.sh [--build DIR] [--copies N] [--baseline RATCHET] [--quick]
#                                   [--repeat N]
#
# --copies N: the text is the King James Bible (bible-kjv) N times (default 1,
# 4.4 MB; the peers take ~5 s per family at that size). --quick skips the
# 10 MB word and the largest RSS input. --repeat N (default 3): each
# `ratchet shard` of the main table runs N times and the median MB/s is shown
# (one run lasts well under a second: on a shared machine one run is noise).
set -euo pipefail
build=build
copies=1
baseline=""
quick=0
repeat=3
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --copies) copies=$2; shift 2 ;;
    --baseline) baseline=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    --repeat) repeat=$2; shift 2 ;;
    *) echo "tokenizer_compare.sh: unknown argument '$1'; see the top of $0" >&2; exit 2 ;;
  esac
done
ratchet="$build/ratchet"
[ -x "$ratchet" ] || { echo "tokenizer_compare.sh: no $ratchet: build first (scripts/build.sh)" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
hf_dir=${RATCHET_HF_TOKENIZERS:-/usr/local/share/ratchet/hf-tokenizers}
export RATCHET_NODE_MODULES=${RATCHET_NODE_MODULES:-/usr/local/share/ratchet/node/node_modules}
export RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

bible -f "Gen1:1-Rev22:21" > "$work/kjv1.txt"
for _ in $(seq 1 "$copies"); do cat "$work/kjv1.txt"; done > "$work/text.txt"
text="$work/text.txt"
mb=$(stat -c %s "$text")
echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p' | head -1); $(date -u +%Y-%m-%dT%H:%MZ)"
echo "text: King James Bible x $copies ($(awk -v b="$mb" 'BEGIN{printf "%.1f MB", b/1e6}'))"
echo

# `ratchet shard` once: prints "MBps tokens_per_s tokens" from its summary lines.
shard_rate() {  # BINARY TOKENIZER INPUT THREADS
  local out="$work/out" log
  rm -rf "$out"
  log=$("$1" shard --tokenizer "$2" --input "$3" --output-dir "$out" --val-fraction 0 \
        --threads "$4" --no-progress 2>&1) || { echo "FAILED: $log" >&2; echo "- - -"; return; }
  local rate toks
  rate=$(sed -n 's/.* thread(s): \([0-9.]*\) MB\/s, \([0-9.]*[kMG]*\) tokens\/s/\1 \2/p' <<<"$log")
  toks=$(sed -n 's/.* train documents (\([0-9]*\) tokens.*/\1/p' <<<"$log")
  echo "$rate $toks"
}
# The median of `repeat` runs of shard_rate (by MB/s).
shard_rate_median() {  # BINARY TOKENIZER INPUT THREADS
  local k
  for k in $(seq 1 "$repeat"); do shard_rate "$@"; done | sort -g -k1,1 |
    awk '{ a[NR] = $0 } END { print a[int((NR + 1) / 2)] }'
}
peer_rate() {  # hf|tiktoken WHAT INPUT -> "MBps tokens_per_s tokens"
  local r
  r=$(node "$here/peer_tokenize.js" "$1" "$2" "$3" 2>&1) || { echo "FAILED: $r" >&2; echo "- - -"; return; }
  awk '{printf "%.2f %.2fM %d\n", $1/$3/1e6, $2/$3/1e6, $2}' <<<"$r"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if (b+0 > 0 && a+0 > 0) printf "%.1fx", a/b; else printf "-" }'; }

families=(byte gpt2)
for f in llama3_1 llama2 qwen3 gemma3; do
  if [ -f "$hf_dir/$f/tokenizer.json" ]; then families+=("$f"); else echo "NOT-RUN $f: no $hf_dir/$f/tokenizer.json (scripts/install-deps.sh)"; fi
done
shard_help=$("$ratchet" shard --help 2>&1 || true)
if ! grep -q "tokenizer.json" <<<"$shard_help"; then
  echo "NOT-RUN tokenizer.json families: this ratchet has no HfTokenizer"; families=(byte gpt2)
fi

printf "%-10s %10s %10s %10s %10s %10s %9s %9s %9s\n" tokenizer "ratchet" "tok/s" "HF" "tiktoken" \
  "vs gpt2" "/HF" "/tiktoken" "tokens"
printf "%-10s %10s %10s %10s %10s %10s %9s %9s %9s\n" "" "MB/s" "" "MB/s" "MB/s" "" "" "" ""
gpt2_rate=""
if [ -n "$baseline" ]; then
  read -r b_rate b_tps b_toks < <(shard_rate_median "$baseline" gpt2 "$text" 1)
  printf "%-10s %10s %10s %10s %10s %10s %9s %9s %9s\n" "gpt2 (baseline)" "$b_rate" "$b_tps" - - - - - "$b_toks"
fi
for f in "${families[@]}"; do
  spec=$f
  [ "$f" != byte ] && [ "$f" != gpt2 ] && spec="$hf_dir/$f/tokenizer.json"
  read -r r_rate r_tps r_toks < <(shard_rate_median "$ratchet" "$spec" "$text" 1)
  [ "$f" = gpt2 ] && gpt2_rate=$r_rate
  hf_rate=- tt_rate=-
  if [ "$f" = gpt2 ]; then
    read -r tt_rate _ _ < <(peer_rate tiktoken gpt2 "$text")
  elif [ "$f" != byte ]; then
    read -r hf_rate _ _ < <(peer_rate hf "$spec" "$text")
  fi
  vs=$(ratio "$r_rate" "${gpt2_rate:-0}")
  [ -n "$baseline" ] && vs="$vs / $(ratio "$r_rate" "$b_rate")b"
  printf "%-10s %10s %10s %10s %10s %10s %9s %9s %9s\n" "$f" "$r_rate" "$r_tps" "$hf_rate" "$tt_rate" \
    "$vs" "$(ratio "$r_rate" "$hf_rate")" "$(ratio "$r_rate" "$tt_rate")" "$r_toks"
done
[ -n "$baseline" ] && echo "(vs gpt2: this row / this ratchet's gpt2 row; NNb: / the baseline binary's gpt2 row)"
echo

# ---- threads ----
for _ in 1 2 3; do cat "$text"; done > "$work/text3.txt"
echo "threads (text x 3, $(awk -v b="$(stat -c %s "$work/text3.txt")" 'BEGIN{printf "%.1f MB", b/1e6}')):"
for f in gpt2 "${families[@]:2:1}"; do
  spec=$f
  [ "$f" != gpt2 ] && spec="$hf_dir/$f/tokenizer.json"
  read -r r1 _ _ < <(shard_rate "$ratchet" "$spec" "$work/text3.txt" 1)
  read -r r2 _ _ < <(shard_rate "$ratchet" "$spec" "$work/text3.txt" 2)
  printf "  %-10s --threads 1: %6s MB/s   --threads 2: %6s MB/s   scaling %s\n" "$f" "$r1" "$r2" "$(ratio "$r2" "$r1")"
done
echo

# ---- one long word ----
echo "one word without spaces (random a-z), end to end:"
sizes=(1048576 10485760)
[ "$quick" = 1 ] && sizes=(1048576)
for n in "${sizes[@]}"; do
  head -c "$n" /dev/urandom | LC_ALL=C tr -dc 'a-z' | head -c "$n" > "$work/word.txt"
  while [ "$(stat -c %s "$work/word.txt")" -lt "$n" ]; do  # tr keeps ~10% of random bytes
    head -c "$n" /dev/urandom | LC_ALL=C tr -dc 'a-z' >> "$work/word.txt"
  done
  truncate -s "$n" "$work/word.txt"
  for f in gpt2 "${families[@]:2:1}"; do
    spec=$f
    [ "$f" != gpt2 ] && spec="$hf_dir/$f/tokenizer.json"
    read -r r _ t < <(shard_rate "$ratchet" "$spec" "$work/word.txt" 1)
    printf "  %-10s %5s MB word: %6s MB/s (%s tokens)\n" "$f" "$((n >> 20))" "$r" "$t"
  done
done
echo

# ---- memory ----
echo "max RSS of ratchet shard --tokenizer gpt2 --threads 1 (/usr/bin/time):"
reps=(1 4 16)
[ "$quick" = 1 ] && reps=(1 4)
for k in "${reps[@]}"; do
  for _ in $(seq 1 "$k"); do cat "$text"; done > "$work/big.txt"
  rm -rf "$work/out"
  /usr/bin/time -f "%M" -o "$work/rss" "$ratchet" shard --tokenizer gpt2 --input "$work/big.txt" \
    --output-dir "$work/out" --val-fraction 0 --threads 1 --no-progress > /dev/null
  printf "  %8s MB of text: max RSS %5d MiB\n" "$(awk -v b="$(stat -c %s "$work/big.txt")" 'BEGIN{printf "%.1f", b/1e6}')" \
    "$(( $(cat "$work/rss") / 1024 ))"
done
rm -f "$work/big.txt"
