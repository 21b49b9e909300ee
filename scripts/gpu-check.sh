#!/usr/bin/env bash
# One command that proves the GPU path on a node with one or more GPUs:
#   scripts/gpu-check.sh [--build-dir DIR | --prebuilt DIR] [--report FILE] [--steps N] [--quick]
#                        [--only SECTIONS] [--deadline EPOCH]
# (slurm/gpu-check.sbatch runs it as a job.) In order:
#   1. builds (CUDA kernels for sm_80, sm_90 and this node's GPU; benchmarks on);
#      --prebuilt DIR skips the build and runs programs built elsewhere (below)
#   2. the GPU tests (ctest -L gpu; with --prebuilt every test_* program in DIR
#      directly; a GPU test that skips on a GPU node fails here), the NCCL
#      device tests under `mpirun -np 1`, and on 2 ranks when the node has >= 2 GPUs
#   3. compute-sanitizer memcheck, racecheck, initcheck, synccheck over the GPU
#      kernel tests
#   4. bench/gpu: tokens/s, MFU, peak memory against the accounting, for each
#      recompute policy (d12, B=8, T=1024); long context (d12, B=2, T=8192:
#      peak memory == the accounting `ratchet plan` uses); bench/kernels
#      attention: flash vs cuDNN vs materialized, forward + backward (ms,
#      TFLOP/s), each checked against the CPU backend first
#   5. trains d12 for --steps (300) steps on the King James Bible on the GPU
#      (BF16) and on the CPU backend (FP32), same seed and data, and compares
#      the loss curves (tolerance below)
#   6. training checks with the default attention (train_checks below):
#      the same run twice is bit-identical; SIGUSR1 mid-run and a resume is
#      bit-identical to the straight run; `mpirun -np 1` with --zero 1 equals
#      --zero 0 bit for bit (issue 24's crash); ZeRO-1 state sharded over 2
#      (CPU) ranks resumes on 1 GPU rank; a Llama of the smollm-135m shape
#      trains; when python3 imports transformers and torch, an --export-hf
#      export loads in LlamaForCausalLM with no missing or unexpected keys and
#      its loss on one batch agrees with ratchet's (FP32) to 1e-4; and
#      tests/gpu/hf_autoload_check.sh: AutoTokenizer / AutoModelForCausalLM on
#      an export, and each 2026 family (issue 38) written by transformers,
#      imported and exported by ratchet, loaded back with the same loss
#   7. writes the report (gpu-report.md): one PASS/FAIL line per check
# --quick skips 3-5 (build, tests, NCCL, training checks).
# --only SECTIONS: a comma list of tests (2), sanitizer (3), bench (4), curve (5),
#   train (6): only those run, in this order (bench/gpu/window.sh runs them one
#   at a time, in its own priority order, inside a GPU window).
# --deadline EPOCH: a check that would start after this time (date +%s) is not
#   started: its line says NOT-RUN "window closed", and the report is finished.
#
# --prebuilt DIR: programs built elsewhere, as scripts/gpu-bundle.sh packs
# them (a GPU node often lacks the build's Debian packages). DIR is the bundle's
# folder (.gpu by default: pack.tar.xz and env.sh; env.sh is sourced, which
# unpacks bin/ and lib/ and sets PATH and LD_LIBRARY_PATH), or any directory whose bin/
# holds ratchet and the test and benchmark programs. Nothing is built; a
# program the checks need that DIR lacks is a FAIL line naming it.
#
# Exit codes: 0 every check passed; 1 a check failed (the report says which);
# 2 bad usage; 69 no GPU on this node (EX_UNAVAILABLE from sysexits.h:
# nothing was checked, the report says so). A node "has a GPU" when
# nvidia-smi lists one and CUDA_VISIBLE_DEVICES does not hide them all.
# Aim: under 10 minutes on one H100 (the CPU reference of step 5 dominates).
#
# Loss-curve tolerance (BF16 storage vs the FP32 reference, same seed, data
# order and initial weights): BF16 rounds activations and weights to 8 bits
# of mantissa (0.4% per rounding) and stochastic rounding makes the two runs
# drift apart step by step, so the curves are compared as curves: the mean
# loss over the last 50 steps within 2% of the CPU run's, and no single step
# further than 0.15 nats apart (a diverging or mis-scaled run misses both by
# far; the tests/simt BF16 runs differ by < 0.5% over 8 steps).
#
# For CI only (no GPU needed): --selftest-cpu runs step 6 alone with
# --device cpu on tiny models (GPT-2 and Llama), with the program from
# --build-dir or --prebuilt, so that its comparisons, resume and mpirun logic
# run for real without a GPU (tests/integration/gpu_check_selftest.sh).
# GPU_CHECK_PERTURB=twice,resume,zero (any of them) makes those checks' second
# run differ (another seed), to prove each comparison can fail.
# GPU_CHECK_WORK: where --prebuilt and --selftest-cpu write (default ./gpu-check-work).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD

