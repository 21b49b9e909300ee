#!/usr/bin/env bash
# ratchet against PyTorch on one GPU node, in one run, at issue 23's target rows:
#   bench/gpu/compare.sh [--prebuilt DIR | --build-dir DIR] [--rows r1,r2] [--steps N] [--warmup N]
#                        [--python PY] [--peak-tflops X] [--json] [--json-to FILE] [--help]
# Rows (name: model, batch, sequence):
#   d12-b16 d12 16 1024 | d12-b64 d12 64 1024 | d12-t8192 d12 2 8192 (--max-seq-len 8192)
#   d24-b8 d24 8 1024 | d48-b8 d48 8 1024 | smollm-b16 smollm-135m 16 1024
# Each row: ratchet (bench_gpu_train --json, recompute none, `--attention auto`: cuDNN's
# deterministic attention on a GPU) and its peers, run by bench/gpu/pytorch_gpu_step.py in --python:
# for dN a plain PyTorch GPT-2 with ratchet's shapes and step (BF16 autocast, causal
# scaled_dot_product_attention, fused AdamW, TF32), eager and torch.compile; for smollm-135m
# transformers' LlamaForCausalLM, eager and torch.compile (when transformers is importable).
# Printed per row: ms/step, tokens/s, MFU (6N + 12*L*T*C FLOPs per token against --peak-tflops,
# default 989 = H100 SXM dense BF16), peak device memory, and ratchet's speed-up over each peer
# (peer ms / ratchet ms: above 1, ratchet is faster). A run that fails (OOM, transformers missing)
# shows its reason in its row, never a number. --json: one JSON line per (row, implementation).
# --json-to FILE: the table printed and those JSON lines written to FILE, from the same runs.
# Programs: --prebuilt DIR is the .gpu bundle of scripts/gpu-bundle.sh (its env.sh is
# sourced, as scripts/gpu-check.sh does), else --build-dir (default ./build).
# Exit codes: 0 every row ran (a failed peer is reported, not an error); 1 ratchet failed at a
# row; 2 bad usage (checked before the device); 69 no GPU on this node (as gpu-check.sh).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
usage() { sed -n '2,3p' "$0" | sed 's/^# \{0,1\}//'; }
help() { sed -n '2,/^set -uo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; }
bad() { echo "compare.sh: $*" >&2; usage >&2; exit 2; }

all_rows="d12-b16,d12-b64,d12-t8192,d24-b8,d48-b8,smollm-b16"
build=./build; prebuilt=""; rows=$all_rows; steps=10; warmup=3; python=python3; peak=989
json=0; json_to=""; selftest=0
while [ $# -gt 0 ]; do
  case "$1" in
    --prebuilt|--build-dir|--rows|--steps|--warmup|--python|--peak-tflops|--json-to)
      [ $# -ge 2 ] && [ -n "$2" ] || bad "$1 needs a value"
      case "$1" in
        --prebuilt) prebuilt=$2 ;; --build-dir) build=$2 ;; --rows) rows=$2 ;;
        --steps) steps=$2 ;; --warmup) warmup=$2 ;; --python) python=$2 ;; --peak-tflops) peak=$2 ;;
        --json-to) json_to=$2 ;;
      esac
      shift 2 ;;
    --json) json=1; shift ;;
    # Hidden, for CTest: the PyTorch side for real on the CPU at a tiny shape, no ratchet, no GPU.
    --selftest-cpu) selftest=1; shift ;;
    -h|--help) help; exit 0 ;;
    *) bad "unknown flag '$1'" ;;
  esac
done
[[ $steps =~ ^[1-9][0-9]*$ ]] || bad "--steps '$steps' is not a positive integer"
[[ $warmup =~ ^[0-9]+$ ]] || bad "--warmup '$warmup' is not a non-negative integer"
[[ $peak =~ ^[0-9]+(\.[0-9]+)?$ ]] && [[ ! $peak =~ ^0+(\.0+)?$ ]] ||
  bad "--peak-tflops '$peak' is not a positive number"
