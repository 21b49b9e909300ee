#!/usr/bin/env python3
"""The paper roofline of one ratchet training step on A100 and H100.

For every kernel and GEMM the cuda backend runs in one optimizer step of a
GPT-2 (d12, d24, d48) at micro-batch B, sequence T, BF16 storage, no
recompute, one GPU (the all-reduce overlaps the backward and is left out):
the FLOPs and the bytes it moves (each tensor read or written once, as the
kernels in kernels/ and the cuBLASLt calls in src/backend/cuda do), and its
predicted time on each device:

    t = max(FLOPs / (peak * e_gemm), bytes / (bandwidth * e_mem)) + t_launch

with the published dense BF16 tensor peaks and HBM bandwidths (A100 SXM
80GB: 312 TFLOP/s, 2.039 TB/s; H100 SXM: 989 TFLOP/s, 3.35 TB/s) and stated
efficiencies: e_gemm, what cuBLASLt reaches on large BF16 GEMMs (A100 0.85,
H100 0.75: the figures cuBLAS and llm.c report); e_mem = 0.85 of the
bandwidth for streaming kernels; t_launch = 2 us per kernel (the gap between
back-to-back kernels on one stream without CUDA graphs). --ideal sets them to
1, 1, 0: the pure roofline. MFU = the model FLOPs of the step (6 * matmul
parameters + 12 * L * C * T per token: src/model/gpt.cpp) / (time * peak).

--attention picks the implementation of `ratchet train --attention`:
  materialized  the (T,T) scores written, soft-maxed and read back per layer
                (cuBLASLt batched GEMMs + kernels);
  flash         kernels/flash_attention.cuh: fused (q, k, v, o, lse in; dq,
                dk, dv out; causal, so half the T x T blocks; backward
                recomputes the scores), but plain FP32 FMA code on the CUDA
                cores, not tensor cores: timed against the FP32 (non-tensor)
                peak (A100 19.5, H100 SXM 67 TFLOP/s) at E_FLASH_SIMT = 0.5, an
                assumption (no GPU measurement yet: bench/kernels/attention.sh
                replaces it);
  cudnn         cuDNN's fused SDPA on tensor cores (src/backend/cuda/
                cudnn_attention.h), at the efficiencies cuDNN is published to
                reach at d12's attention shape (head dim 64, causal, T = 1k),
                per device and pass (E_CUDNN below, with sources); backward
                also streams its FP32 dQ accumulator.
--attention all prints every implementation's step and MFU side by side.

  roofline.py [--models d12,d24,d48] [--B 16] [--T 1024] [--accum 1] [--attention ...]
              [--ideal] [--markdown] [--check]
--check verifies the model against independent counts (the step's GEMM
FLOPs equal the 6N + 12LCT formula exactly) and exits 1 on a mismatch.
"""
import argparse
import math
import sys

DEVICES = {  # name: (dense BF16 TFLOP/s, HBM TB/s, e_gemm)
    "A100": (312.0, 2.039, 0.85),
    "H100": (989.0, 3.35, 0.75),
}
FP32_PEAK = {"A100": 19.5, "H100": 67.0}  # non-tensor FP32 TFLOP/s (NVIDIA data sheets)
E_MEM = 0.85
E_FLASH_SIMT = 0.5  # assumed: our FP32 FMA flash kernels, of the FP32 peak
# cuDNN SDPA, BF16, head dim 64, causal FLOPs counted half (the convention of
# the FlashAttention papers, and of this file), as a fraction of the BF16 peak:
#  H100 forward 0.29: 288 TFLOP/s at T = 1k, causal (FlashAttention-3 paper,
#    Shah et al. 2024, arXiv:2407.08608, Fig. 5, "cuDNN" bars, H100 SXM5);
#  H100 backward 0.27: 348 TFLOP/s at T = 1k non-causal (same paper, Fig. 6),
#    scaled by forward's causal / non-causal ratio at T = 1k (288 / 373);
#  A100 0.50 both: no published cuDNN figure at this shape; the low end of the
#    50-73% of A100 peak FlashAttention-2 reports (Dao 2023, arXiv:2307.08691),
#    which cuDNN's SDPA is at least on par with.
E_CUDNN = {"A100": (0.50, 0.50), "H100": (288.0 / 989.0, 348.0 / 989.0 * 288.0 / 373.0)}
ATTENTIONS = ("materialized", "flash", "cudnn")
T_LAUNCH = 2e-6
SB = 2  # BF16 storage