build=build-gpu-check
prebuilt=""
report=gpu-report.md
steps=300
quick=0
only=""
deadline=0
selftest=0
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build=${2:?--build-dir needs a directory}; shift 2 ;;
    --prebuilt) prebuilt=${2:-}; [ -n "$prebuilt" ] || { echo "gpu-check: --prebuilt needs a directory" >&2; exit 2; }; shift 2 ;;
    --report) report=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    --only) only=${2:?--only needs a list}; shift 2 ;;
    --deadline) deadline=${2:?--deadline needs a time (date +%s)}; shift 2 ;;
    --selftest-cpu) selftest=1; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "gpu-check: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case ",$only," in *[!a-z,]*) echo "gpu-check: --only '$only': a comma list of tests, sanitizer, bench, curve, train" >&2; exit 2 ;; esac
for s in ${only//,/ }; do
  case $s in tests|sanitizer|bench|curve|train) ;; *) echo "gpu-check: --only: unknown section '$s' (tests, sanitizer, bench, curve, train)" >&2; exit 2 ;; esac
done
case "$deadline" in *[!0-9]*) echo "gpu-check: --deadline '$deadline' is not a time in seconds since 1970 (date +%s)" >&2; exit 2 ;; esac
case "$steps" in ''|*[!0-9]*) echo "gpu-check: --steps '$steps' is not a count" >&2; exit 2 ;; esac
[ "$steps" -ge 60 ] || { echo "gpu-check: --steps must be at least 60 (the last 50 are compared)" >&2; exit 2; }
if [ -n "$prebuilt" ]; then
  [ -d "$prebuilt" ] || { echo "gpu-check: --prebuilt '$prebuilt' is not a directory" >&2; exit 2; }
  prebuilt=$(cd "$prebuilt" && pwd)
  if [ ! -d "$prebuilt/bin" ] && [ ! -f "$prebuilt/env.sh" ]; then
    echo "gpu-check: --prebuilt '$prebuilt' has neither bin/ nor env.sh: give the .gpu directory" \
         "that scripts/gpu-bundle.sh writes, or a directory with bin/ratchet" >&2
    exit 2
  fi
  work=${GPU_CHECK_WORK:-$root/gpu-check-work}
else
  work=$build/gpu-check
fi
mkdir -p "$work"
work=$(cd "$work" && pwd)

# ---- programs: from the build, or from --prebuilt ---------------------------------
if [ -n "$prebuilt" ]; then
  # shellcheck disable=SC1091
  source "$root/scripts/prebuilt-env.sh"
  use_prebuilt_env "$prebuilt" gpu-check
  [ -x "$prebuilt/bin/ratchet" ] || { echo "gpu-check: $prebuilt/bin/ratchet not found (was it packed?)" >&2; exit 2; }