IFS=, read -r -a row_list <<< "$rows"
[ ${#row_list[@]} -gt 0 ] || bad "--rows is empty"
for r in "${row_list[@]}"; do
  [[ ,$all_rows, == *,$r,* ]] || bad "--rows: unknown row '$r' (rows: $all_rows)"
done
command -v "$python" >/dev/null 2>&1 || bad "--python '$python' is not a program here"
# Checked before any run: the results would be lost at the end of them.
if [ -n "$json_to" ]; then
  jd=$(dirname -- "$json_to")
  [ -d "$jd" ] && [ -w "$jd" ] || bad "--json-to '$json_to': its folder '$jd' does not exist or is not writable"
fi
if [ -n "$prebuilt" ]; then
  [ -d "$prebuilt" ] || bad "--prebuilt '$prebuilt' is not a directory"
  prebuilt=$(cd "$prebuilt" && pwd)
  [ -d "$prebuilt/bin" ] || [ -f "$prebuilt/env.sh" ] ||
    bad "--prebuilt '$prebuilt' has neither bin/ nor env.sh: give the .gpu directory"
fi

# ---- the GPU (as scripts/gpu-check.sh) -------------------------------------------------
if [ $selftest = 0 ]; then
  gpus=0; why="nvidia-smi not found (no NVIDIA driver on this node)"
  if command -v nvidia-smi >/dev/null 2>&1; then
    if list=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>&1); then
      gpus=$(printf '%s\n' "$list" | grep -c .); why="nvidia-smi lists no GPU"
    else
      why="nvidia-smi failed: $list"
    fi
  fi
  case "${CUDA_VISIBLE_DEVICES-unset}" in
    ""|-1|NoDevFiles) gpus=0; why="CUDA_VISIBLE_DEVICES='$CUDA_VISIBLE_DEVICES' hides every GPU" ;;
  esac
  if [ "$gpus" -lt 1 ]; then
    echo "compare.sh: no GPU on this node: $why. Nothing measured; run it on a GPU node. Exit 69." >&2
    exit 69
  fi
fi

# ---- programs --------------------------------------------------------------------------
bench=""
# The peers run with the node's own library path: the bundle's carried Debian libraries are for
# ratchet's programs and must not shadow what the node's PyTorch links.
node_ld=${LD_LIBRARY_PATH-}
if [ $selftest = 0 ]; then
  if [ -n "$prebuilt" ]; then
    # shellcheck disable=SC1091
    source "$here/../../scripts/prebuilt-env.sh"
    use_prebuilt_env "$prebuilt" compare.sh
    bench=$prebuilt/bin/bench_gpu_train
  else
    bench=$build/bench/gpu/bench_gpu_train
  fi
  [ -x "$bench" ] || bad "$bench not found: build it (cmake --build $build --target bench_gpu_train," \
                         "CUDA on) or pass --prebuilt .gpu"
fi
peer=$here/pytorch_gpu_step.py
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
res=$out/results.jsonl; : > "$res"

row_shape() {  # row_shape NAME -> "model B T"
  case "$1" in
    d12-b16) echo "d12 16 1024" ;; d12-b64) echo "d12 64 1024" ;; d12-t8192) echo "d12 2 8192" ;;
    d24-b8) echo "d24 8 1024" ;; d48-b8) echo "d48 8 1024" ;; smollm-b16) echo "smollm-135m 16 1024" ;;
    selftest) echo "d2 2 32" ;; selftest-hf) echo "smollm-135m 1 16" ;;
  esac
}
last_json() { grep '^{' "$1" | tail -1; }
reason() {  # reason STDERR_FILE RC: one line saying why a run gave no figures
  local l
  if grep -qi 'out of memory' "$1"; then echo "OOM"; return; fi
  l=$(grep -v '^\s*$' "$1" | tail -1 | cut -c1-160)
  echo "exit $2${l:+: $l}"
}
emit_fail() {  # emit_fail ROW IMPL REASON
  "$python" -c 'import json,sys; print(json.dumps({"row": sys.argv[1], "impl": sys.argv[2], "error": sys.argv[3]}))' \
    "$1" "$2" "$3" >> "$res"
}
emit_ok() {  # emit_ok ROW JSON: adds the row name to a program's JSON line
  "$python" -c 'import json,sys; d=json.loads(sys.argv[2]); d["row"]=sys.argv[1]; print(json.dumps(d))' \
    "$1" "$2" >> "$res"
}

