#!/usr/bin/python3
"""Cross-entropy loss of a Hugging Face Llama checkpoint, computed the way
transformers' LlamaForCausalLM does (modeling_llama.py), in float64 torch, from
the HF tensor names alone: the independent check that ratchet maps those names
onto its own layout with the same meaning.

  hf_llama_loss.py DIR TOKENS.json B T

TOKENS.json: a list of token ids (the training stream). Row g of the batch is
the window starting at token g*T (ratchet's sequential order): inputs
tokens[g*T : g*T+T], targets shifted by one. Prints the mean loss.

Per layer (transformers): h = RMSNorm(x) = w * x / sqrt(mean(x^2) + eps);
q, k, v = separate projections; RoPE on q and k with rotate_half and
inv_freq_i = theta^(-2i/hs) (no rope_scaling here); each of the
num_key_value_heads heads serves num_attention_heads / num_key_value_heads
query heads (repeat_kv); causal softmax(q k^T / sqrt(hs)) v; x += o_proj;
x += down_proj(silu(gate_proj(h2)) * up_proj(h2)). Logits = norm(x) lm_head^T
(embed_tokens^T when tie_word_embeddings).
"""
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_io import read_any  # noqa: E402


def main(d, tokens_path, B, T):
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    assert cfg.get("rope_scaling") is None, "this check covers unscaled RoPE"
    w = {k: torch.tensor(v["values"], dtype=torch.float64).reshape(v["shape"])
         for k, v in read_any(d)["tensors"].items()}
    with open(tokens_path) as f:
        stream = json.load(f)
    C, NH = cfg["hidden_size"], cfg["num_attention_heads"]
    KV, L, eps = cfg["num_key_value_heads"], cfg["num_hidden_layers"], cfg["rms_norm_eps"]
    hs = C // NH
    idx = torch.tensor([stream[g * T:g * T + T] for g in range(B)])
    tgt = torch.tensor([stream[g * T + 1:g * T + T + 1] for g in range(B)])

    def rms(x, g):
        return g * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)

    inv = cfg["rope_theta"] ** (-torch.arange(0, hs, 2, dtype=torch.float64) / hs)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    cos, sin = torch.cat((ang, ang), -1).cos(), torch.cat((ang, ang), -1).sin()

    def rope(x):  # (B, heads, T, hs)
        rot = torch.cat((-x[..., hs // 2:], x[..., :hs // 2]), -1)
        return x * cos + rot * sin

    x = w["model.embed_tokens.weight"][idx]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for l in range(L):
        p = "model.layers.%d." % l
        h = rms(x, w[p + "input_layernorm.weight"])
        q = (h @ w[p + "self_attn.q_proj.weight"].T).view(B, T, NH, hs).transpose(1, 2)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).view(B, T, KV, hs).transpose(1, 2)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).view(B, T, KV, hs).transpose(1, 2)
        q, k = rope(q), rope(k)
        k = k.repeat_interleave(NH // KV, dim=1)
        v = v.repeat_interleave(NH // KV, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, NH * hs)
        x = x + y @ w[p + "self_attn.o_proj.weight"].T
        h2 = rms(x, w[p + "post_attention_layernorm.weight"])
        gate = h2 @ w[p + "mlp.gate_proj.weight"].T
        up = h2 @ w[p + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(gate) * up) @ w[p + "mlp.down_proj.weight"].T
    head = w["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else w["lm_head.weight"]
    logits = rms(x, w["model.norm.weight"]) @ head.T
    loss = torch.nn.functional.cross_entropy(logits.reshape(B * T, -1), tgt.reshape(-1))
    print("%.10f" % loss.item())


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
