"""One MoE layer's forward + backward in PyTorch eager, looping over the
experts as transformers' Qwen3MoeSparseMoeBlock / OlmoeSparseMoeBlock do
(written from that description in docs/moe.md, not copied): the reference
bench/cpu/moe.sh compares bench_moe_layer with, at the same shape and threads.

  /usr/bin/python3 bench/cpu/pytorch_moe.py -N 2048 -C 512 -E 8 -k 2 -I 512 \
      --threads 2 --reps 5 --warmup 1 [--json]

Router: logits = x @ gate^T, softmax in float32, top-k, renormalised
(norm_topk_prob). Experts: for each expert with tokens, its rows gathered
(torch.where on the one-hot selection mask), h = x_e @ w1_e^T (rows gate |
up), y = (silu(gate) * up) @ w2_e^T scaled by the routing weight,
index_add_ into the output. Backward: out.backward(dout), gradients for x,
the gate and both expert weights, as ratchet's bench computes them.
"""
import argparse
import json
import resource
import time

import torch
import torch.nn.functional as F


def cpu_s():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def moe_layer(x, gate, w1, w2, k, I):
    N, C = x.shape
    E = gate.shape[0]
    probs = F.softmax(x @ gate.t(), dim=1, dtype=torch.float32)
    w, idx = torch.topk(probs, k, dim=-1)
    w = w / w.sum(dim=-1, keepdim=True)
    out = torch.zeros_like(x)
    mask = F.one_hot(idx, num_classes=E).permute(2, 1, 0)  # (E, k, N)
    for e in range(E):
        slot, tok = torch.where(mask[e])
        if tok.numel() == 0:
            continue
        h = x[tok] @ w1[e].t()
        g, u = h.split(I, dim=-1)
        y = (F.silu(g) * u) @ w2[e].t()
        out.index_add_(0, tok, y * w[tok, slot, None])
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-N", type=int, default=2048)
    p.add_argument("-C", type=int, default=512)
    p.add_argument("-E", type=int, default=8)
    p.add_argument("-k", type=int, default=2)
    p.add_argument("-I", type=int, default=512)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    if not (1 <= a.k <= a.E) or a.reps < 1:
        p.error("need 1 <= k <= E and reps >= 1")
    torch.set_num_threads(a.threads)
    torch.manual_seed(5)
    N, C, E, k, I = a.N, a.C, a.E, a.k, a.I
    x = torch.randn(N, C).requires_grad_()
    gate = (torch.randn(E, C) / 16).requires_grad_()  # as bench_moe_layer: routing far from ties
    w1 = (0.02 * torch.randn(E, 2 * I, C)).requires_grad_()
    w2 = (0.02 * torch.randn(E, C, I)).requires_grad_()
    dout = torch.randn(N, C)
    wall = cpu = 0.0
    for r in range(a.warmup + a.reps):
        t0, c0 = time.perf_counter(), cpu_s()
        out = moe_layer(x, gate, w1, w2, k, I)
        out.backward(dout)  # parameter gradients accumulate, as in training
        if r >= a.warmup:
            wall += time.perf_counter() - t0
            cpu += cpu_s() - c0
    ms = wall / a.reps * 1e3
    flops = 3.0 * (2.0 * N * k * 3.0 * I * C + 2.0 * N * E * C)
    res = {"impl": "pytorch", "torch": torch.__version__, "N": N, "C": C, "E": E, "k": k, "I": I,
           "threads": a.threads, "ms": ms, "cpu_ms": cpu / a.reps * 1e3, "gflops": flops / (ms / 1e3) / 1e9}
    if a.json:
        print(json.dumps(res))
    else:
        print("pytorch MoE layer N=%d C=%d E=%d k=%d I=%d threads=%d: %.2f ms fwd+bwd (cpu %.2f ms), %.1f GFLOP/s"
              % (N, C, E, k, I, a.threads, ms, res["cpu_ms"], res["gflops"]))


if __name__ == "__main__":
    main()