# The self-test's smollm row runs transformers when it is importable and shows why not otherwise.
[ $selftest = 1 ] && row_list=(selftest selftest-hf)
status=0
for r in "${row_list[@]}"; do
  read -r model B T <<< "$(row_shape "$r")"
  [ $json = 1 ] || echo "compare.sh: row $r ($model B=$B T=$T) ..." >&2
  if [ $selftest = 1 ]; then
    emit_fail "$r" ratchet "not run (--selftest-cpu: the PyTorch side only)"
  else
    maxseq=$(( T > 1024 ? T : 1024 ))
    "$bench" --models "$model" --batch "$B" --seq "$T" --max-seq-len "$maxseq" --recompute none \
      --steps "$steps" --warmup "$warmup" --peak-tflops "$peak" --json > "$out/o" 2> "$out/e"
    rc=$?
    line=$(last_json "$out/o")
    if [ $rc = 0 ] && [ -n "$line" ]; then
      emit_ok "$r" "$("$python" -c 'import json,sys; d=json.loads(sys.argv[1]); d["impl"]="ratchet"; print(json.dumps(d))' "$line")"
    else
      emit_fail "$r" ratchet "$(reason "$out/e" $rc)"; status=1
    fi
  fi
  dev=cuda; [ $selftest = 1 ] && dev=cpu
  for c in "" --compile; do
    LD_LIBRARY_PATH=$node_ld "$python" "$peer" --device "$dev" --model "$model" -B "$B" -T "$T" --steps "$steps" \
      --warmup "$warmup" --peak-tflops "$peak" $c --json > "$out/o" 2> "$out/e"
    rc=$?
    line=$(last_json "$out/o")
    if [ -n "$line" ]; then
      emit_ok "$r" "$line"
    else
      emit_fail "$r" "$([ "$model" = smollm-135m ] && echo transformers || echo pytorch)$([ -n "$c" ] && echo +compile || echo " eager")" \
        "$(reason "$out/e" $rc)"
    fi
  done
done

"$python" - "$res" "$json" "$peak" "$json_to" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
want_json, peak, json_to = sys.argv[2] == "1", float(sys.argv[3]), sys.argv[4]
ratchet = {d["row"]: d for d in rows if d["impl"] == "ratchet" and "error" not in d}
for d in rows:  # ratchet's speed-up over each peer: peer ms / ratchet ms
    r = ratchet.get(d["row"])
    if d["impl"] != "ratchet" and r and "error" not in d:
        d["ratchet_speedup"] = d["step_ms"] / r["step_ms"]
if json_to:
    with open(json_to, "w") as f:
        f.writelines(json.dumps(d) + "\n" for d in rows)
if want_json:
    for d in rows:
        print(json.dumps(d))
    sys.exit(0)
print("MFU against %g TFLOP/s; x = ratchet's speed-up (peer ms / ratchet ms, > 1: ratchet faster)" % peak)
print("%-11s %-20s %10s %11s %6s %10s %7s" % ("row", "impl", "ms/step", "tok/s", "MFU", "peak mem", "x"))
for d in rows:
    if "error" in d:
        print("%-11s %-20s %s" % (d["row"], d["impl"], d["error"]))
        continue
    x = "%.2f" % d["ratchet_speedup"] if "ratchet_speedup" in d else "-"
    notes = "".join("  (%s)" % n for n in d.get("notes", []))
    print("%-11s %-20s %10.1f %11.0f %5.1f%% %6.2f GiB %7s%s" % (
        d["row"], d["impl"], d["step_ms"], d["tokens_per_s"], 100 * d["mfu"],
        d["peak_mem_bytes"] / 2**30, x, notes))
EOF
exit $status