fi
prog() {  # prog NAME: the path of a built program (empty when there is none)
  local p
  if [ -n "$prebuilt" ]; then
    p=$prebuilt/bin/$1
  elif [ "$1" = ratchet ]; then
    p=$build/ratchet
  else
    p=$(find "$build/tests" "$build/bench" -type f -name "$1" -perm -u+x 2>/dev/null | head -1)
  fi
  [ -n "$p" ] && [ -x "$p" ] && echo "$p"
}
# mpirun as root needs these; more ranks than slots is fine for a check.
if [ "$(id -u)" = 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export OMPI_MCA_rmaps_base_oversubscribe=1
mpirun_cmd=$(command -v mpirun || true)

# ---- the GPUs this node offers ---------------------------------------------------
gpus=0
list=""
why="nvidia-smi not found (no NVIDIA driver on this node)"
if [ $selftest = 1 ]; then
  why="--selftest-cpu: the training checks on the CPU backend"
elif command -v nvidia-smi >/dev/null 2>&1; then
  if list=$(nvidia-smi --query-gpu=index,name,compute_cap,memory.total --format=csv,noheader 2>&1); then
    gpus=$(printf '%s\n' "$list" | grep -c .)
    why="nvidia-smi lists no GPU"
  else
    why="nvidia-smi failed: $list"
  fi
fi
if [ "${CUDA_VISIBLE_DEVICES+set}" = set ] && [ $selftest = 0 ]; then
  case "$CUDA_VISIBLE_DEVICES" in
    ""|-1|NoDevFiles) gpus=0; why="CUDA_VISIBLE_DEVICES='$CUDA_VISIBLE_DEVICES' hides every GPU" ;;
    *) n=$(printf '%s' "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | grep -c .)
       [ "$gpus" -gt "$n" ] && gpus=$n ;;
  esac
fi
if [ "$gpus" -lt 1 ] && [ $selftest = 0 ]; then
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
  echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $gpus GPU(s)$([ -n "$prebuilt" ] && echo ", programs from $prebuilt"):"
  printf '%s\n' "$list" | sed 's/^/    /'
  echo
  echo "| check | result | detail |"
  echo "| --- | --- | --- |"
} > "$report"
line() {  # line NAME PASS|FAIL|NOT-RUN DETAIL (only PASS and NOT-RUN leave the exit code 0)
  case "$2" in PASS|NOT-RUN) ;; *) failed=1 ;; esac
  printf '| %s | %s | %s |\n' "$1" "$2" "$3" >> "$report"
  printf 'gpu-check: %-34s %s  %s\n' "$1" "$2" "$3"
}
run() {  # run LOG CMD...: output to LOG, status returned
  local log=$1; shift
  echo "gpu-check: \$ $*" >&2
  "$@" > "$log" 2>&1
}
t_start=$(date +%s)
want() {  # want SECTION: whether --only (or its absence) runs SECTION
  [ -z "$only" ] || case ",$only," in *",$1,"*) true ;; *) false ;; esac
}
in_time() {  # in_time NAME: false (and a NOT-RUN line) once --deadline has passed
  if [ "$deadline" -gt 0 ] && [ "$(date +%s)" -ge "$deadline" ]; then
    line "$1" NOT-RUN "window closed (--deadline)"; return 1
  fi
}
finish() {
  echo >> "$report"
  echo "Took $(( $(date +%s) - t_start )) s. Logs: $work" >> "$report"
  echo "gpu-check: report in $report ($([ $failed = 0 ] && echo 'all passed' || echo 'FAILED'))"
  exit $failed
}

