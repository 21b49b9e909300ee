"""Plain-PyTorch Llama for bench/cpu/pytorch_step.py (--model lN): ratchet's
Llama shape and math, written from the issue-17 contract, not transformers.

Preset lN: N layers, 64*N channels, N heads of 64, KV heads = the largest
divisor of N that is <= max(1, N/2), SwiGLU hidden 8/3*C rounded to a
multiple of 64 (l12: 768 channels, 12 heads, 6 KV heads, hidden 2048); tied
embeddings; vocab padded to a multiple of 128 rows (logits over the padded
rows are computed, the loss uses the real ones, as ratchet).

Block: h = RMSNorm(x) (eps 1e-5); q, k, v = one fused projection of h (rows
q | k | v, no biases); RoPE on q and k with HF's rotate_half convention
(theta 10000); grouped-query causal attention by matmul + mask + softmax (as
the GPT-2 bench: this torch has no scaled_dot_product_attention), each KV
head shared by NH/KV query heads; x += o_proj(att); h2 = RMSNorm(x);
gate | up = one fused projection; x += down(silu(gate) * up). Final RMSNorm,
lm_head = wte^T. Init: N(0, 0.02), o_proj and down_proj / sqrt(2L), gains 1.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def llama_shape(n):
    """(L, NH, KV, C, H) of preset lN, as ratchet's preset_config."""
    kv = max(1, n // 2)
    while n % kv:
        kv -= 1
    C = 64 * n
    return n, n, kv, C, (8 * C // 3 + 32) // 64 * 64


class RMSNorm(nn.Module):
    def __init__(self, C, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(C))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Attention(nn.Module):
    def __init__(self, C, NH, KV, max_T, theta=10000.0):
        super().__init__()
        self.NH, self.KV, self.hs = NH, KV, C // NH
        self.qkv = nn.Linear(C, (NH + 2 * KV) * self.hs, bias=False)
        self.o_proj = nn.Linear(NH * self.hs, C, bias=False)
        inv = theta ** (-torch.arange(0, self.hs, 2, dtype=torch.float32) / self.hs)  # (hs/2)
        ang = torch.arange(max_T, dtype=torch.float32)[:, None] * inv[None, :]      # (maxT, hs/2)
        ang = torch.cat((ang, ang), dim=-1)                                           # (maxT, hs)
        self.register_buffer("cos", ang.cos(), persistent=False)
        self.register_buffer("sin", ang.sin(), persistent=False)
        mask = torch.tril(torch.ones(max_T, max_T, dtype=torch.bool))
        self.register_buffer("mask", mask.view(1, 1, max_T, max_T), persistent=False)

    def forward(self, x):
        B, T, C = x.shape
        NH, KV, hs = self.NH, self.KV, self.hs
        q, k, v = self.qkv(x).split([NH * hs, KV * hs, KV * hs], dim=2)
        q = q.view(B, T, NH, hs).transpose(1, 2)   # (B, NH, T, hs)
        k = k.view(B, T, KV, hs).transpose(1, 2)   # (B, KV, T, hs)
        v = v.view(B, T, KV, hs).transpose(1, 2)
        cos, sin = self.cos[:T], self.sin[:T]
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        g = NH // KV  # query heads per KV head: head h reads KV head h // g
        k = k.repeat_interleave(g, dim=1)
        v = v.repeat_interleave(g, dim=1)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(~self.mask[:, :, :T, :T], float("-inf"))
        y = (F.softmax(att, dim=-1) @ v).transpose(1, 2).contiguous().view(B, T, NH * hs)
        return self.o_proj(y)


class MLP(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.gate_up = nn.Linear(C, 2 * H, bias=False)
        self.down_proj = nn.Linear(H, C, bias=False)

    def forward(self, x):
        gate, up = self.gate_up(x).split(self.H, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class Block(nn.Module):
    def __init__(self, C, NH, KV, H, max_T):
        super().__init__()
        self.ln_1 = RMSNorm(C)
        self.attn = Attention(C, NH, KV, max_T)
        self.ln_2 = RMSNorm(C)
        self.mlp = MLP(C, H)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Llama(nn.Module):
    def __init__(self, L, NH, KV, C, H, vocab, padded_vocab, max_T):
        super().__init__()
        self.vocab = vocab
        self.wte = nn.Embedding(padded_vocab, C)
        self.h = nn.ModuleList([Block(C, NH, KV, H, max_T) for _ in range(L)])
        self.ln_f = RMSNorm(C)
        self.lm_head = nn.Linear(C, padded_vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied
        for name, p in self.named_parameters():
            if p.dim() == 2:
                resid = name.endswith("o_proj.weight") or name.endswith("down_proj.weight")
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * L) if resid else 0.02)

    def forward(self, idx, targets):
        x = self.wte(idx)
        for blk in self.h:
            x = blk(x)
        logits = self.lm_head(self.ln_f(x))[:, :, :self.vocab]  # padded rows never win
        return F.cross_entropy(logits.reshape(-1, self.vocab), targets.reshape(-1))
