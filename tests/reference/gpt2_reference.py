#!/usr/bin/env python3
"""Independent float64 PyTorch reference ("oracle") for ratchet's GPT-2 trainer.

Reads an llm.c fp32 GPT-2 checkpoint and a token batch, then writes the initial
logits, loss and gradients, plus the losses and final parameters of `steps`
hand-written AdamW updates on that same batch. All arithmetic is float64, so the
C++ FP32 error dominates any comparison. See tests/reference/README.md.

  /usr/bin/python3 tests/reference/gpt2_reference.py --checkpoint M.bin \
      --batch B.bin --out O.bin [--steps 10] [--lr 1e-3] ...
  /usr/bin/python3 tests/reference/gpt2_reference.py --self-test
"""
import argparse
import math
import os
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

CKPT_MAGIC, CKPT_VERSION, OUT_MAGIC = 20240326, 3, 20241122
# Tensors that get weight decay (2-D matrices); biases and LayerNorm params get none.
DECAYED = {"wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw"}


def param_shapes(cfg):
    """(name, shape) of the 16 tensors, in checkpoint / flat-buffer order."""
    Vp, maxT, L, C = cfg["Vp"], cfg["maxT"], cfg["L"], cfg["C"]
    return [("wte", (Vp, C)), ("wpe", (maxT, C)), ("ln1w", (L, C)), ("ln1b", (L, C)),
            ("qkvw", (L, 3 * C, C)), ("qkvb", (L, 3 * C)), ("attprojw", (L, C, C)),
            ("attprojb", (L, C)), ("ln2w", (L, C)), ("ln2b", (L, C)),
            ("fcw", (L, 4 * C, C)), ("fcb", (L, 4 * C)), ("fcprojw", (L, C, 4 * C)),
            ("fcprojb", (L, C)), ("lnfw", (C,)), ("lnfb", (C,))]


def read_checkpoint(path):
    """Returns (cfg, flat float64 parameter tensor)."""
    raw = np.fromfile(path, dtype="<i4", count=256)
    if raw.size != 256 or raw[0] != CKPT_MAGIC or raw[1] != CKPT_VERSION:
        sys.exit(f"{path}: bad header (magic {raw[:1]}, version {raw[1:2]}); want fp32 v3")
    cfg = dict(maxT=int(raw[2]), V=int(raw[3]), L=int(raw[4]), NH=int(raw[5]),
               C=int(raw[6]), Vp=int(raw[7]))
    n = sum(math.prod(s) for _, s in param_shapes(cfg))
    data = np.fromfile(path, dtype="<f4", offset=256 * 4)
    if data.size != n:
        sys.exit(f"{path}: expected {n} floats after the header, found {data.size}")
    return cfg, torch.from_numpy(data.astype(np.float64))


def write_checkpoint(path, cfg, flat):
    hdr = np.zeros(256, dtype="<i4")
    hdr[:8] = [CKPT_MAGIC, CKPT_VERSION, cfg["maxT"], cfg["V"], cfg["L"], cfg["NH"],
               cfg["C"], cfg["Vp"]]
    with open(path, "wb") as f:
        hdr.tofile(f)
        np.asarray(flat, dtype="<f4").tofile(f)


def read_batch(path):
    raw = np.fromfile(path, dtype="<i4")
    B, T = int(raw[0]), int(raw[1])
    if raw.size != 2 + 2 * B * T:
        sys.exit(f"{path}: expected {2 + 2 * B * T} int32, found {raw.size}")
    toks = torch.from_numpy(raw[2:].astype(np.int64))
    return toks[:B * T].view(B, T), toks[B * T:].view(B, T)


def unflatten(flat, shapes):
    """Name -> view into the flat buffer (views keep autograd flowing to `flat`).
    shapes: (name, shape) in flat-buffer order (param_shapes of either model)."""
    out, off = {}, 0
    for name, shape in shapes:
        n = math.prod(shape)
        out[name] = flat[off:off + n].view(shape)
        off += n
    assert off == flat.numel(), (off, flat.numel())
    return out


def layernorm(x, w, b):
    # y = (x - mean) / sqrt(var + 1e-5) * w + b, biased variance over the last axis.
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + 1e-5) * w + b