# ---- 6. training checks (run after 5 on a GPU; alone with --selftest-cpu) -------------------
# Text to shard: the King James Bible when `bible` is there, else this checkout's
# own text (README and sources), which every node that runs this has.
make_shards() {  # make_shards DIR: byte-level train/val shards in DIR
  local d=$1 exe
  exe=$(prog ratchet)
  compgen -G "$d/train_*.h5" > /dev/null && return 0
  mkdir -p "$d"
  if command -v bible >/dev/null 2>&1; then
    bible -f "Gen1:1-Rev22:21" > "$d/text.txt"
  else
    cat "$root"/README.md "$root"/docs/*.md "$root"/src/*/*.cpp "$root"/src/*/*.h | head -c 4000000 > "$d/text.txt"
  fi
  run "$d/shard.log" "$exe" shard --tokenizer byte --input "$d/text.txt" --output-dir "$d" \
      --val-fraction 0.02
}
same_files() { [ -s "$1" ] && [ -s "$2" ] && cmp -s "$1" "$2"; }
train_checks() {  # train_checks DEVICE
  local dev=$1 exe data d rc gpt llama steps stop
  exe=$(prog ratchet)
  data=$work/train-checks-data
  d=$work/train-checks
  rm -rf "$d"; mkdir -p "$d"
  if [ -z "$exe" ]; then line "training checks" FAIL "no ratchet program"; return; fi
  if ! make_shards "$data"; then line "training checks" FAIL "could not shard text ($data/shard.log)"; return; fi
  if [ "$dev" = cpu ]; then  # tiny models: the logic, not the speed
    gpt=(--model custom --layers 2 --heads 2 --channels 32 --max-seq-len 64 --seq-len 32 --batch-size 4 --threads 2)
    llama=(--model custom --arch llama --layers 2 --heads 4 --kv-heads 2 --channels 32 --ffn-hidden 48
           --max-seq-len 64 --seq-len 32 --batch-size 4 --threads 2)
    steps=6; stop=3
  else
    gpt=(--model d12 --seq-len 1024 --batch-size 8)
    llama=(--model smollm-135m --seq-len 1024 --batch-size 8)
    steps=20; stop=10
  fi
  local base=(train --device "$dev" --train-data "$data/train_*.h5" --lr 6e-4 --warmup-steps 2
              --quiet)
  seed() { case ",${GPU_CHECK_PERTURB:-}," in *",$1,"*) echo 4321 ;; *) echo 1234 ;; esac; }

  # The same run twice: bit-identical weights (the determinism every resume relies on).
  in_time "same run twice" || return
  run "$d/twice-a.log" "$exe" "${base[@]}" "${gpt[@]}" --seed 1234 --steps $steps --export "$d/a.bin"
  local ra=$?
  run "$d/twice-b.log" "$exe" "${base[@]}" "${gpt[@]}" --seed "$(seed twice)" --steps $steps \
      --export "$d/b.bin"
  rc=$?
  if [ $ra -ne 0 ] || [ $rc -ne 0 ]; then
    line "same run twice" FAIL "exit $ra/$rc ($d/twice-*.log)"
  elif same_files "$d/a.bin" "$d/b.bin"; then
    line "same run twice" PASS "$steps steps, weights bit-identical ($(grep -m1 -o 'attention [a-z]*' "$d/twice-a.log" || echo 'default attention'))"
  else
    line "same run twice" FAIL "weights differ after $steps steps: not deterministic"
  fi

  # SIGUSR1 at step $stop (saves, exit 75), resume: the straight run's weights.
  in_time "SIGUSR1 + resume" || return
  RATCHET_FAULT=USR1@step-$stop run "$d/stop.log" "$exe" "${base[@]}" "${gpt[@]}" \
      --seed "$(seed resume)" --steps $steps --ckpt-dir "$d/ck"
  rc=$?
  if [ $rc -ne 75 ]; then
    line "SIGUSR1 + resume" FAIL "the stopped run exited $rc, not 75 ($d/stop.log)"
  elif ! run "$d/resume.log" "$exe" "${base[@]}" "${gpt[@]}" --seed "$(seed resume)" --steps $steps \
          --ckpt-dir "$d/ck" --export "$d/resumed.bin"; then
    line "SIGUSR1 + resume" FAIL "the resumed run failed ($d/resume.log)"
  elif ! grep -q "continuing from step $stop" "$d/resume.log"; then
    line "SIGUSR1 + resume" FAIL "did not resume from step $stop ($d/resume.log)"
  elif same_files "$d/a.bin" "$d/resumed.bin"; then
    line "SIGUSR1 + resume" PASS "stopped at $stop of $steps, resumed: bit-identical to the straight run"
  else
    line "SIGUSR1 + resume" FAIL "resumed weights differ from the straight run's"
  fi

  # ZeRO-1, 2 and 3 on one rank under mpirun == --zero 0, bit for bit (issue 24:
  # a host-side segfault at stage 1; stages 2 and 3 keep their buckets, gathers
  # and streams even on one rank, so each is its own check).
  in_time "mpirun -np 1 --zero 1" || return
  if [ -z "$mpirun_cmd" ]; then
    line "mpirun -np 1 --zero 1" FAIL "mpirun not found: ZeRO unchecked (install Open MPI)"
  else
    run "$d/zero0.log" "$mpirun_cmd" -np 1 --bind-to none "$exe" "${base[@]}" "${gpt[@]}" \
        --seed 1234 --steps $stop --export "$d/z0.bin"
    ra=$?
    local z
    for z in 1 2 3; do
      in_time "mpirun -np 1 --zero $z" || return
      run "$d/zero$z.log" "$mpirun_cmd" -np 1 --bind-to none "$exe" "${base[@]}" "${gpt[@]}" \
          --seed "$(seed zero)" --steps $stop --zero $z --export "$d/z$z.bin"
      rc=$?
      if [ $ra -ne 0 ] || [ $rc -ne 0 ]; then
        line "mpirun -np 1 --zero $z" FAIL "exit $ra (--zero 0) / $rc (--zero $z) ($d/zero0.log, zero$z.log)"
      elif same_files "$d/z0.bin" "$d/z$z.bin"; then
        line "mpirun -np 1 --zero $z" PASS "$stop steps, bit-identical to --zero 0"
      else
        line "mpirun -np 1 --zero $z" FAIL "--zero $z weights differ from --zero 0"
      fi
    done
  fi

  # ZeRO-1 state sharded over 2 ranks resumes on 1 rank of this device (another
  # world size, the state re-sharded). The 2-rank writer runs on the CPU with a
  # tiny model, so one GPU suffices.
  if [ -n "$mpirun_cmd" ] && ! "$exe" --version | grep -q "MPI yes"; then
    # (a sanitizer build, for one: -DRATCHET_MPI=OFF) 2 ranks cannot start
    line "ZeRO-1 resume 2 -> 1 rank" NOT-RUN "$exe was built without MPI (ratchet --version)"
  elif [ -n "$mpirun_cmd" ]; then
    local tiny=(--model custom --layers 2 --heads 2 --channels 32 --max-seq-len 64 --seq-len 32
                --total-batch-tokens 128 --threads 1 --seed 1234 --log-jsonl "$d/ws.jsonl")
    local cpu_base=(train --device cpu --train-data "$data/train_*.h5" --lr 6e-4 --warmup-steps 2 --quiet)
    if ! run "$d/ws-2.log" "$mpirun_cmd" -np 2 --bind-to none "$exe" "${cpu_base[@]}" "${tiny[@]}" \
           --batch-size 2 --steps 3 --zero 1 --ckpt-dir "$d/ws-ck"; then
      line "ZeRO-1 resume 2 -> 1 rank" FAIL "the 2-rank CPU writer failed ($d/ws-2.log)"
    elif ! run "$d/ws-1.log" "$mpirun_cmd" -np 1 --bind-to none "$exe" "${base[@]}" "${tiny[@]}" \
           --batch-size 2 --steps 6 --zero 1 --ckpt-dir "$d/ws-ck"; then
      line "ZeRO-1 resume 2 -> 1 rank" FAIL "the 1-rank $dev resume failed ($d/ws-1.log)"
    elif grep -q "optimizer state in 2 shard(s), now sharded over 1 rank(s)" "$d/ws-1.log"; then
      line "ZeRO-1 resume 2 -> 1 rank" PASS "2 CPU ranks -> 1 $dev rank, from step 3 to 6"
    else
      line "ZeRO-1 resume 2 -> 1 rank" FAIL "no re-sharded resume in $d/ws-1.log"
    fi
  fi

  # A Llama trains: finite losses that go down.
  in_time "llama trains" || return
  if run "$d/llama.log" "$exe" "${base[@]}" "${llama[@]}" --seed 1234 --steps $steps \
       --log-jsonl "$d/llama.jsonl"; then
    local v
    v=$(python3 - "$d/llama.jsonl" <<'PY'
import json, math, sys
l = [json.loads(x)["loss"] for x in open(sys.argv[1]) if '"loss"' in x and "val_loss" not in x]
ok = len(l) > 1 and all(math.isfinite(x) for x in l) and l[-1] < l[0]
print("PASS" if ok else "FAIL", f"{len(l)} steps, loss {l[0]:.3f} -> {l[-1]:.3f}" if l else "no losses")
PY
)
    line "llama trains" "${v%% *}" "${llama[1]} ${v#* }"
  else
    line "llama trains" FAIL "exit $? ($d/llama.log)"
  fi

  # --export-hf in transformers: no missing or unexpected keys, the same loss.
  in_time "export-hf in transformers" || return
  if ! python3 -c 'import transformers, torch' >/dev/null 2>&1; then
    line "export-hf in transformers" NOT-RUN "python3 cannot import transformers and torch"
  else
    hf_check "$dev" "$exe" "$d" "${llama[@]}"
  fi

  # Every family (issue 38) through transformers and back: tests/gpu/hf_autoload_check.sh
  # (its tokenizer and AutoModelForCausalLM checks, then each family's tiny model).
  in_time "hf families in transformers" || return
  # GPU_CHECK_TOKENIZER: another copy (bench/gpu/window.sh carries one in its bundle: a GPU
  # node has no scripts/install-deps.sh tokenizers).
  local tok=${GPU_CHECK_TOKENIZER:-/usr/local/share/ratchet/hf-tokenizers/llama3_1}
  if ! python3 -c 'import transformers, torch' >/dev/null 2>&1; then
    line "hf families in transformers" NOT-RUN "python3 cannot import transformers and torch"
  elif [ ! -e "$tok" ]; then
    line "hf families in transformers" NOT-RUN "no tokenizer at $tok (scripts/install-deps.sh fetches it)"
  elif run "$d/hf_autoload.log" "$root/tests/gpu/hf_autoload_check.sh" "$exe" "$tok" --device "$dev" \
         --work "$d/hf_autoload"; then
    line "hf families in transformers" PASS "$(grep -c '^PASS' "$d/hf_autoload.log") checks, $(grep -c '^NOT-RUN' \
      "$d/hf_autoload.log") families this transformers lacks ($d/hf_autoload.log)"
  else
    line "hf families in transformers" FAIL "$(grep -m1 '^FAIL' "$d/hf_autoload.log") ($d/hf_autoload.log)"
  fi
}

# hf_check DEV EXE DIR LLAMA-FLAGS...: export a trained Llama, read it back
# with transformers, compare the loss on one batch of our own tokens (FP32 on
# both sides: the export is f32 and ratchet re-reads it with --storage f32).
hf_check() {
  local dev=$1 exe=$2 d=$3; shift 3
  local h=$d/hf
  mkdir -p "$h/data"
  if ! run "$h/train.log" "$exe" train --device "$dev" --train-data "$work/train-checks-data/train_*.h5" \
         --steps 2 --quiet "$@" --export-hf "$h/export" --export-dtype f32 --overwrite; then
    line "export-hf in transformers" FAIL "the export run failed ($h/train.log)"; return
  fi
  python3 - "$h" <<'PY'
import json, struct, sys
h = sys.argv[1]
s, toks = 12345, []
for _ in range(2 * 64 + 1):  # 2 rows of 64 tokens, and the last target
    s = (s * 1664525 + 1013904223) % 2**32
    toks.append((s >> 16) % 256)
open(h + "/tokens.json", "w").write(json.dumps(toks))
with open(h + "/tokens.bin", "wb") as f:  # llm.c token file: 256-int header, uint16 tokens
    f.write(struct.pack("<256i", 20240520, 1, len(toks), *([0] * 253)))
    f.write(struct.pack("<%dH" % len(toks), *toks))
PY
  if ! run "$h/convert.log" "$exe" convert "$h/tokens.bin" "$h/data/train_000000.h5" \
         --tokenizer byte --vocab-size 257 --eot 256; then
    line "export-hf in transformers" FAIL "ratchet convert failed ($h/convert.log)"; return
  fi
  local storage=()
  [ "$dev" != cpu ] && storage=(--storage f32)
  if ! run "$h/loss.log" "$exe" train --device "$dev" "${storage[@]}" --init-from "$h/export" \
         --train-data "$h/data/train_*.h5" --no-shuffle --batch-size 2 --seq-len 64 --steps 1 \
         --quiet --log-jsonl "$h/loss.jsonl"; then
    line "export-hf in transformers" FAIL "ratchet could not read its export back ($h/loss.log)"; return
  fi
  local v
  v=$(python3 - "$h" <<'PY' 2>"$h/transformers.log"
import json, sys
import torch
from transformers import LlamaForCausalLM
h = sys.argv[1]
model, info = LlamaForCausalLM.from_pretrained(h + "/export", torch_dtype=torch.float32,
                                               output_loading_info=True)
bad = {k: v for k, v in info.items() if k in ("missing_keys", "unexpected_keys", "mismatched_keys") and v}
toks = json.load(open(h + "/tokens.json"))
x = torch.tensor([toks[0:64], toks[64:128]])
y = torch.tensor([toks[1:65], toks[65:129]])
with torch.no_grad():
    logits = model(input_ids=x).logits.float()
loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).item()
ours = [json.loads(l)["loss"] for l in open(h + "/loss.jsonl") if '"loss"' in l][0]
# 1e-4: FP32 on both sides over 128 tokens (tests/integration/test_hf_interop.cpp
# measured 2e-8 against float64); a wrong tensor mapping is off by 0.1 or more.
ok = not bad and abs(loss - ours) <= 1e-4
print("PASS" if ok else "FAIL", f"transformers loss {loss:.6f}, ratchet {ours:.6f}" +
      (f"; {bad}" if bad else "; no missing or unexpected keys"))
PY
)
  [ -n "$v" ] || v="FAIL python failed ($h/transformers.log)"
  line "export-hf in transformers" "${v%% *}" "${v#* }"
}

if [ $selftest = 1 ]; then
  train_checks cpu
  finish
fi

# ---- 1. build ---------------------------------------------------------------------
if [ -n "$prebuilt" ]; then
  line build NOT-RUN "--prebuilt: programs from $prebuilt ($(ls "$prebuilt/bin" | wc -l) in bin/)"
else
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
fi

# ---- 2. GPU tests, NCCL under mpirun -----------------------------------------------
if want tests && in_time "GPU tests"; then
# The *_np2 tests need 2 GPUs: run apart, only where the node has them.
if [ -n "$prebuilt" ]; then
  bad=""; ran=""
  # Every GPU test program (tests/gpu/test_*.cpp, as scripts/gpu-bundle.sh packs them).
  gpu_tests=$(for f in "$root"/tests/gpu/test_*.cpp; do f=${f##*/}; echo "${f%.cpp}"; done)
  for t in $gpu_tests; do
    exe=$(prog "$t")
    if [ -z "$exe" ]; then bad="$bad $t(missing)"; continue; fi
    run "$work/$t.log" "$exe"; rc=$?
    ran="$ran $t"
    if [ $rc -ne 0 ]; then bad="$bad $t(exit $rc)"
    elif grep -q '\[  SKIPPED \]' "$work/$t.log"; then bad="$bad $t(skipped $(grep -c '\[  SKIPPED \]' "$work/$t.log"))"; fi
  done
  if [ -z "$bad" ]; then line "GPU tests" PASS "$ran"; else line "GPU tests" FAIL "$bad ($work/test_*.log)"; fi
