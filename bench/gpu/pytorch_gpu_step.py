#!/usr/bin/env python3
"""PyTorch peer for bench/gpu/compare.sh: ratchet's GPT-2 shapes and step on a GPU.

    python3 bench/gpu/pytorch_gpu_step.py --model d12 -B 16 -T 1024 --compile --json
    python3 bench/gpu/pytorch_gpu_step.py --model smollm-135m -B 16 -T 1024 --json  # transformers
    /usr/bin/python3 bench/gpu/pytorch_gpu_step.py --device cpu --model d2 -B 2 -T 32 --json

dN is bench/cpu/pytorch_step.py's GPT (same shapes, init, step and AdamW
hyper-parameters), here with BF16 autocast, F.scaled_dot_product_attention
(causal), fused AdamW and TF32 matmuls. smollm-135m is transformers'
LlamaForCausalLM with SmolLM-135M's config (as ratchet's preset; sdpa
attention). --compile wraps the model in torch.compile.

A torch without scaled_dot_product_attention (Debian's 1.13, used by the CPU
test) falls back to matmul + mask attention, and one without torch.compile
runs eager; the JSON's "notes" says so. A run that cannot happen (OOM, no
transformers, no CUDA) prints {"error": ...} and exits 1: compare.sh shows the
reason in its row, never a number.

FLOPs per token as ratchet's train_flops_per_token: 6 * (params except wpe,
tied wte counted once) + 12 * L * C * T. Peak memory: torch.cuda's
max_memory_allocated (CPU: the process's ru_maxrss).
"""
import argparse
import json
import os
import resource
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cpu"))
from pytorch_step import GPT, VOCAB  # noqa: E402


def smollm(max_T):
    """transformers' LlamaForCausalLM, SmolLM-135M's config.json (ratchet's smollm-135m preset)."""
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                      num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=max_T,
                      rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=True,
                      attention_bias=False, mlp_bias=False)
    cfg._attn_implementation = "sdpa"
    return LlamaForCausalLM(cfg), cfg.vocab_size, 30, 576


def run(a, notes):
    dev = torch.device(a.device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("torch.cuda.is_available() is False")
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    torch.manual_seed(1)
    B, T = a.batch_size, a.seq_len
    max_T = max(1024, T)
    if a.model == "smollm-135m":
        m, vocab, L, C = smollm(max_T)
        wpe_params = 0
        hf = True
    else:
        n = int(a.model[1:])
        sdpa = hasattr(F, "scaled_dot_product_attention")
        if not sdpa:
            notes.append("no F.scaled_dot_product_attention in torch %s: matmul+mask attention"
                         % torch.__version__)
        L, C = n, 64 * n
        m, vocab = GPT(n, n, C, max_T, sdpa=sdpa), VOCAB
        wpe_params = max_T * C
        hf = False
    m = m.to(dev)
    nparams = sum(p.numel() for p in m.parameters())  # tied wte counted once
    flops_per_token = 6.0 * (nparams - wpe_params) + 12.0 * L * C * T
    decay = [p for p in m.parameters() if p.dim() == 2]
    no_decay = [p for p in m.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
    kw = dict(lr=1e-4, betas=(0.9, 0.95), eps=1e-8)
    if dev.type == "cuda":
        kw["fused"] = True
    opt = torch.optim.AdamW(groups, **kw)

    step_model = m
    if a.compile:
        if hasattr(torch, "compile"):
            step_model = torch.compile(m)
        else:
            notes.append("no torch.compile in torch %s: ran eager" % torch.__version__)

    g = torch.Generator().manual_seed(7)
    x = torch.randint(0, vocab, (B, T), generator=g).to(dev)
    y = torch.randint(0, vocab, (B, T), generator=g).to(dev)

    def loss_of():
        if hf:
            logits = step_model(input_ids=x).logits
            return F.cross_entropy(logits.reshape(-1, vocab).float(), y.reshape(-1))
        return step_model(x, y)

    amp = a.amp == "bf16"
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    loss_v = float("nan")
    timed = 0.0
    for s in range(a.warmup + a.steps):
        sync()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=amp):
            loss = loss_of()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        sync()
        if s >= a.warmup:
            timed += time.perf_counter() - t0
        if s == a.warmup + a.steps - 1:
            loss_v = loss.item()

    ms = timed / a.steps * 1e3
    tok_s = B * T / (ms / 1e3)
    if dev.type == "cuda":
        peak_mem = torch.cuda.max_memory_allocated(dev)
    else:
        peak_mem = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"model": a.model, "params": nparams, "B": B, "T": T, "step_ms": round(ms, 3),
            "tokens_per_s": round(tok_s, 1), "flops_per_token": flops_per_token,
            "mfu": flops_per_token * tok_s / (a.peak_tflops * 1e12) if a.peak_tflops > 0 else 0.0,
            "peak_mem_bytes": int(peak_mem), "loss": round(loss_v, 4)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="d12", help="dN (GPT-2) or smollm-135m (transformers)")
    ap.add_argument("-B", "--batch-size", type=int, default=16)
    ap.add_argument("-T", "--seq-len", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--amp", default="bf16", choices=["bf16", "none"])
    ap.add_argument("--peak-tflops", type=float, default=989.0, help="for MFU (H100 SXM dense BF16)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    gpt = a.model[:1] == "d" and a.model[1:].isdigit() and int(a.model[1:]) > 0
    if not gpt and a.model != "smollm-135m":
        ap.error("--model must be dN (GPT-2) or smollm-135m, not '%s'" % a.model)
    for flag, v, lo in (("-B", a.batch_size, 1), ("-T", a.seq_len, 1), ("--steps", a.steps, 1),
                        ("--warmup", a.warmup, 0)):
        if v < lo:
            ap.error("%s must be >= %d, not %d" % (flag, lo, v))
    impl = ("transformers" if a.model == "smollm-135m" else "pytorch") + (
        "+compile" if a.compile else " eager")
    notes = []
    out = {"impl": impl, "device": a.device, "torch": torch.__version__}
    try:
        out.update(run(a, notes))
        rc = 0
    except ImportError as e:
        out["error"] = "not installed: %s" % e
        rc = 1
    except Exception as e:  # OOM, compile failure, no CUDA: the reason goes into compare.sh's row
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        out["error"] = "OOM" if "out of memory" in str(e).lower() else "%s: %s" % (type(e).__name__, msg[:160])
        rc = 1
    out["notes"] = notes
    if a.json:
        print(json.dumps(out))
    elif rc:
        print("%s: %s" % (impl, out["error"]), file=sys.stderr)
    else:
        print("%s %s B=%d T=%d  %.1f ms/step  %.0f tok/s  MFU %.1f%%  peak %.2f GiB  loss %.4f%s"
              % (impl, a.model, a.batch_size, a.seq_len, out["step_ms"], out["tokens_per_s"],
                 100 * out["mfu"], out["peak_mem_bytes"] / 2**30, out["loss"],
                 "".join("  (%s)" % n for n in notes)))
    sys.exit(rc)


if __name__ == "__main__":
    main()