def gelu_tanh(x):
    # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def forward(flat, cfg, inputs, targets):
    """GPT-2 (pre-LN) forward. Returns logits (B,T,Vp) and mean cross-entropy over
    all B*T positions, with the softmax taken over the first V logit columns only."""
    p = unflatten(flat, param_shapes(cfg))
    B, T = inputs.shape
    C, NH, V = cfg["C"], cfg["NH"], cfg["V"]
    hs = C // NH
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    x = p["wte"][inputs] + p["wpe"][:T]                        # (B,T,C)
    for l in range(cfg["L"]):
        h = layernorm(x, p["ln1w"][l], p["ln1b"][l])
        qkv = h @ p["qkvw"][l].T + p["qkvb"][l]                # (B,T,3C)
        q, k, v = qkv.split(C, dim=-1)
        # head i owns channels [i*hs, (i+1)*hs): (B,T,C) -> (B,NH,T,hs)
        q, k, v = (t.view(B, T, NH, hs).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)        # (B,NH,T,T)
        att = att.masked_fill(~causal, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)         # concat heads
        x = x + y @ p["attprojw"][l].T + p["attprojb"][l]
        h = layernorm(x, p["ln2w"][l], p["ln2b"][l])
        f = gelu_tanh(h @ p["fcw"][l].T + p["fcb"][l])         # (B,T,4C)
        x = x + f @ p["fcprojw"][l].T + p["fcprojb"][l]
    x = layernorm(x, p["lnfw"], p["lnfb"])
    logits = x @ p["wte"].T                                    # tied lm_head, all Vp rows
    loss = F.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1))
    return logits, loss


def loss_and_grad(flat, cfg, inputs, targets, fwd=None):
    flat = flat.detach().clone().requires_grad_(True)
    logits, loss = (fwd or forward)(flat, cfg, inputs, targets)
    loss.backward()
    return logits.detach(), loss.item(), flat.grad.detach()


def weight_decay_mask(cfg, wd):
    return torch.cat([torch.full((math.prod(s),), wd if name in DECAYED else 0.0,
                                 dtype=torch.float64) for name, s in param_shapes(cfg)])


def run(cfg, flat, inputs, targets, a, fwd=None, wd=None):
    """Initial logits/loss/grads, then `a.steps` AdamW steps. Returns the output dict.
    fwd (default: GPT-2's forward) and wd (the per-element weight decay) let
    llama_reference.py reuse the optimizer loop with its own model."""
    V = cfg["V"]
    if inputs.min() < 0 or inputs.max() >= V or targets.min() < 0 or targets.max() >= V:
        sys.exit(f"batch tokens must lie in [0, {V})")
    if inputs.shape[1] > cfg["maxT"]:
        sys.exit(f"T={inputs.shape[1]} exceeds max_seq_len={cfg['maxT']}")
    logits0, loss0, grads0 = loss_and_grad(flat, cfg, inputs, targets, fwd)
    if wd is None:
        wd = weight_decay_mask(cfg, a.weight_decay)
    p = flat.clone()
    m, v = torch.zeros_like(p), torch.zeros_like(p)
    losses, g = [], grads0
    for t in range(1, a.steps + 1):
        if t > 1:  # loss/grad at the current params (step 1 reuses the initial ones)
            _, loss, g = loss_and_grad(p, cfg, inputs, targets, fwd)
        else:
            loss = loss0
        losses.append(loss)
        # global-norm clipping: g <- g * min(1, clip / ||g||_2)
        norm = g.norm().item()
        scale = min(1.0, a.grad_clip / norm) if a.grad_clip > 0 and norm > 0 else 1.0
        g = g * scale
        m = a.beta1 * m + (1 - a.beta1) * g
        v = a.beta2 * v + (1 - a.beta2) * g * g
        mhat = m / (1 - a.beta1 ** t)
        vhat = v / (1 - a.beta2 ** t)
        # decoupled weight decay, applied to the pre-update parameter value
        p = p - a.lr * (mhat / (vhat.sqrt() + a.eps) + wd * p)
    return dict(logits=logits0, loss=loss0, grads=grads0, losses=losses, params=p)


def write_output(path, cfg, B, T, steps, r):
    with open(path, "wb") as f:
        np.array([OUT_MAGIC, B, T, cfg["Vp"], r["grads"].numel(), steps], "<i4").tofile(f)
        for arr in (r["logits"].reshape(-1), [r["loss"]], r["grads"], r["losses"], r["params"]):
            np.asarray(arr, dtype="<f8").tofile(f)


def read_output(path):
    hdr = np.fromfile(path, dtype="<i4", count=6)
    magic, B, T, Vp, n, steps = (int(x) for x in hdr)
    assert magic == OUT_MAGIC, magic
    body = np.fromfile(path, dtype="<f8", offset=24)
    sizes = [B * T * Vp, 1, n, steps, n]
    assert body.size == sum(sizes), (body.size, sizes)
    parts = np.split(body, np.cumsum(sizes)[:-1])
    return dict(B=B, T=T, Vp=Vp, n=n, steps=steps, logits=parts[0].reshape(B, T, Vp),
                loss=parts[1][0], grads=parts[2], losses=parts[3], params=parts[4])