else
  run "$work/ctest-gpu.log" ctest --test-dir "$build" -L gpu -E "_np2$" --output-on-failure
  rc=$?
  skipped=$(grep -c "Skipped" "$work/ctest-gpu.log")
  summary=$(grep -E "tests passed|tests failed" "$work/ctest-gpu.log" | tail -1)
  if [ $rc -eq 0 ] && [ "$skipped" -eq 0 ]; then
    line "ctest -L gpu" PASS "$summary"
  else
    line "ctest -L gpu" FAIL "$summary; $skipped skipped on a GPU node ($work/ctest-gpu.log)"
  fi
fi
nccl=$(prog test_mpi_nccl)
if [ -z "$mpirun_cmd" ]; then
  line "NCCL under mpirun" FAIL "mpirun not found: the NCCL device tests were not run"
elif [ -z "$nccl" ]; then
  line "NCCL under mpirun" FAIL "test_mpi_nccl not built (needs MPI and NCCL at build time)"
else
  for np in 1 2; do
    if [ $np = 2 ] && [ "$gpus" -lt 2 ]; then
      line "NCCL on 2 ranks" NOT-RUN "1 GPU (needs 2)"; continue
    fi
    # Two tests cannot run at one rank on a GPU node, and skip by design: the
    # no-device error (it needs a node without a GPU: CI runs it) and the stall
    # between two ranks (run at -np 2). Left out by name, any other skip fails.
    local_filter=()
    [ $np = 1 ] && local_filter=(--gtest_filter=-NcclBootstrap.NoDeviceIsAClearError:NcclDevice.AStallAtWaitAllCountsAsCollectiveWait)
    run "$work/nccl-np$np.log" "$mpirun_cmd" -np $np --bind-to none "$nccl" ${local_filter[@]+"${local_filter[@]}"}
    rc=$?
    if [ $rc -eq 0 ] && ! grep -q 'SKIPPED' "$work/nccl-np$np.log"; then
      line "NCCL on $np rank(s)" PASS "NcclBootstrap, NcclDevice under mpirun -np $np"
    else
      line "NCCL on $np rank(s)" FAIL "exit $rc or a skip ($work/nccl-np$np.log)"
    fi
  done
