#!/usr/bin/env bash
# bench/gpu/compare.sh without a GPU: exit 69 (every GPU hidden, so also on GPU
# nodes), bad flags exit 2 naming the flag before the device is looked for, and
# its PyTorch side (bench/gpu/pytorch_gpu_step.py) run for real on the CPU at a
# tiny shape with Debian's /usr/bin/python3 (torch 1.13: no SDPA, no
# torch.compile, so both fall back and say so). A peer that fails shows its
# reason, never a number. Exit 77 (CTest skip) only when /usr/bin/python3 has no torch.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cmp=$root/bench/gpu/compare.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
check() { if ! eval "$2"; then echo "FAIL: $1" >&2; fails=1; fi; }

CUDA_VISIBLE_DEVICES= "$cmp" --build-dir "$tmp/none" > "$tmp/out" 2>&1
rc=$?
check "no GPU exits 69 (got $rc)" '[ $rc = 69 ]'
check "it says there is no GPU" 'grep -q "no GPU on this node" "$tmp/out"'

for bad in "--bogus" "--steps 0" "--warmup x" "--rows d12-b16,d13" "--peak-tflops 0" \
           "--prebuilt $tmp/missing" "--python /nonexistent/python3" "--steps"; do
  CUDA_VISIBLE_DEVICES= "$cmp" $bad > "$tmp/out" 2>&1
  rc=$?
  flag=${bad%% *}
  check "'$bad' exits 2 before the device check (got $rc)" '[ $rc = 2 ]'
  check "'$bad' names $flag" 'grep -q -- "$flag" "$tmp/out"'
done
"$cmp" --help > "$tmp/out" 2>&1
check "--help exits 0 and lists the rows" 'grep -q smollm-b16 "$tmp/out"'

# The GPU path's plumbing with stand-ins: a fake nvidia-smi, a --prebuilt bundle whose
# bench_gpu_train logs its flags and prints a JSON line (refusing smollm-135m as a real
# failure would), and a peer that prints a fixed JSON line. Checks the flags ratchet gets,
# the speed-up column (peer 50 ms / ratchet 40 ms = 1.25) and a failed ratchet row.
mkdir -p "$tmp/fakebin" "$tmp/gpu/bin"
printf '#!/bin/sh\necho "NVIDIA H100 80GB HBM3"\n' > "$tmp/fakebin/nvidia-smi"
cat > "$tmp/gpu/bin/bench_gpu_train" <<SH
#!/bin/sh
echo "\$*" >> "$tmp/args"
case "\$*" in *smollm-135m*) echo "bench_gpu_train: cudnn refuses this shape" >&2; exit 2 ;; esac
echo '{"model":"d12","B":16,"T":1024,"step_ms":40,"tokens_per_s":409600,"mfu":0.3,"peak_mem_bytes":1073741824}'
SH
cat > "$tmp/fakepy" <<'SH'
#!/bin/sh
case "$1" in *pytorch_gpu_step.py)
  echo '{"impl":"pytorch eager","step_ms":50,"tokens_per_s":327680,"mfu":0.24,"peak_mem_bytes":2147483648,"notes":[]}'
  exit 0 ;; esac
exec python3 "$@"
SH
chmod +x "$tmp/fakebin/nvidia-smi" "$tmp/gpu/bin/bench_gpu_train" "$tmp/fakepy"
env -u CUDA_VISIBLE_DEVICES PATH="$tmp/fakebin:$PATH" "$cmp" --prebuilt "$tmp/gpu" --python "$tmp/fakepy" \
  --rows d12-b16,d12-t8192,smollm-b16 --steps 2 --warmup 1 > "$tmp/t" 2> "$tmp/e"
rc=$?
check "a failed ratchet row exits 1 (got $rc)" '[ $rc = 1 ]'
check "ratchet gets the row's shape" 'grep -q -- "--models d12 --batch 16 --seq 1024 --max-seq-len 1024 --recompute none --steps 2 --warmup 1 --peak-tflops 989 --json" "$tmp/args"'
check "the long row gets --max-seq-len 8192" 'grep -q -- "--batch 2 --seq 8192 --max-seq-len 8192" "$tmp/args"'
check "speed-up over the peer is 1.25" 'grep -q "^d12-b16 .*pytorch eager .* 1\.25$" "$tmp/t"'
check "ratchet's failure shows its reason" 'grep -q "^smollm-b16 .*ratchet .*exit 2: bench_gpu_train: cudnn refuses this shape" "$tmp/t"'
check "no speed-up against a failed ratchet" '! grep -q "^smollm-b16 .*pytorch eager .*1\.25" "$tmp/t"'