def add_run_args(ap):
    """The AdamW run's options (shared with llama_reference.py)."""
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.95)
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--self-test", action="store_true")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint")
    ap.add_argument("--batch")
    ap.add_argument("--out")
    add_run_args(ap)
    a = ap.parse_args(argv)
    if a.self_test:
        return self_test()
    if not (a.checkpoint and a.batch and a.out):
        ap.error("--checkpoint, --batch and --out are required")
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    cfg, flat = read_checkpoint(a.checkpoint)
    inputs, targets = read_batch(a.batch)
    r = run(cfg, flat, inputs, targets, a)
    write_output(a.out, cfg, inputs.shape[0], inputs.shape[1], a.steps, r)
    print(f"loss0={r['loss']:.10f} loss_last={r['losses'][-1] if r['losses'] else r['loss']:.10f}"
          f" params={r['grads'].numel()} -> {a.out}")
    return 0


def gradcheck(f, flat, grads, shapes, gen, real=None, padded=()):
    """Central finite differences of the loss f (h = 1e-6, float64) at 4 random
    entries of every tensor against the analytic gradient; asserts a relative
    error below 1e-5 and returns the worst. real: tensor name -> how many of
    its leading entries to sample from (the real, unpadded vocab rows); padded:
    tensors whose last (padded) entry is checked too. Shared by both models'
    self-tests."""
    h, off, worst = 1e-6, 0, 0.0
    for name, s in shapes:
        size = math.prod(s)
        idx = torch.randint(0, (real or {}).get(name, size), (4,), generator=gen).tolist()
        if name in padded:
            idx.append(size - 1)
        for i in idx:
            e = torch.zeros_like(flat)
            e[off + i] = h
            fd = (f(flat + e) - f(flat - e)) / (2 * h)
            an = grads[off + i].item()
            err = abs(fd - an) / max(1e-3, abs(fd), abs(an))
            worst = max(worst, err)
            assert err < 1e-5, f"{name}[{i}]: analytic {an:.10e} vs fd {fd:.10e}"
        off += size
    return worst


def self_test():
    """Tiny random model: finite-difference gradient check, loss decrease, file round trip."""
    gen = torch.Generator().manual_seed(1234)
    cfg = dict(maxT=16, V=37, L=2, NH=2, C=16, Vp=128)
    B, T = 2, 8
    parts = []
    for name, s in param_shapes(cfg):
        w = torch.randn(s, generator=gen, dtype=torch.float64) * (0.02 if name.endswith("b") else 0.2)
        if name in ("ln1w", "ln2w", "lnfw"):
            w = w + 1.0
        if name == "wte":
            w[cfg["V"]:] = 0.0  # padded vocab rows are zero
        parts.append(w.reshape(-1))
    flat = torch.cat(parts).float().double()  # exactly representable in the fp32 file
    toks = torch.randint(0, cfg["V"], (2, B, T), generator=gen)
    with tempfile.TemporaryDirectory() as d:
        ck, bt, out = (os.path.join(d, f) for f in ("model.bin", "batch.bin", "out.bin"))
        write_checkpoint(ck, cfg, flat)
        with open(bt, "wb") as f:
            np.array([B, T], "<i4").tofile(f)
            np.asarray(toks.reshape(-1), "<i4").tofile(f)
        assert main(["--checkpoint", ck, "--batch", bt, "--out", out, "--steps", "10"]) == 0
        o = read_output(out)
        cfg2, flat2 = read_checkpoint(ck)
    inputs, targets = toks[0], toks[1]
    n = flat.numel()
    # (c) output parses back with the right sizes and consistent content
    assert cfg2 == cfg and torch.equal(flat2, flat)
    assert (o["B"], o["T"], o["Vp"], o["n"], o["steps"]) == (B, T, cfg["Vp"], n, 10)
    assert o["losses"][0] == o["loss"] and np.all(o["logits"][..., cfg["V"]:] == 0)
    print(f"[ok] output file: B={B} T={T} Vp={cfg['Vp']} num_params={n} steps=10")
    # (a) central finite differences, h=1e-6, on a few entries of every tensor
    f = lambda x: forward(x, cfg, inputs, targets)[1].item()
    grads = torch.from_numpy(o["grads"])
    # sampled among the real (unpadded) wte rows, plus a padded one: its gradient must be 0
    worst = gradcheck(f, flat, grads, param_shapes(cfg), gen,
                      real={"wte": cfg["V"] * cfg["C"]}, padded=("wte",))
    V, C = cfg["V"], cfg["C"]
    assert torch.all(grads[V * C:cfg["Vp"] * C] == 0), "padded wte rows got gradient"
    print(f"[ok] gradcheck: {len(param_shapes(cfg))} tensors, worst rel err {worst:.2e}")
    # (b) the loss decreases over the 10 AdamW steps
    L = o["losses"]
    assert np.all(np.diff(L) < 0), f"losses not decreasing: {L}"
    print(f"[ok] loss decreases: {L[0]:.6f} -> {L[-1]:.6f} ({', '.join(f'{x:.4f}' for x in L)})")
    print("SELF-TEST PASSED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