PRESETS = {"d12": (12, 12, 768), "d24": (24, 16, 1024), "d36": (36, 20, 1280),
           "d48": (48, 25, 1600)}


class Op:
    def __init__(self, name, flops, bytes_, launches=1, kind="kernel", per_layer=True, eff=None):
        self.name, self.flops, self.bytes, self.launches = name, flops, bytes_, launches
        self.kind, self.per_layer = kind, per_layer
        # kind "attn" (a fused causal attention): {device: (peak TFLOP/s, efficiency)}
        self.eff = eff


def attn_eff(attention, backward):
    """{device: (peak TFLOP/s, efficiency)} of a fused attention pass."""
    if attention == "flash":
        return {d: (FP32_PEAK[d], E_FLASH_SIMT) for d in DEVICES}
    return {d: (DEVICES[d][0], E_CUDNN[d][backward]) for d in DEVICES}


def step_ops(L, NH, C, B, T, V=50257, attention="materialized"):
    """Every op of one step: forward, backward, optimizer (per layer ops once)."""
    Vp = (V + 127) // 128 * 128
    N = B * T
    BH = B * NH
    T2 = BH * T * T  # elements of one layer's (T,T) scores
    NC = N * C
    ops = []

    def g(name, m, n, k, bytes_, per_layer=True):  # a GEMM: 2mnk FLOPs
        ops.append(Op(name, 2.0 * m * n * k, bytes_, 1, "gemm", per_layer))

    def kern(name, bytes_, launches=1, per_layer=True, flops=0.0):
        ops.append(Op(name, flops, bytes_, launches, "kernel", per_layer))

    ln_fwd = 2 * NC * SB + 8 * N + 2 * C * SB             # read x, write y, mean, rstd
    ln_bwd = 4 * NC * SB + 8 * N + 2 * (N / 32) * C * 4 * 2 + 4 * C * SB  # + chunk partials
    # ---- forward ----
    kern("encoder_forward", (2 * NC + T * C) * SB + 4 * N, per_layer=False)
    kern("layernorm_forward ln1", ln_fwd)
    g("matmul qkv (+bias)", N, 3 * C, C, (NC + 3 * C * C + 3 * NC + 3 * C) * SB)
    if attention == "materialized":
        kern("attention_permute", 6 * NC * SB)
        g("attn QK^T (batched)", T, T, C // NH * BH, (2 * NC + T2) * SB)
        kern("softmax_forward", 2 * T2 * SB)
        g("attn att.V (batched)", T, C // NH * BH, T, (T2 + 2 * NC) * SB)
        kern("attention_unpermute", 2 * NC * SB)
    else:
        ops.append(Op(f"{attention} attention fwd", 4.0 * N * T * C,
                      (3 * NC + NC + 8 * BH * T) * SB, 1, "attn", eff=attn_eff(attention, 0)))
    g("matmul attproj (+bias)", N, C, C, (2 * NC + C * C + C) * SB)
    kern("residual_forward", 3 * NC * SB)
    kern("layernorm_forward ln2", ln_fwd)
    g("matmul fc (+bias, GELU aux)", N, 4 * C, C, (NC + 4 * C * C + 8 * NC + 4 * C) * SB)
    g("matmul fcproj (+bias)", N, C, 4 * C, (4 * NC + 4 * C * C + NC + C) * SB)
    kern("residual_forward", 3 * NC * SB)
    kern("layernorm_forward lnf", ln_fwd, per_layer=False)
    g("matmul lm head", N, Vp, C, (NC + Vp * C + N * Vp) * SB, per_layer=False)
    kern("fused_classifier", 2 * N * Vp * SB + 8 * N, per_layer=False)
    # ---- backward ----
    g("lm head dinp", N, C, Vp, (N * Vp + Vp * C + NC) * SB, per_layer=False)
    g("lm head dW", Vp, C, N, (N * Vp + NC + 2 * Vp * C) * SB, per_layer=False)
    kern("zero dresidual", NC * SB, per_layer=False)
    kern("layernorm_backward lnf", ln_bwd, 3, per_layer=False)
    g("fcproj dinp (DGELU)", N, 4 * C, C, (NC + 4 * C * C + 8 * NC) * SB)
    g("fcproj dW (BGRADB)", C, 4 * C, N, (NC + 4 * NC + 8 * C * C + C) * SB)
    g("fc dinp", N, C, 4 * C, (4 * NC + 4 * C * C + NC) * SB)
    g("fc dW (BGRADB)", 4 * C, C, N, (4 * NC + NC + 8 * C * C + 4 * C) * SB)
    kern("layernorm_backward ln2", ln_bwd, 3)
    g("attproj dinp", N, C, C, (2 * NC + C * C) * SB)
    g("attproj dW (BGRADB)", C, C, N, (2 * NC + 2 * C * C + C) * SB)
    if attention == "materialized":
        kern("attention_permute (recompute q,k,v)", 6 * NC * SB)
        kern("attention_unpermute_backward", 2 * NC * SB)
        g("attn datt = dy.V^T", T, T, C // NH * BH, (2 * NC + T2) * SB)
        g("attn dV = att^T.dy", T, C // NH * BH, T, (T2 + 2 * NC) * SB)
        kern("softmax_backward", 3 * T2 * SB)
        g("attn dq = datt.k", T, C // NH * BH, T, (T2 + 2 * NC) * SB)
        g("attn dk = datt^T.q", T, C // NH * BH, T, (T2 + 2 * NC) * SB)
        kern("attention_permute_backward", 6 * NC * SB)
    else:
        # q, k, v, o, dO in, dq, dk, dv out, lse; cuDNN also zeroes, accumulates
        # and reads its FP32 dQ accumulator (B,NH,T,HS).
        dq_acc = 3 * NC * 4 if attention == "cudnn" else 0
        ops.append(Op(f"{attention} attention bwd", 8.0 * N * T * C,
                      (3 * NC + 2 * NC + 3 * NC + 8 * BH * T) * SB + dq_acc, 1, "attn",
                      eff=attn_eff(attention, 1)))
    g("qkv dinp", N, C, 3 * C, (3 * NC + 3 * C * C + NC) * SB)
    g("qkv dW (BGRADB)", 3 * C, C, N, (3 * NC + NC + 6 * C * C + 3 * C) * SB)
    kern("layernorm_backward ln1", ln_bwd, 3)
    n_pow2 = 1 << max(1, math.ceil(math.log2(N)))
    passes = sum(range(1, int(math.log2(n_pow2)) + 1))
    kern("encoder_backward (dwpe, sort, dwte)",
         (2 * NC + T * C) * SB + passes * n_pow2 * 16 + 2 * NC * SB, 3 + passes, per_layer=False)
    # ---- optimizer ----
    P = param_count(L, C, Vp, T_max=1024)
    # once per optimizer step, whatever the accumulation
    ops.append(Op("zero_grad", 0.0, P * SB, 1, "optim", False))
    ops.append(Op("global_norm (2 passes)", 0.0, P * SB, 2, "optim", False))
    # read param, grad (BF16), master, m, v (FP32); write param, master, m, v
    ops.append(Op("adamw (+FP32 master, stochastic rounding)", 0.0, P * (16 + 14), 1, "optim",
                  False))
    return ops, Vp, P


def param_count(L, C, Vp, T_max=1024):
    per_layer = 2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + 4 * C * C + 4 * C + 4 * C * C + C
    return Vp * C + T_max * C + L * per_layer + 2 * C


def model_flops_per_token(L, C, Vp, T, T_max=1024):
    """6 * (parameters - wpe) + 12 L C T: src/model/gpt.cpp train_flops_per_token."""
    return 6.0 * (param_count(L, C, Vp, T_max) - T_max * C) + 12.0 * L * C * T


def op_time(op, dev, ideal):
    peak, bw, e_gemm = DEVICES[dev]
    eg = 1.0 if ideal else e_gemm
    em = 1.0 if ideal else E_MEM
    if op.kind == "attn":
        apeak, e = op.eff[dev]
        peak, eg = apeak, (1.0 if ideal else e)
        executed = op.flops / 2  # causal: half the blocks
    else:
        executed = op.flops
    tc = executed / (peak * 1e12 * eg)
    tm = op.bytes / (bw * 1e12 * em)
    tl = 0.0 if ideal else op.launches * T_LAUNCH
    return max(tc, tm) + tl, ("compute" if tc >= tm else "memory")


def analyse(model, B, T, attention, ideal, accum=1):
    L, NH, C = PRESETS[model]
    ops, Vp, P = step_ops(L, NH, C, B, T, attention=attention)
    mflops = model_flops_per_token(L, C, Vp, T) * B * T * accum
    rows, total = [], {d: 0.0 for d in DEVICES}
    for op in ops:
        mult = (L if op.per_layer else 1) * (1 if op.kind == "optim" else accum)
        r = {"name": op.name, "kind": op.kind, "count": mult, "flops": op.flops * mult,
             "bytes": op.bytes * mult, "launches": op.launches * mult}
        for d in DEVICES:
            t, bound = op_time(op, d, ideal)
            r[d] = t * mult
            r[d + "_bound"] = bound
            total[d] += t * mult
        rows.append(r)
    res = {"model": model, "B": B, "T": T, "params": P, "Vp": Vp, "model_flops": mflops,
           "rows": rows, "time": total, "attention": attention, "accum": accum}
    res["mfu"] = {d: mflops / (total[d] * DEVICES[d][0] * 1e12) for d in DEVICES}
    res["tokens_per_s"] = {d: B * T * accum / total[d] for d in DEVICES}
    return res


def merged(rows):
    """Rows with the same name (e.g. the two residual_forward) added up."""
    out = {}
    for r in rows:
        if r["name"] in out:
            m = out[r["name"]]
            for k in ("count", "flops", "bytes", "launches") + tuple(DEVICES):
                m[k] += r[k]
        else:
            out[r["name"]] = dict(r)
    return list(out.values())


def print_markdown(res):
    d = list(DEVICES)
    print(f"### {res['model']}, B={res['B']}, T={res['T']} ({res['B'] * res['T']} tokens/GPU), "
          f"{res['attention']} attention, {res['accum']} micro-batch(es) per optimizer step")
    print()
    print(f"{res['params'] / 1e6:.1f}M parameters; model FLOPs per step "
          f"{res['model_flops'] / 1e12:.2f} TFLOP")
    print()
    print("| op | x | GFLOP | GB moved | " + " | ".join(f"{x} ms (bound)" for x in d) +
          " | H100 share |")
    print("| --- | ---: | ---: | ---: | " + " | ".join("---:" for _ in d) + " | ---: |")
    for r in merged(res["rows"]):
        cells = [f"{r[x] * 1e3:.3f} ({r[x + '_bound'][0]})" for x in d]
        share = r["H100"] / res["time"]["H100"] * 100
        print(f"| {r['name']} | {r['count']} | {r['flops'] / 1e9:.1f} | {r['bytes'] / 1e9:.3f} | "
              + " | ".join(cells) + f" | {share:.1f}% |")
    tf = sum(r["flops"] for r in res["rows"])
    tb = sum(r["bytes"] for r in res["rows"])
    tl = sum(r["launches"] for r in res["rows"])
    print(f"| **step** | {tl} launches | {tf / 1e9:.0f} | {tb / 1e9:.2f} | " +
          " | ".join(f"**{res['time'][x] * 1e3:.2f}**" for x in d) + " | 100% |")
    print()
    print("| device | step time | tokens/s | MFU |")
    print("| --- | ---: | ---: | ---: |")
    for x in d:
        print(f"| {x} | {res['time'][x] * 1e3:.2f} ms | {res['tokens_per_s'][x]:,.0f} | "
              f"{res['mfu'][x] * 100:.1f}% |")
    print()


def loss_to_target(res, dev, target):
    """Ops ranked by the time they take beyond their share of an MFU-`target` step."""
    peak = DEVICES[dev][0] * 1e12
    budget = res["model_flops"] / (target * peak)
    excess = []
    for r in merged(res["rows"]):
        ideal = r["flops"] / peak  # at 100% of the peak
        excess.append((r[dev] - ideal, r["name"], r[dev]))
    excess.sort(reverse=True)
    return budget, excess


def check(all_res):
    bad = []
    for res in all_res:
        L, NH, C = PRESETS[res["model"]]
        gemm = sum(r["flops"] for r in res["rows"] if r["kind"] in ("gemm", "attn"))
        # Independent count: GEMM FLOPs = 6 * (matmul weights) * tokens + attention 12 L C T.
        B, T, Vp = res["B"], res["T"], res["Vp"]
        weights = L * 12 * C * C + Vp * C
        want = (6.0 * weights + 12.0 * L * C * T) * B * T * res["accum"]
        if abs(gemm - want) > 1e-9 * want:
            bad.append(f"{res['model']}: GEMM FLOPs {gemm:.6e} != 6*W*tokens + 12LCT*tokens "
                       f"{want:.6e}")
        # model FLOPs (6N + 12LCT) also count the biases and LayerNorm parameters.
        if not 1.0 <= res["model_flops"] / gemm < 1.001:
            bad.append(f"{res['model']}: model FLOPs {res['model_flops']:.4e} vs GEMM {gemm:.4e}")
        for d in DEVICES:
            if not 0 < res["mfu"][d] <= 1:
                bad.append(f"{res['model']} {d}: MFU {res['mfu'][d]} outside (0, 1]")
        if res["model"] == "d12" and res["params"] != 124475904 + (res["Vp"] - 50304) * C:
            bad.append(f"d12: {res['params']} parameters, llm.c's GPT-2 124M has 124475904")
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="d12,d24,d48")
    ap.add_argument("--B", type=int, default=16)
    ap.add_argument("--T", type=int, default=1024)
    ap.add_argument("--accum", type=int, default=1,
                    help="micro-batches per optimizer step (the optimizer rows run once)")
    ap.add_argument("--attention", default="all", choices=list(ATTENTIONS) + ["all"])
    ap.add_argument("--ideal", action="store_true")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    attns = ATTENTIONS if a.attention == "all" else (a.attention,)
    all_res = [analyse(m, a.B, a.T, at, a.ideal, a.accum)
               for m in a.models.split(",") for at in attns]
    if a.check:
        bad = check(all_res)
        for b in bad:
            print("MISMATCH: " + b, file=sys.stderr)
        if bad:
            sys.exit(1)
        print(f"roofline: {len(all_res)} model/attention case(s) consistent with the "
              "6N + 12LCT count")
        return
    for res in all_res:
        if a.markdown:
            print_markdown(res)
        else:
            print(f"{res['model']} B={a.B} T={a.T} {res['attention']:>12}: " + ", ".join(
                f"{d} {res['time'][d] * 1e3:7.2f} ms/step, MFU {res['mfu'][d] * 100:4.1f}%"
                for d in DEVICES))
    for res in all_res:
        if res["model"] != "d12" or a.markdown:
            continue
        budget, excess = loss_to_target(res, "H100", 0.60)
        print(f"\nd12 on H100 ({res['attention']} attention): predicted MFU "
              f"{res['mfu']['H100'] * 100:.1f}% (55% target: "
              f"{'met' if res['mfu']['H100'] >= 0.55 else 'NOT met'}); a 60% step is "
              f"{budget * 1e3:.2f} ms, predicted {res['time']['H100'] * 1e3:.2f} ms. Time beyond "
              "each op's FLOPs at the peak, largest first:")
        for ex, name, t in excess[:6]:
            print(f"  {name}: {ex * 1e3:.2f} ms over ({t * 1e3:.2f} ms)")


if __name__ == "__main__":
    main()
