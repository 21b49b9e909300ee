#!/usr/bin/env bash
# `ratchet eval` on d12 against plain forward passes over the same number of
# token positions, on the cpu backend (issue 31's speed target: multiple-choice
# scoring costs no more than forwards over the same tokens).
#
#   bench/eval/eval_speed.sh [BUILD_DIR] [EXAMPLES] [THREADS]
#
# THREADS defaults to 1: with one thread the process's CPU seconds are a fair
# measure on a shared machine too (both are printed; OpenMP threads spin while
# they wait for a busy core, which inflates CPU seconds and wall time alike).
# EXAMPLES defaults to 10042 (HellaSwag validation's size: hours on 2 cores);
# the per-position rates compare the same way for fewer. Inputs are synthetic
# (bench/eval/make_inputs.py): a d12 GPT-2 .bin with random weights, a
# HellaSwag-shaped jsonl tokenized with gpt2 at load, and random GPT-2 ids.
#   1. ratchet eval --task: one forward per batch of 16 rows (4 examples x 4
#      endings); reports its completions' tokens (rows' lengths) and the
#      positions it ran (padding to each batch's longest row included)
#   2. ratchet eval --data over a shard of exactly as many tokens, in rows of
#      the eval's mean row length, 16 rows per forward: plain forward passes
# Prints each one's seconds and tokens/s, and the ratio of the times.
set -euo pipefail
build=${1:-build}
examples=${2:-10042}
threads=${3:-1}
here=$(cd "$(dirname "$0")" && pwd)
ratchet="$build/ratchet"
py=/usr/bin/python3  # numpy
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$py" "$here/make_inputs.py" model "$work/d12.bin"
"$py" "$here/make_inputs.py" task "$work/task.jsonl" --examples "$examples"
B=16
"$ratchet" eval --init-from "$work/d12.bin" --tokenizer gpt2 --task syn="$work/task.jsonl" \
  --batch-size $B --threads "$threads" --json > "$work/eval.json" 2> "$work/eval.log"
read -r tokens mean_len <<<"$("$py" -c "
import json; t = json.load(open('$work/eval.json'))['tasks']['syn']
print(t['tokens'], round(t['tokens'] / (4 * t['n'])))")"
# mean_len windows of mean_len + 1 at stride mean_len: tokens + 1 ids give ~tokens positions
"$py" "$here/make_inputs.py" tokens "$work/toks.bin" --count $((tokens + 1))
"$ratchet" convert "$work/toks.bin" "$work/toks.h5" > /dev/null
"$ratchet" eval --init-from "$work/d12.bin" --data fwd="$work/toks.h5" --seq-len "$mean_len" \
  --batch-size $B --threads "$threads" --json > "$work/fwd.json" 2> "$work/fwd.log"
"$py" - "$work/eval.json" "$work/fwd.json" "$examples" "$B" "$mean_len" <<'PY'
import json, sys
e = json.load(open(sys.argv[1]))["tasks"]["syn"]
f = json.load(open(sys.argv[2]))["data"]["fwd"]
n, B, T = sys.argv[3], sys.argv[4], sys.argv[5]
print(f"d12 (124M, vocab 50257), cpu backend, {B} rows per forward")
print(f"eval --task, {n} examples: {e['tokens']} tokens ({e['positions']} positions with padding) "
      f"in {e['seconds']:.1f} s wall, {e['cpu_seconds']:.1f} s CPU = "
      f"{e['tokens'] / e['cpu_seconds']:.0f} tokens per CPU second")
print(f"plain forwards, T={T}:      {f['tokens']} tokens in {f['seconds']:.1f} s wall, "
      f"{f['cpu_seconds']:.1f} s CPU = {f['tokens'] / f['cpu_seconds']:.0f} tokens per CPU second")
for k in ("seconds", "cpu_seconds"):
    print(f"eval / forwards, {k} per token: "
          f"{(e[k] / e['tokens']) / (f[k] / f['tokens']):.3f}")
PY
