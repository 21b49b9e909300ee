#!/usr/bin/env bash
# Python transformers' AutoTokenizer and AutoModelForCausalLM on a ratchet
# --export-hf directory (issue 29, item 5: "a complete model directory that
# AutoTokenizer and AutoModelForCausalLM both load"). Debian packages no
# Python transformers, so CI checks the tokenizer half with transformers.js
# (tests/integration/test_export_autotokenizer.cpp); this script is for a
# machine that has transformers and torch (the GPU machine):
#
#   tests/gpu/hf_autoload_check.sh RATCHET_EXE [TOKENIZER] [--device cpu|cuda] [--work DIR]
#
# TOKENIZER: a tokenizer.json or a model directory holding one (default: Llama
# 3.1's, /usr/local/share/ratchet/hf-tokenizers/llama3_1 from
# scripts/install-deps.sh). --device: where ratchet trains and re-reads the
# export (default cuda when nvidia-smi lists a GPU, else cpu); transformers
# runs on the CPU in FP32. In order:
#   1. shards the first 300 lines of README.md and docs/ with TOKENIZER (one document);
#   2. trains a tiny Llama 3 steps and exports it (--export-hf, f32);
#   3. ratchet re-reads the export (--init-from) and logs the loss of its
#      first batch, windows 0 and 1 of 64 tokens in order (--no-shuffle);
#   4. python3: AutoTokenizer.from_pretrained(export) encodes the same text to
#      `ratchet tokenize`'s ids (with the tokenizer's BOS in front where it
#      adds one); AutoModelForCausalLM.from_pretrained(export) loads with no
#      missing, unexpected or mismatched keys, and its loss on the first 129
#      of AutoTokenizer's ids is ratchet's to 1e-4 (FP32 on both sides over
#      128 tokens; test_hf_interop measured 2e-8 against float64: a wrong
#      tensor mapping or a BOS on one side only is off by 0.1 or more).
# Prints PASS or FAIL lines; exit 0 all passed, 1 a check failed, 2 bad
# usage, 69 python3 cannot import transformers and torch (nothing checked).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
exe=${1:-}
[ -n "$exe" ] && [ -x "$exe" ] || { echo "usage: $0 RATCHET_EXE [TOKENIZER] [--device D] [--work DIR]" >&2; exit 2; }
shift
tok=/usr/local/share/ratchet/hf-tokenizers/llama3_1
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then tok=$1; shift; fi
dev=cpu
command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q GPU && dev=cuda
work=""
while [ $# -gt 0 ]; do
  case $1 in
    --device) dev=${2:?--device needs cpu or cuda}; shift 2 ;;
    --work) work=${2:?--work needs a directory}; shift 2 ;;
    *) echo "$0: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[ -e "$tok" ] || { echo "$0: tokenizer $tok does not exist (scripts/install-deps.sh fetches Llama 3.1's)" >&2; exit 2; }
if ! python3 -c 'import transformers, torch' >/dev/null 2>&1; then
  echo "NOT-RUN: python3 cannot import transformers and torch"
  exit 69
fi
[ -n "$work" ] || work=$(mktemp -d)
mkdir -p "$work"
fail() { echo "FAIL $1"; exit 1; }
run() { local log=$1; shift; "$@" >"$log" 2>&1; }

cat "$root/README.md" "$root"/docs/*.md | head -n 300 > "$work/text.txt"
run "$work/shard.log" "$exe" shard --tokenizer "$tok" --input "$work/text.txt" --output-dir "$work/data" \
    --val-fraction 0 --no-progress --overwrite || fail "ratchet shard ($work/shard.log)"
run "$work/train.log" "$exe" train --device "$dev" --arch llama --model custom --layers 2 --heads 4 \
    --kv-heads 2 --channels 64 --max-seq-len 128 --seq-len 64 --batch-size 4 --steps 3 --lr 3e-3 \
    --train-data "$work/data/train_*.h5" --quiet --export-hf "$work/export" --export-dtype f32 \
    --overwrite || fail "ratchet train --export-hf ($work/train.log)"
storage=()
[ "$dev" != cpu ] && storage=(--storage f32)
run "$work/loss.log" "$exe" train --device "$dev" "${storage[@]}" --init-from "$work/export" \
    --train-data "$work/data/train_*.h5" --no-shuffle --batch-size 2 --seq-len 64 --steps 1 \
    --quiet --log-jsonl "$work/loss.jsonl" || fail "ratchet re-reading its export ($work/loss.log)"
run "$work/tokenize.json" "$exe" tokenize "$work/export" - --json < "$work/text.txt" ||
  fail "ratchet tokenize ($work/tokenize.json)"

python3 - "$work" <<'PY'
import json, sys
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
w = sys.argv[1]
ok = True
tok = AutoTokenizer.from_pretrained(w + "/export", local_files_only=True)
text = open(w + "/text.txt", encoding="utf-8").read()
ids = tok(text)["input_ids"]
ours = json.load(open(w + "/tokenize.json"))["ids"]
framed = ids[1:] if tok.bos_token_id is not None and ids[:1] == [tok.bos_token_id] else ids
if framed and tok.eos_token_id is not None and framed[-1] == tok.eos_token_id and ours[-1:] != framed[-1:]:
    framed = framed[:-1]
same = framed == ours
ok &= same
print("PASS" if same else "FAIL", f"AutoTokenizer ({type(tok).__name__}) on the export: {len(ids)} ids, "
      + ("ratchet's" if same else f"ratchet has {len(ours)}; first difference at "
         f"{next((i for i, (a, b) in enumerate(zip(framed, ours)) if a != b), min(len(framed), len(ours)))}"))
model, info = AutoModelForCausalLM.from_pretrained(w + "/export", torch_dtype=torch.float32,
                                                   local_files_only=True, output_loading_info=True)
bad = {k: v for k, v in info.items() if k in ("missing_keys", "unexpected_keys", "mismatched_keys") and v}
x = torch.tensor([ids[0:64], ids[64:128]])
y = torch.tensor([ids[1:65], ids[65:129]])
with torch.no_grad():
    logits = model(input_ids=x).logits.float()
loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).item()
theirs = [json.loads(l)["loss"] for l in open(w + "/loss.jsonl") if '"loss"' in l][0]
good = not bad and abs(loss - theirs) <= 1e-4
ok &= good
print("PASS" if good else "FAIL", f"AutoModelForCausalLM ({type(model).__name__}) loss {loss:.6f}, "
      f"ratchet {theirs:.6f}" + (f"; {bad}" if bad else "; no missing or unexpected keys"))
sys.exit(0 if ok else 1)
PY
rc=$?
[ $rc -eq 0 ] || echo "(work files: $work)"
exit $rc
