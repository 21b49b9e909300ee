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
#   5. the 2026 families (issue 38): python3 writes a tiny random model of
#      each (qwen2, qwen3, olmo2, smollm3, mistral, gemma3_text, with every
#      option its family has: q/k/v biases and sliding layers, head_dim !=
#      hidden/heads, full-width q/k norms, NoPE layers, windows shorter than
#      the 64-token sequence, Gemma's soft-caps, scalar and two RoPE bases) with
#      transformers' own classes (save_pretrained, FP32); ratchet imports it
#      (--init-from, one step, --export-hf f32) and re-reads its export; the
#      loss of transformers (eager attention: the reference masks and
#      soft-caps) on the source equals ratchet's first loss on it, and on the
#      export ratchet's loss on the export, each to 1e-4 (as in 4), and the
#      export loads with no missing or unexpected keys. ratchet runs these
#      on the CPU, the families' reference (--family-device cuda: through the
#      CUDA backend's kernels instead, in FP32 storage, so that 1e-4 holds).
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
fam_dev=cpu
families="qwen2 qwen3 olmo2 smollm3 mistral gemma3_text"
while [ $# -gt 0 ]; do
  case $1 in
    --device) dev=${2:?--device needs cpu or cuda}; shift 2 ;;
    --work) work=${2:?--work needs a directory}; shift 2 ;;
    --family-device) fam_dev=${2:?--family-device needs cpu or cuda}; shift 2 ;;
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

# 5. Each family's tiny model, written by transformers, imported and exported by ratchet.
python3 - "$work" $families <<'PY' || fail "python3 writing the families' models"
import json, sys
import torch, transformers
from transformers import AutoConfig, AutoModelForCausalLM
w, fams = sys.argv[1], sys.argv[2:]
vocab = json.load(open(w + "/export/config.json"))["vocab_size"]  # the shards' ids fit it
base = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=vocab, max_position_embeddings=128, rms_norm_eps=1e-6,
            rope_theta=10000.0, tie_word_embeddings=False)
extra = {
    "qwen2": dict(use_sliding_window=True, sliding_window=16, max_window_layers=2),
    "qwen3": dict(head_dim=32, tie_word_embeddings=True),
    "olmo2": dict(),
    "smollm3": dict(no_rope_layers=[1, 0, 1, 0], tie_word_embeddings=True),
    "mistral": dict(sliding_window=16, head_dim=16),
    "gemma3_text": dict(head_dim=32, query_pre_attn_scalar=24, sliding_window=16,
                        layer_types=["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"],
                        sliding_window_pattern=4, attn_logit_softcapping=50.0, final_logit_softcapping=30.0,
                        rope_local_base_freq=500.0, rope_theta=20000.0, tie_word_embeddings=True),
}
made = []
for i, fam in enumerate(fams):
    torch.manual_seed(i)
    try:
        cfg = AutoConfig.for_model(fam, **{**base, **extra[fam]})
    except (ValueError, KeyError) as e:  # an older transformers without the family
        print(f"NOT-RUN {fam}: this transformers ({transformers.__version__}) has no model_type {fam}: {e}")
        continue
    made.append(fam)
    model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.float32)
    with torch.no_grad():  # every weight random, the norms' gains around their neutral value
        for name, p in model.named_parameters():
            p.normal_(0.0, 0.05)
            if "norm" in name and fam != "gemma3_text":
                p.add_(1.0)  # Gemma's (1 + w) norms are neutral at 0
    model.save_pretrained(w + "/src_" + fam, safe_serialization=True)
open(w + "/families.txt", "w").write(" ".join(made))
PY
families=$(cat "$work/families.txt")
fam_storage=()
[ "$fam_dev" != cpu ] && fam_storage=(--storage f32)
for fam in $families; do
  run "$work/src_$fam.log" "$exe" train --device "$fam_dev" "${fam_storage[@]}" --init-from "$work/src_$fam" \
      --train-data "$work/data/train_*.h5" --no-shuffle --batch-size 2 --seq-len 64 --steps 1 --lr 1e-3 \
      --quiet --log-jsonl "$work/src_$fam.jsonl" --export-hf "$work/export_$fam" --export-dtype f32 \
      --overwrite || fail "ratchet importing transformers' $fam ($work/src_$fam.log)"
  run "$work/export_$fam.log" "$exe" train --device "$fam_dev" "${fam_storage[@]}" --init-from "$work/export_$fam" \
      --train-data "$work/data/train_*.h5" --no-shuffle --batch-size 2 --seq-len 64 --steps 1 \
      --quiet --log-jsonl "$work/export_$fam.jsonl" || fail "ratchet re-reading its $fam export ($work/export_$fam.log)"
done

python3 - "$work" $families <<'PY'
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

def ratchet_loss(name):
    return [json.loads(l)["loss"] for l in open(w + "/" + name + ".jsonl") if '"loss"' in l][0]

def hf_loss(path):  # eager attention: transformers' reference masks and soft-capping
    m, info = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32, local_files_only=True,
                                                   output_loading_info=True, attn_implementation="eager")
    with torch.no_grad():
        lg = m(input_ids=x).logits.float()
    l = torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]), y.reshape(-1)).item()
    return m, l, {k: v for k, v in info.items() if k in ("missing_keys", "unexpected_keys", "mismatched_keys") and v}

for fam in sys.argv[2:]:
    _, l_src, _ = hf_loss(w + "/src_" + fam)
    r_src = ratchet_loss("src_" + fam)
    good = abs(l_src - r_src) <= 1e-4
    ok &= good
    print("PASS" if good else "FAIL", f"{fam}: transformers' loss on its own model {l_src:.6f}, ratchet's import {r_src:.6f}")
    m, l_exp, bad = hf_loss(w + "/export_" + fam)
    r_exp = ratchet_loss("export_" + fam)
    mt = json.load(open(w + "/export_" + fam + "/config.json"))["model_type"]
    good = not bad and abs(l_exp - r_exp) <= 1e-4 and mt == fam
    ok &= good
    print("PASS" if good else "FAIL", f"{fam}: AutoModelForCausalLM ({type(m).__name__}, model_type {mt}) on "
          f"ratchet's export: loss {l_exp:.6f}, ratchet {r_exp:.6f}" + (f"; {bad}" if bad else "; no missing or unexpected keys"))
sys.exit(0 if ok else 1)
PY
rc=$?
[ $rc -eq 0 ] || echo "(work files: $work)"
exit $rc