[ $fails = 0 ] || exit 1
if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  echo "SKIP: /usr/bin/python3 has no torch; the PyTorch side was not run" >&2
  exit 77
fi

"$cmp" --selftest-cpu --python /usr/bin/python3 --steps 1 --warmup 1 --json > "$tmp/j" 2> "$tmp/e"
rc=$?
check "selftest exits 0 (got $rc; $(tail -2 "$tmp/e"))" '[ $rc = 0 ]'
/usr/bin/python3 - "$tmp/j" <<'PY' || fails=1
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
impls = {(d["row"], d["impl"]): d for d in rows}
ok = True
def need(c, what):
    global ok
    if not c:
        print("FAIL:", what, file=sys.stderr); ok = False
need(("selftest", "ratchet") in impls and "error" in impls[("selftest", "ratchet")], "ratchet row says not run")
for impl in ("pytorch eager", "pytorch+compile"):
    d = impls.get(("selftest", impl), {})
    need("error" not in d and d.get("step_ms", 0) > 0 and d.get("tokens_per_s", 0) > 0, impl + " measured")
    # Random init over uniform random tokens: loss near ln(50257) = 10.8; a wrong model is far off.
    need(9.0 < d.get("loss", 0) < 12.5, impl + " loss near ln(vocab): %s" % d.get("loss"))
    need(d.get("flops_per_token", 0) > 0 and d.get("peak_mem_bytes", 0) > 0, impl + " FLOPs and memory")
    if not hasattr(__import__("torch").nn.functional, "scaled_dot_product_attention"):
        need(any("matmul+mask" in n for n in d.get("notes", [])), impl + " says it fell back")
need(any("torch.compile" in n for n in impls.get(("selftest", "pytorch+compile"), {}).get("notes", []))
     or hasattr(__import__("torch"), "compile"), "compile fallback said")
hf = [d for (r, i), d in impls.items() if r == "selftest-hf" and i != "ratchet"]
need(len(hf) == 2, "two transformers rows")
for d in hf:  # numbers when transformers is here, else its reason: never both
    need(("error" in d) != ("step_ms" in d), "transformers row: a reason or a number: %s" % d)
sys.exit(0 if ok else 1)
PY

# Text table, and a peer that dies (OOM) shows OOM in its row, not a number.
cat > "$tmp/py" <<'SH'
#!/bin/sh
case "$1" in *pytorch_gpu_step.py) echo "RuntimeError: CUDA out of memory. Tried to allocate 2 GiB" >&2; exit 1 ;; esac
exec /usr/bin/python3 "$@"
SH
chmod +x "$tmp/py"
"$cmp" --selftest-cpu --python "$tmp/py" --steps 1 --warmup 0 > "$tmp/t" 2> "$tmp/e"
rc=$?
check "OOM peers still exit 0 (got $rc)" '[ $rc = 0 ]'
check "the table has its header" 'grep -q "ms/step" "$tmp/t"'
check "an OOM peer's row says OOM" '[ "$(grep -c "^selftest .* OOM$" "$tmp/t")" = 2 ]'
# --json-to: the table and the same rows as JSON from one run; an unwritable
# place is refused (exit 2) before anything runs.
"$cmp" --selftest-cpu --python "$tmp/py" --steps 1 --warmup 0 --json-to "$tmp/rows.jsonl" > "$tmp/t2" 2>&1
rc=$?
check "--json-to exits 0 (got $rc)" '[ $rc = 0 ]'
check "--json-to prints the table" 'grep -q "ms/step" "$tmp/t2"'
check "--json-to writes one JSON line per row" '[ "$(grep -c "^{" "$tmp/rows.jsonl")" = 6 ]'
"$cmp" --selftest-cpu --python "$tmp/py" --json-to /nonexistent-dir/x.jsonl > "$tmp/t3" 2>&1
rc=$?
check "an unwritable --json-to exits 2 naming it (got $rc)" '[ $rc = 2 ] && grep -q "json-to" "$tmp/t3"'
[ $fails = 0 ] && echo "gpu compare: ok"
exit $fails