fi
if [ -z "$prebuilt" ] && [ "$gpus" -ge 2 ]; then
  run "$work/ctest-np2.log" ctest --test-dir "$build" -L gpu -R "_np2$" --output-on-failure
  rc=$?
  if [ $rc -eq 0 ] && ! grep -q "SKIPPED\|Skipped" "$work/ctest-np2.log"; then
    line "GPU tests on 2 ranks" PASS "ctest -L gpu -R _np2"
  else
    line "GPU tests on 2 ranks" FAIL "see $work/ctest-np2.log"
  fi
fi
fi  # tests

if [ $quick = 1 ]; then
  echo >> "$report"; echo "--quick: sanitizer, benchmarks, loss curves and training checks not run." >> "$report"
  finish
fi

# ---- 3. compute-sanitizer -----------------------------------------------------------
if want sanitizer && in_time "compute-sanitizer"; then
san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck initcheck synccheck; do
  bad=""
  for t in test_gpu_kernels test_cuda_backend_gpu; do
    exe=$(prog "$t")
    [ -n "$exe" ] || { bad="$bad $t(missing)"; continue; }
    run "$work/sanitizer-$tool-$t.log" "$san" --tool "$tool" --error-exitcode 3 \
        --leak-check no "$exe" || bad="$bad $t"
  done
  if [ -z "$bad" ]; then
    line "compute-sanitizer $tool" PASS "test_gpu_kernels, test_cuda_backend_gpu"
  else
    line "compute-sanitizer $tool" FAIL "errors in:$bad ($work/sanitizer-$tool-*.log)"
  fi
