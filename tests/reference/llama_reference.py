#!/usr/bin/env python3
"""Independent float64 PyTorch reference for ratchet's Llama-family model.

Written from the model's definition with plain torch ops (no transformers, no
torch.optim), sharing no code with the C++ trainer: RMSNorm, RoPE in Hugging
Face's rotate_half convention with optional Llama 3.1 frequency scaling,
grouped-query attention, a SwiGLU MLP, no biases, tied or untied lm_head.
Reads a JSON config, the flat float32 parameters (ratchet's ParamLayout order,
empty slots omitted) and a token batch; writes the same output file as
gpt2_reference.py (logits, loss, gradients, AdamW losses and final params),
whose AdamW loop it reuses. See tests/reference/README.md.

  /usr/bin/python3 tests/reference/llama_reference.py --config C.json --params P.f32 \
      --batch B.bin --out O.bin [--steps 10] [--lr 1e-3] ...
  /usr/bin/python3 tests/reference/llama_reference.py --self-test
"""
import argparse
import json
import math
import os
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_reference as g2  # noqa: E402  (read_batch, unflatten, gradcheck, run (AdamW), args, I/O)

DECAYED = {"wte", "qkvw", "attprojw", "fcw", "fcprojw", "lmhead"}


def param_shapes(cfg):
    """(name, shape) of the tensors a llama has, in flat-buffer order."""
    Vp, L, C, NH, KV, H = cfg["Vp"], cfg["L"], cfg["C"], cfg["NH"], cfg["KV"], cfg["H"]
    hs = C // NH
    shapes = [("wte", (Vp, C)), ("ln1w", (L, C)), ("qkvw", (L, (NH + 2 * KV) * hs, C)),
              ("attprojw", (L, C, NH * hs)), ("ln2w", (L, C)), ("fcw", (L, 2 * H, C)),
              ("fcprojw", (L, C, H)), ("lnfw", (C,))]
    if not cfg["tied"]:
        shapes.append(("lmhead", (Vp, C)))
    return shapes


def inv_freq(cfg):
    """theta^(-2i/hs), rescaled band by band as Llama 3.1 does when rope_factor > 0."""
    hs = cfg["C"] // cfg["NH"]
    f = cfg["theta"] ** (-torch.arange(0, hs, 2, dtype=torch.float64) / hs)
    factor = cfg["rope_factor"]
    if factor == 0:
        return f
    low, high, orig = cfg["rope_low"], cfg["rope_high"], cfg["rope_orig"]
    out = []
    for fi in f.tolist():
        wavelen = 2 * math.pi / fi
        if wavelen < orig / high:        # high frequency: kept
            out.append(fi)
        elif wavelen > orig / low:       # low frequency: slowed down by `factor`
            out.append(fi / factor)
        else:                            # between: blend the two
            s = (orig / wavelen - low) / (high - low)
            out.append((1 - s) * fi / factor + s * fi)
    return torch.tensor(out, dtype=torch.float64)


