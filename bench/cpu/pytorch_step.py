#!/usr/bin/python3
"""PyTorch reference for bench_train_step: the same GPT-2 and the same step, on the CPU.

Run with Debian's PyTorch (/usr/bin/python3; the pyenv python3 has no torch):

    /usr/bin/python3 bench/cpu/pytorch_step.py --model d12 -B 4 -T 64 --steps 5 --warmup 2 --json

Model: ratchet's shapes. Preset dN = N layers, N heads, 64*N channels; GPT-2
vocab 50257 padded to 50304 rows of wte (as ratchet; the padded logits are
computed and masked out of the loss by slicing to the real 50257), wpe with
max(1024, T) rows, pre-LN blocks, tanh GELU, causal self-attention done by
matmul + mask + softmax (torch 1.13 has no scaled_dot_product_attention),
final LN, lm_head tied to wte. All nn.Linear layers have biases. float32.

Step = zero_grad, forward, cross-entropy loss, backward,
clip_grad_norm_(1.0), AdamW(fused=False, foreach=False default for CPU; lr 1e-4,
betas (0.9, 0.95), eps 1e-8, weight decay 0.1 on 2-D matrices, 0 on biases and
LayerNorm), matching ratchet's AdamWConfig defaults.

--model lN runs the Llama of bench/cpu/pytorch_llama.py instead (RMSNorm,
RoPE, SwiGLU, grouped-query attention, no biases, tied embeddings), same
step and optimizer; its FLOPs are 6*params + 12*L*C*T per token (no wpe).

FLOPs per step use ratchet's train_flops_per_token: 6*(params except wpe) +
12*L*C*T per token (params counted with the padded wte). Peak RSS is the
process's ru_maxrss. The JSON fields match bench_train_step --json.
"""
import argparse
import json
import math
import os
import resource
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from pytorch_llama import Llama, llama_shape

VOCAB = 50257
PADDED_VOCAB = (VOCAB + 127) // 128 * 128  # 50304, as ratchet


class Attention(nn.Module):
    def __init__(self, C, NH, max_T, sdpa=False):
        super().__init__()
        self.NH = NH
        self.sdpa = sdpa  # F.scaled_dot_product_attention (torch >= 2.0; bench/gpu/pytorch_gpu_step.py)
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        if not sdpa:
            mask = torch.tril(torch.ones(max_T, max_T, dtype=torch.bool))
            self.register_buffer("mask", mask.view(1, 1, max_T, max_T), persistent=False)

    def forward(self, x):
        B, T, C = x.shape
        hs = C // self.NH
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.NH, hs).transpose(1, 2)
        k = k.view(B, T, self.NH, hs).transpose(1, 2)
        v = v.view(B, T, self.NH, hs).transpose(1, 2)
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
            att = att.masked_fill(~self.mask[:, :, :T, :T], float("-inf"))
            y = F.softmax(att, dim=-1) @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.c_fc = nn.Linear(C, 4 * C)
        self.c_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, C, NH, max_T, sdpa=False):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C)
        self.attn = Attention(C, NH, max_T, sdpa)
        self.ln_2 = nn.LayerNorm(C)
        self.mlp = MLP(C)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, L, NH, C, max_T, sdpa=False):
        super().__init__()
        self.wte = nn.Embedding(PADDED_VOCAB, C)
        self.wpe = nn.Embedding(max_T, C)
        self.h = nn.ModuleList([Block(C, NH, max_T, sdpa) for _ in range(L)])
        self.ln_f = nn.LayerNorm(C)
        self.lm_head = nn.Linear(C, PADDED_VOCAB, bias=False)
        self.lm_head.weight = self.wte.weight  # tied
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * L) if name.endswith("c_proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)
            elif "ln" in name and name.endswith("weight"):
                nn.init.ones_(p)
            else:
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        B, T = idx.shape
        pos = torch.arange(T, dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for blk in self.h:
            x = blk(x)
        logits = self.lm_head(self.ln_f(x))[:, :, :VOCAB]  # padded rows never win
        return F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="d12")
    ap.add_argument("-B", "--batch-size", type=int, default=4)
    ap.add_argument("-T", "--seq-len", type=int, default=64)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=0, help="0: all cores")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.model[:1] not in ("d", "l") or not a.model[1:].isdigit():
        ap.error("model must be dN (GPT-2) or lN (Llama)")
    n = int(a.model[1:])
    L, NH, C = n, n, 64 * n
    B, T = a.batch_size, a.seq_len
    max_T = max(1024, T)
    threads = a.threads or os.cpu_count()
    torch.set_num_threads(threads)
    torch.manual_seed(1)

    if a.model.startswith("l"):
        L, NH, KV, C, H = llama_shape(n)
        m = Llama(L, NH, KV, C, H, VOCAB, PADDED_VOCAB, max_T)
        wpe_params = 0
    else:
        m = GPT(L, NH, C, max_T)
        wpe_params = max_T * C
    decay = [p for p in m.parameters() if p.dim() == 2]
    no_decay = [p for p in m.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=1e-4, betas=(0.9, 0.95), eps=1e-8)
    nparams = sum(p.numel() for p in m.parameters())  # tied wte counted once
    flops_per_token = 6.0 * (nparams - wpe_params) + 12.0 * L * C * T

    g = torch.Generator().manual_seed(7)
    x = torch.randint(0, VOCAB, (B, T), generator=g)
    y = torch.randint(0, VOCAB, (B, T), generator=g)

    timed = 0.0
    cpu = 0.0  # process CPU time (all threads): steadier than wall time on a shared machine
    loss = None
    for s in range(a.warmup + a.steps):
        t0, c0 = time.perf_counter(), time.process_time()
        opt.zero_grad(set_to_none=True)
        loss = m(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        loss_v = loss.item()
        if s >= a.warmup:
            timed += time.perf_counter() - t0
            cpu += time.process_time() - c0

    ms = timed / a.steps * 1e3
    tokens = B * T
    gflops = flops_per_token * tokens / (ms / 1e3) / 1e9
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    if a.json:
        print(json.dumps({"impl": "pytorch", "model": a.model, "params": nparams, "B": B, "T": T,
                          "threads": threads, "step_ms": round(ms, 2),
                          "cpu_ms": round(cpu / a.steps * 1e3, 2),
                          "tokens_per_s": round(tokens / (ms / 1e3), 1), "gflops": round(gflops, 2),
                          "peak_rss_mb": round(rss_mb, 1), "loss": round(loss_v, 4),
                          "torch": torch.__version__}))
    else:
        print(f"{'model':<6} {'params':>10} {'B':>4} {'T':>5} {'ms/step':>10} {'tok/s':>10} "
              f"{'GFLOP/s':>9} {'peak RSS':>10}")
        print(f"{a.model:<6} {nparams / 1e6:9.1f}M {B:4d} {T:5d} {ms:10.1f} {tokens / (ms / 1e3):10.0f} "
              f"{gflops:9.1f} {rss_mb:8.0f} MB")


if __name__ == "__main__":
    main()