done
fi  # sanitizer

# ---- 4. bench/gpu -------------------------------------------------------------------
if want bench && in_time "bench/gpu"; then
bench=$(prog bench_gpu_train)
if [ -z "$bench" ]; then
  line "bench/gpu" FAIL "bench_gpu_train not built"
else
  if run "$work/bench.log" "$bench" --models d12 --batch 8 --seq 1024 --steps 10 --warmup 3 \
       --recompute none,gelu,gelu+ln,blocks; then
    line "bench/gpu d12 B=8 T=1024" PASS "$(grep -m1 -i 'tok/s' "$work/bench.log" | tr -s ' ' | cut -c1-120)"
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
  # Long context: d12 at B=2, T=8192 trains, and its peak device memory equals
  # the accounting (model/memory.h, what `ratchet plan` prints) byte for byte:
  # bench_gpu_train exits 1 when they differ.
  if run "$work/bench-8k.log" "$bench" --models d12 --batch 2 --seq 8192 --max-seq-len 8192 \
       --steps 3 --warmup 1 --recompute none; then
    line "d12 B=2 T=8192 memory == plan" PASS "$(grep -m1 'tok/s' "$work/bench-8k.log" | tr -s ' ' | cut -c1-140)"
    { echo; echo '```'; cat "$work/bench-8k.log"; echo '```'; } >> "$work/bench-block.md"
  else
    line "d12 B=2 T=8192 memory == plan" FAIL "exit $? (peak != accounting, or it failed): $work/bench-8k.log"
  fi