def rmsnorm(x, w, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w


def rope(x, cos, sin):
    """x (B,heads,T,hs); HF rotate_half: pairs (i, i + hs/2)."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def forward(flat, cfg, inputs, targets):
    p = g2.unflatten(flat, param_shapes(cfg))
    B, T = inputs.shape
    C, NH, KV, H, V, eps = cfg["C"], cfg["NH"], cfg["KV"], cfg["H"], cfg["V"], cfg["eps"]
    hs = C // NH
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv_freq(cfg)[None, :]  # (T, hs/2)
    cos, sin = ang.cos(), ang.sin()
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    x = p["wte"][inputs]                                         # (B,T,C), no positions
    for l in range(cfg["L"]):
        h = rmsnorm(x, p["ln1w"][l], eps)
        qkv = h @ p["qkvw"][l].T                                 # (B,T,(NH+2KV)hs)
        q, k, v = qkv.split([NH * hs, KV * hs, KV * hs], dim=-1)
        q = q.view(B, T, NH, hs).transpose(1, 2)                 # (B,NH,T,hs)
        k = k.view(B, T, KV, hs).transpose(1, 2)                 # (B,KV,T,hs)
        v = v.view(B, T, KV, hs).transpose(1, 2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        # query head h reads KV head h // (NH/KV)
        k = k.repeat_interleave(NH // KV, dim=1)
        v = v.repeat_interleave(NH // KV, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(~causal, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, NH * hs)
        x = x + y @ p["attprojw"][l].T
        h = rmsnorm(x, p["ln2w"][l], eps)
        gate_up = h @ p["fcw"][l].T                              # (B,T,2H)
        gate, up = gate_up[..., :H], gate_up[..., H:]
        x = x + (gate * torch.sigmoid(gate) * up) @ p["fcprojw"][l].T
    x = rmsnorm(x, p["lnfw"], eps)
    logits = x @ (p["wte"] if cfg["tied"] else p["lmhead"]).T   # (B,T,Vp)
    loss = F.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1))
    return logits, loss


def weight_decay_mask(cfg, wd):
    return torch.cat([torch.full((math.prod(s),), wd if name in DECAYED else 0.0,
                                 dtype=torch.float64) for name, s in param_shapes(cfg)])


def read_config(path):
    with open(path) as f:
        cfg = json.load(f)
    need = ["V", "Vp", "L", "NH", "KV", "C", "H", "eps", "theta", "rope_factor", "rope_low",
            "rope_high", "rope_orig", "tied", "maxT"]
    missing = [k for k in need if k not in cfg]
    if missing:
        sys.exit(f"{path}: missing {missing}")
    return cfg


def read_params(path, cfg, shapes=None):
    """The flat float32 parameters of `cfg` (laid out as `shapes`, default
    param_shapes) from `path`, as one float64 tensor."""
    n = sum(math.prod(s) for _, s in (shapes or param_shapes)(cfg))
    data = np.fromfile(path, dtype="<f4")
    if data.size != n:
        sys.exit(f"{path}: expected {n} floats for this config, found {data.size}")
    return torch.from_numpy(data.astype(np.float64))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for k in ("--config", "--params", "--batch", "--out"):
        ap.add_argument(k)
    g2.add_run_args(ap)
    a = ap.parse_args(argv)
    if a.self_test:
        return self_test()
    if not (a.config and a.params and a.batch and a.out):
        ap.error("--config, --params, --batch and --out are required")
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    cfg = read_config(a.config)
    flat = read_params(a.params, cfg)
    inputs, targets = g2.read_batch(a.batch)
    if inputs.shape[1] > cfg["maxT"]:
        sys.exit(f"T={inputs.shape[1]} exceeds max_seq_len={cfg['maxT']}")
    r = g2.run(cfg, flat, inputs, targets, a, fwd=forward,
               wd=weight_decay_mask(cfg, a.weight_decay))
    g2.write_output(a.out, cfg, inputs.shape[0], inputs.shape[1], a.steps, r)
    print(f"loss0={r['loss']:.10f} params={r['grads'].numel()} -> {a.out}")
    return 0


def self_test():
    """Finite differences on every tensor of a tiny GQA, untied, rope-scaled model, and
    GQA against plain multi-head attention with the KV heads copied out."""
    gen = torch.Generator().manual_seed(99)
    cfg = dict(V=37, Vp=128, L=2, NH=4, KV=2, C=32, H=40, eps=1e-5, theta=500.0,
               rope_factor=8.0, rope_low=1.0, rope_high=4.0, rope_orig=64, tied=False, maxT=16)
    parts = []
    for name, s in param_shapes(cfg):
        w = torch.randn(s, generator=gen, dtype=torch.float64) * 0.2
        if name.startswith("ln"):
            w = w + 1.0
        if name in ("wte", "lmhead"):
            w[cfg["V"]:] = 0.0
        parts.append(w.reshape(-1))
    flat = torch.cat(parts)
    toks = torch.randint(0, cfg["V"], (2, 2, 8), generator=gen)
    inputs, targets = toks[0], toks[1]
    _, _, grads = g2.loss_and_grad(flat, cfg, inputs, targets, forward)
    f = lambda x: forward(x, cfg, inputs, targets)[1].item()
    real = cfg["V"] * cfg["C"]  # sampled among the real (unpadded) vocab rows
    worst = g2.gradcheck(f, flat, grads, param_shapes(cfg), gen, real={"wte": real, "lmhead": real})
    print(f"[ok] gradcheck: {len(param_shapes(cfg))} tensors, worst rel err {worst:.2e}")
    # GQA == MHA whose k, v heads repeat the groups' KV heads
    p = g2.unflatten(flat, param_shapes(cfg))
    hs = cfg["C"] // cfg["NH"]
    mha = dict(cfg, KV=cfg["NH"])
    qkv = p["qkvw"]                                   # (L, (NH+2KV)hs, C)
    q, k, v = qkv.split([4 * hs, 2 * hs, 2 * hs], dim=1)
    rep = lambda t: t.view(cfg["L"], 2, hs, -1).repeat_interleave(2, dim=1).reshape(
        cfg["L"], 4 * hs, -1)
    p_mha = dict(p, qkvw=torch.cat([q, rep(k), rep(v)], dim=1))
    flat_mha = torch.cat([p_mha[n].reshape(-1) for n, _ in param_shapes(mha)])
    l1 = forward(flat, cfg, inputs, targets)[1].item()
    l2 = forward(flat_mha, mha, inputs, targets)[1].item()
    assert abs(l1 - l2) < 1e-12, (l1, l2)
    print(f"[ok] GQA equals MHA with repeated KV heads (loss {l1:.10f})")
    with tempfile.TemporaryDirectory() as d:
        paths = {k: os.path.join(d, k) for k in ("c.json", "p.f32", "b.bin", "o.bin")}
        with open(paths["c.json"], "w") as fh:
            json.dump(cfg, fh)
        np.asarray(flat.float(), "<f4").tofile(paths["p.f32"])
        with open(paths["b.bin"], "wb") as fh:
            np.array([2, 8], "<i4").tofile(fh)
            np.asarray(toks.reshape(-1), "<i4").tofile(fh)
        assert main(["--config", paths["c.json"], "--params", paths["p.f32"], "--batch",
                     paths["b.bin"], "--out", paths["o.bin"], "--steps", "5"]) == 0
        o = g2.read_output(paths["o.bin"])
    assert np.all(np.diff(o["losses"]) < 0), o["losses"]
    print(f"[ok] loss decreases over 5 AdamW steps: {o['losses'][0]:.6f} -> {o['losses'][-1]:.6f}")
    print("SELF-TEST PASSED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