fi
attn=$work/attention.log
abin=$(prog bench_attention_gpu)
if [ -z "$abin" ]; then
  line "bench/kernels attention" FAIL "bench_attention_gpu not built"
else
  run "$attn" "$abin" --T 1024,4096
  rc=$?
  if [ $rc -eq 0 ]; then
    line "bench/kernels attention" PASS "$(grep -E '^cudnn +1024' "$attn" | tr -s ' ' | cut -c1-100)"
    { echo; echo '```'; cat "$attn"; echo '```'; } >> "$work/bench-block.md"
  else
    line "bench/kernels attention" FAIL "exit $rc (an implementation was wrong or failed): $attn"
  fi
fi
fi  # bench

# ---- 5. d12 loss curve: GPU (BF16) vs CPU (FP32) ----------------------------------------
if want curve && in_time "d12 loss curve"; then
data=$work/kjv
exe=$(prog ratchet)
if make_shards "$data"; then
  common=(train --model d12 --train-data "$data/train_*.h5" --batch-size 4 --seq-len 256
          --steps "$steps" --lr 6e-4 --warmup-steps 20 --seed 1234 --quiet)
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
else
  line "d12 loss curve" FAIL "could not shard the text ($data/shard.log)"
fi
fi  # curve

# ---- 6. training checks on the GPU -------------------------------------------------------
if want train; then train_checks cuda; fi

[ -f "$work/bench-block.md" ] && { echo; echo "## bench/gpu"; cat "$work/bench-block.md"; } >> "$report"
finish
