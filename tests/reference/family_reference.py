#!/usr/bin/env python3
"""Independent float64 PyTorch reference for the 2026 model families (issue 38).

Extends llama_reference.py (whose RMSNorm, RoPE, batch reader, AdamW loop and
output file it reuses) with what Qwen2.5, Qwen3, OLMo 2, SmolLM3, Mistral and
Gemma 3 change, written from Hugging Face transformers' modeling files
(models/{qwen2,qwen3,olmo2,smollm3,mistral,gemma3}), not from ratchet's C++:

  head_dim            q/k/v heads of head_dim, o_proj reads NH*head_dim (Qwen3, Gemma 3)
  qkv_bias            q/k/v projections with a bias, o_proj without (Qwen2)
  qk_norm per_head    RMSNorm over head_dim of each q and k head, one weight shared
                      by the heads, after the projection and before RoPE (Qwen3, Gemma 3)
  qk_norm full_width  RMSNorm over all NH*hs of q and all KV*hs of k, before the
                      reshape into heads (OLMo 2)
  norm_placement      pre (Llama); post (OLMo 2: no input norms, x + n(attn(x)),
                      h + n(mlp(h))); sandwich (Gemma 3: both)
  norm_unit_offset    every RMSNorm is x*rstd*(1+w) (Gemma3RMSNorm)
  embed_scale         embeddings times sqrt(hidden), the scale a float32 tensor
                      cast to the weights' dtype (Gemma3TextScaledWordEmbedding):
                      float32-rounded, as for float32 weights
  query_pre_attn_scalar  scores scaled by scalar^-0.5 (null: head_dim^-0.5)
  mlp_act             silu (SwiGLU) or gelu_tanh (gelu_pytorch_tanh GeGLU, Gemma)
  attn_softcap        scores -> c*tanh(scores/c) after scaling, before the mask
  final_softcap       logits -> c*tanh(logits/c)
  sliding_window,     a "sliding_attention" layer's query q sees keys kv with
  layer_types         kv <= q and kv > q - W
  no_rope_layers      SmolLM3: 1 = the layer has RoPE, 0 = NoPE (null: all RoPE)
  rope_local_theta    Gemma 3's rope_local_base_freq for sliding layers (0: theta)

and the Mixture-of-Experts families of issue 39 (models/{qwen3_moe, qwen2_moe,
olmoe, mixtral}: Qwen3MoeSparseMoeBlock / Qwen2MoeTopKRouter,
OlmoeSparseMoeBlock, MixtralSparseMoeBlock, load_balancing_loss_func):

  num_experts, experts_per_tok, moe_ffn   E experts of SwiGLU size I, top k
  norm_topk_prob      the k routing weights divided by their sum (Mixtral: true)
  decoder_sparse_step, mlp_only_layers    layer l is MoE iff l not in
                      mlp_only_layers and (l+1) % step == 0; others dense (H)
  clip_qkv            OLMoE: q, k, v clamped to [-c, c] after the q/k norms
  aux_coef            the loss trained on is CE + aux_coef * E * sum_e f_e P_e
                      over the concatenated router logits of every MoE layer
  scoring_func        "softmax" (default) or "sigmoid": DeepSeek-V3's
                      DeepseekV3TopkRouter scores (models/deepseek_v3), whose
                      renormalisation divides by sum + 1e-20
  routed_scaling_factor   DeepSeek-V3: the k routing weights times this
                      (after the renormalisation; default 1)
  bias_update_rate    DeepSeek-V3's selection bias (e_score_correction_bias,
                      topk_method "noaux_tc") with its update: each MoE layer
                      chooses its top k on scores + bias (weights: the
                      unbiased scores); after each AdamW step, from that
                      step's forward's top-k counts per expert,
                      delta = rate * sign(mean - count), minus its mean, added
                      (in float32, as ratchet holds it). 0 (default): no bias.
                      The final bias is printed as "bias=" (L·E, dense rows 0)
  n_shared_experts    DeepSeek-V3's shared experts (DeepseekV3MoE.shared_experts,
                      as dots1 has them): one SwiGLU MLP of hidden size
                      moe_ffn * n on every token of a MoE layer, its output
                      added to the routed output (tensors shw1 (L, 2Is, C)
                      gate | up rows, shw2 (L, C, Is)). 0 (default): none.
  shared_expert_ffn   Qwen2-MoE's shared expert (Qwen2MoeSparseMoeBlock): one
                      SwiGLU MLP of this hidden size on every token of a MoE
                      layer (shw1, shw2), its output times
                      sigmoid(h @ shared_expert_gate) (tensor shgate (L, C))
                      before it is added to the routed output. 0 (default):
                      none; exclusive with n_shared_experts.
  n_group, topk_group DeepSeek-V3's group-limited selection
                      (DeepseekV3TopkRouter.get_topk_indices): the E experts in
                      n_group contiguous groups, each scored by the sum of its
                      two largest choice scores (scores + bias); the topk_group
                      best groups kept, the others' choice scores set to 0.0
                      (transformers' masked_fill value), then the top k.
                      1 / 1 (default): no groups
  report_ce           the loss reported (the output file's loss and losses) is
                      the cross-entropy alone (default), or with false the
                      whole CE + aux_coef * aux

The router: logits = x @ gate^T, softmax over all E, top k, then each
selected expert's SwiGLU output times its weight, summed per token. The
oracle runs it in float64 and records the smallest gap between the k-th and
(k+1)-th router logit of any token (the log of their probabilities' ratio);
a gap below MIN_ROUTING_GAP (where float32 could choose another expert;
with a selection bias: of the biased scores, below MIN_BIASED_GAP)
fails the run rather than compare two models that route differently.

Parameters come in ratchet's ParamLayout order with the empty slots left out
(see tests/reference/README.md); the output file is gpt2_reference.py's.

  /usr/bin/python3 tests/reference/family_reference.py --config C.json --params P.f32 \
      --batch B.bin --out O.bin [--steps 10] [--lr 1e-3] ...
  /usr/bin/python3 tests/reference/family_reference.py --self-test
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
import gpt2_reference as g2  # noqa: E402  (read_batch, unflatten, gradcheck, run (AdamW), I/O)
import llama_reference as lr  # noqa: E402  (inv_freq, rope)

DECAYED = {"wte", "qkvw", "attprojw", "fcw", "fcprojw", "lmhead", "routerw", "expw1", "expw2",
           "shw1", "shw2", "shgate"}
# The smallest gap between a token's k-th and (k+1)-th router logit the
# comparison accepts: float32 logits (C-term dot products of O(1) values)
# are accurate to ~1e-6, so a gap 100x wider cannot flip a top-k choice.
MIN_ROUTING_GAP = 1e-4
# With a selection bias the gap is of scores + bias, in probability units:
# float32's scores are within ~1e-7 of float64's there (values <= 1, a few
# ulps), so 1e-5 leaves a margin of 100.
MIN_BIASED_GAP = 1e-5
biased_gaps = []   # the smallest biased-score gap of each MoE forward with a bias
routing_gaps = []  # the smallest gap of each MoE forward (for the check in main)
last_aux = [None]  # the unweighted aux loss of the last forward (MoE models)
sel_bias = {}      # bias_update_rate > 0: layer -> its selection bias (E,), float32 values
sel_counts = {}    # layer -> the last forward's top-k selections per expert (E,)
sel_idx = []       # the biased choices (N, k) of this forward's MoE layers, in order

# The fields a config must have, with the Llama value a family leaves alone.
FAMILY_DEFAULTS = dict(head_dim=0, qkv_bias=False, qk_norm="none", norm_placement="pre",
                       norm_unit_offset=False, embed_scale=False, query_pre_attn_scalar=None,
                       mlp_act="silu", attn_softcap=0.0, final_softcap=0.0, sliding_window=0,
                       layer_types=None, no_rope_layers=None, rope_local_theta=0.0,
                       num_experts=0, experts_per_tok=0, moe_ffn=0, norm_topk_prob=False,
                       decoder_sparse_step=1, mlp_only_layers=[], clip_qkv=0.0, aux_coef=0.0,
                       scoring_func="softmax", routed_scaling_factor=1.0, bias_update_rate=0.0,
                       n_shared_experts=0, report_ce=True, n_group=1, topk_group=1,
                       shared_expert_ffn=0)


def layer_is_moe(cfg, l):
    """transformers' rule (Qwen2MoeDecoderLayer): experts on layer l iff l is
    not in mlp_only_layers and (l + 1) % decoder_sparse_step == 0."""
    return (cfg["num_experts"] > 0 and l not in cfg["mlp_only_layers"]
            and (l + 1) % cfg["decoder_sparse_step"] == 0)


def head_dim(cfg):
    return cfg["head_dim"] or cfg["C"] // cfg["NH"]


def param_shapes(cfg):
    """(name, shape) of the tensors the config has, in ratchet's flat order
    (ParamLayout index order, size-0 slots omitted)."""
    Vp, L, C, NH, KV, H = cfg["Vp"], cfg["L"], cfg["C"], cfg["NH"], cfg["KV"], cfg["H"]
    hs = head_dim(cfg)
    pre = cfg["norm_placement"] in ("pre", "sandwich")
    post = cfg["norm_placement"] in ("post", "sandwich")
    s = [("wte", (Vp, C))]
    if pre:
        s.append(("ln1w", (L, C)))                    # input_layernorm
    s.append(("qkvw", (L, (NH + 2 * KV) * hs, C)))    # rows q | k | v
    if cfg["qkv_bias"]:
        s.append(("qkvb", (L, (NH + 2 * KV) * hs)))
    s.append(("attprojw", (L, C, NH * hs)))
    if pre:
        s.append(("ln2w", (L, C)))                    # post_attention_layernorm (Llama) /
    # pre_feedforward (Gemma). A model with MoE layers holds the dense MLP
    # only if some layer is dense, and then for every layer (the MoE layers'
    # slices unused), as ratchet's flat buffer does.
    moe = [layer_is_moe(cfg, l) for l in range(L)]
    if not all(moe):
        s += [("fcw", (L, 2 * H, C)), ("fcprojw", (L, C, H))]
    s.append(("lnfw", (C,)))
    if not cfg["tied"]:
        s.append(("lmhead", (Vp, C)))
    if cfg["qk_norm"] == "per_head":
        s += [("qnormw", (L, hs)), ("knormw", (L, hs))]
    elif cfg["qk_norm"] == "full_width":
        s += [("qnormw", (L, NH * hs)), ("knormw", (L, KV * hs))]
    if post:
        s += [("attnpostw", (L, C)), ("mlppostw", (L, C))]  # post_attention / post_feedforward
    if any(moe):  # the gate (E, C); per expert gate_proj | up_proj rows (2I, C); down_proj (C, I)
        E, I = cfg["num_experts"], cfg["moe_ffn"]
        s += [("routerw", (L, E, C)), ("expw1", (L, E, 2 * I, C)), ("expw2", (L, E, C, I))]
        Is = shared_width(cfg)
        if Is > 0:  # the shared experts' gate_proj | up_proj rows (2Is, C); down_proj (C, Is)
            s += [("shw1", (L, 2 * Is, C)), ("shw2", (L, C, Is))]
        if cfg["shared_expert_ffn"] > 0:  # Qwen2-MoE's shared_expert_gate (1, C) per layer
            s.append(("shgate", (L, C)))
    return s


def shared_width(cfg):
    """The shared expert's hidden size: DeepSeek-V3's moe_ffn * n_shared_experts,
    or Qwen2-MoE's shared_expert_intermediate_size (0: none)."""
    return cfg["moe_ffn"] * cfg["n_shared_experts"] or cfg["shared_expert_ffn"]


def group_limited_choice(choice, cfg):
    """DeepseekV3TopkRouter.get_topk_indices' group mask on the choice scores
    (N, E): each of the n_group groups scored by the sum of its top 2, the
    topk_group best kept, the others' scores 0.0. Records the smallest gap
    between the kept and the best dropped group score (biased_gaps), so that
    a near-tie cannot flip which groups float32 keeps."""
    N, E = choice.shape
    G, ng, tg = E // cfg["n_group"], cfg["n_group"], cfg["topk_group"]
    grouped = choice.view(N, ng, G)
    group_scores = grouped.topk(min(2, G), dim=-1).values.sum(-1)
    if tg < ng:
        srt = group_scores.sort(-1, descending=True).values
        biased_gaps.append((srt[:, tg - 1] - srt[:, tg]).min().item())
    keep_idx = torch.topk(group_scores, tg, dim=-1).indices
    keep = torch.zeros_like(group_scores).scatter_(1, keep_idx, 1.0)
    mask = keep.unsqueeze(-1).expand(N, ng, G).reshape(N, E)
    return choice.masked_fill(mask == 0, 0.0)


def moe_block(h, gate_w, w1, w2, cfg, bias=None, layer=None):
    """transformers' sparse MoE block on h (B, T, C): the router's softmax
    over all experts, top k (renormalised with norm_topk_prob), each expert's
    SwiGLU on the tokens routed to it, times the routing weight, summed per
    token. Returns the output and the router logits (N, E)."""
    B, T, C = h.shape
    E, k, I = cfg["num_experts"], cfg["experts_per_tok"], cfg["moe_ffn"]
    x = h.reshape(-1, C)
    logits = x @ gate_w.T
    sigmoid = cfg["scoring_func"] == "sigmoid"
    probs = logits.sigmoid() if sigmoid else logits.softmax(-1)
    grouped = cfg["n_group"] > 1
    if grouped:  # group-limited: chosen on the masked (biased) scores, weighted by the scores
        choice = group_limited_choice(probs.detach() + (0.0 if bias is None else bias), cfg)
        _, idx = torch.topk(choice, k, dim=-1)
        top = probs.gather(-1, idx)
        if bias is not None:
            sel_counts[layer] = F.one_hot(idx, E).sum((0, 1)).double()
        sel_idx.append(idx)  # the aux loss's f: the experts each token was dispatched to
        srt = choice.sort(-1, descending=True).values
        biased_gaps.append((srt[:, k - 1] - srt[:, k]).min().item())
    elif bias is None:
        top, idx = torch.topk(probs, k, dim=-1)
    else:  # DeepseekV3TopkRouter: chosen on scores + bias, weighted by the scores
        _, idx = torch.topk(probs.detach() + bias, k, dim=-1)
        top = probs.gather(-1, idx)
        sel_counts[layer] = F.one_hot(idx, E).sum((0, 1)).double()  # for bias_update
        sel_idx.append(idx)  # the aux loss's f: the tokens each expert gets
    if k < E and not grouped:  # the k-th and (k+1)-th logits' gap: the log of the probabilities' ratio
        # (with a bias: the biased scores' gap, in probability units)
        srt = (logits if bias is None else probs + bias).detach().sort(-1, descending=True).values
        (routing_gaps if bias is None else biased_gaps).append((srt[:, k - 1] - srt[:, k]).min().item())
    if cfg["norm_topk_prob"]:
        top = top / (top.sum(-1, keepdim=True) + (1e-20 if sigmoid else 0.0))
    top = top * cfg["routed_scaling_factor"]
    out = torch.zeros_like(x)
    for e in range(E):
        tok, slot = torch.where(idx == e)
        if tok.numel() == 0:
            continue
        gu = x[tok] @ w1[e].T
        gate, up = gu[:, :I], gu[:, I:]
        y = (gate * torch.sigmoid(gate) * up) @ w2[e].T
        out = out.index_add(0, tok, y * top[tok, slot, None])
    return out.view(B, T, C), logits


def aux_loss(router_logits, cfg, sel=None):
    """load_balancing_loss_func without an attention mask: the logits of all
    MoE layers concatenated, f = the fraction of tokens that select each
    expert (summed over the k slots, no gradient), P = the mean probability,
    E * sum_e f_e P_e."""
    E, k = cfg["num_experts"], cfg["experts_per_tok"]
    # With sigmoid scores (DeepSeek-V3, which trains without this loss) P is
    # the mean sigmoid score: what ratchet's statistics hold, for the report.
    logits = torch.cat(router_logits, 0)
    probs = logits.sigmoid() if cfg["scoring_func"] == "sigmoid" else logits.softmax(-1)
    # With a selection bias, f counts the experts each token was dispatched to
    # (chosen on scores + bias), as ratchet's statistics do.
    sel = torch.cat(sel, 0) if sel else torch.topk(probs, k, dim=-1)[1]
    tokens_per_expert = F.one_hot(sel, E).double().mean(0)          # (k, E)
    return (tokens_per_expert * probs.mean(0).unsqueeze(0)).sum() * E


def norm(x, w, cfg):
    """RMSNorm; Gemma's form multiplies by (1 + w)."""
    return lr.rmsnorm(x, (1.0 + w) if cfg["norm_unit_offset"] else w, cfg["eps"])


def softcap(x, c):
    return c * torch.tanh(x / c) if c > 0 else x


def gelu_tanh(x):  # gelu_pytorch_tanh
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def sliding(cfg, l):
    t = cfg["layer_types"]
    return cfg["sliding_window"] > 0 and t is not None and t[l] == "sliding_attention"


def rope_tables(cfg, T, base):
    hs = head_dim(cfg)
    # llama_reference.inv_freq reads hs as C // NH and the base as theta
    f = lr.inv_freq(dict(cfg, C=hs * cfg["NH"], theta=base))
    ang = torch.arange(T, dtype=torch.float64)[:, None] * f[None, :]
    return ang.cos(), ang.sin()


def attention(q, k, v, cfg, window):
    """q (B,NH,T,hs), k/v (B,KV,T,hs): eager attention as HF writes it."""
    NH, KV, T, hs = cfg["NH"], cfg["KV"], q.shape[2], q.shape[3]
    k = k.repeat_interleave(NH // KV, dim=1)          # query head h reads KV head h // (NH/KV)
    v = v.repeat_interleave(NH // KV, dim=1)
    s = cfg["query_pre_attn_scalar"]
    scaling = (s if s is not None else hs) ** -0.5
    att = softcap((q @ k.transpose(-2, -1)) * scaling, cfg["attn_softcap"])
    qi = torch.arange(T)[:, None]
    ki = torch.arange(T)[None, :]
    allowed = ki <= qi
    if window > 0:
        allowed = allowed & (ki > qi - window)
    att = att.masked_fill(~allowed, float("-inf")).softmax(-1)
    return att @ v


def forward(flat, cfg, inputs, targets):
    p = g2.unflatten(flat, param_shapes(cfg))
    B, T = inputs.shape
    C, NH, KV, H, V = cfg["C"], cfg["NH"], cfg["KV"], cfg["H"], cfg["V"]
    hs = head_dim(cfg)
    pre = cfg["norm_placement"] in ("pre", "sandwich")
    post = cfg["norm_placement"] in ("post", "sandwich")
    glob = rope_tables(cfg, T, cfg["theta"])
    local = rope_tables(cfg, T, cfg["rope_local_theta"]) if cfg["rope_local_theta"] > 0 else glob
    x = p["wte"][inputs]
    router_logits = []
    sel_idx.clear()
    if cfg["embed_scale"]:
        x = x * float(np.float32(math.sqrt(C)))
    for l in range(cfg["L"]):
        swa = sliding(cfg, l)
        h = norm(x, p["ln1w"][l], cfg) if pre else x
        qkv = h @ p["qkvw"][l].T
        if cfg["qkv_bias"]:
            qkv = qkv + p["qkvb"][l]
        q, k, v = qkv.split([NH * hs, KV * hs, KV * hs], dim=-1)
        if cfg["qk_norm"] == "full_width":            # OLMo 2, OLMoE: before the view into heads
            q, k = norm(q, p["qnormw"][l], cfg), norm(k, p["knormw"][l], cfg)
        if cfg["clip_qkv"] > 0:                       # OLMoE: after the norms
            c = cfg["clip_qkv"]
            q, k, v = q.clamp(-c, c), k.clamp(-c, c), v.clamp(-c, c)
        q, k, v = (t.view(B, T, -1, hs) for t in (q, k, v))
        if cfg["qk_norm"] == "per_head":              # Qwen3 / Gemma 3: over head_dim
            q, k = norm(q, p["qnormw"][l], cfg), norm(k, p["knormw"][l], cfg)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        nr = cfg["no_rope_layers"]
        if nr is None or nr[l]:
            cos, sin = local if swa else glob
            q, k = lr.rope(q, cos, sin), lr.rope(k, cos, sin)
        y = attention(q, k, v, cfg, cfg["sliding_window"] if swa else 0)
        o = y.transpose(1, 2).reshape(B, T, NH * hs) @ p["attprojw"][l].T
        x = x + (norm(o, p["attnpostw"][l], cfg) if post else o)
        h = norm(x, p["ln2w"][l], cfg) if pre else x
        if layer_is_moe(cfg, l):
            bias = None
            if cfg["bias_update_rate"] > 0:
                bias = sel_bias.setdefault(l, torch.zeros(cfg["num_experts"], dtype=torch.float64))
            m, rl = moe_block(h, p["routerw"][l], p["expw1"][l], p["expw2"][l], cfg, bias, l)
            router_logits.append(rl)
            Is = shared_width(cfg)
            if Is > 0:  # DeepseekV3MoE: routed + shared_experts(h)
                gu = h @ p["shw1"][l].T
                g, u = gu[..., :Is], gu[..., Is:]
                sh = (g * torch.sigmoid(g) * u) @ p["shw2"][l].T
                if cfg["shared_expert_ffn"] > 0:  # Qwen2MoeSparseMoeBlock: sigmoid(shared_expert_gate(h)) * shared
                    sh = torch.sigmoid(h @ p["shgate"][l].unsqueeze(-1)) * sh
                m = m + sh
        else:
            gate_up = h @ p["fcw"][l].T
            gate, up = gate_up[..., :H], gate_up[..., H:]
            act = gelu_tanh(gate) if cfg["mlp_act"] == "gelu_tanh" else gate * torch.sigmoid(gate)
            m = (act * up) @ p["fcprojw"][l].T
        x = x + (norm(m, p["mlppostw"][l], cfg) if post else m)
    x = norm(x, p["lnfw"], cfg)
    logits = softcap(x @ (p["wte"] if cfg["tied"] else p["lmhead"]).T, cfg["final_softcap"])
    loss = F.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1))
    if router_logits:
        last_aux[0] = aux_loss(router_logits, cfg, sel_idx).item()
    if router_logits and cfg["aux_coef"] > 0:
        # Trained on CE + coef * aux, reported as CE (ratchet's `loss`, like
        # its JSONL's, is the cross-entropy): the value of a - a.detach() is
        # exactly 0 and its gradient is a's.
        a = cfg["aux_coef"] * aux_loss(router_logits, cfg, sel_idx)
        loss = loss + (a - a.detach()) if cfg["report_ce"] else loss + a
    return logits, loss


def bias_update(cfg):
    """ratchet's moe::bias_update (torchtitan's rule) on every MoE layer, from
    sel_counts: the rate as the float32 it is in ratchet, the bias rounded to
    float32 after each update."""
    rate = float(np.float32(cfg["bias_update_rate"]))
    for l, load in sel_counts.items():
        if load.sum() == 0:
            continue
        delta = rate * torch.sign(load.mean() - load)
        sel_bias[l] = (sel_bias[l] + (delta - delta.mean())).float().double()


def weight_decay_mask(cfg, wd):
    return torch.cat([torch.full((math.prod(s),), wd if name in DECAYED else 0.0,
                                 dtype=torch.float64) for name, s in param_shapes(cfg)])


def check_config(cfg, where):
    """Fills the family defaults and refuses what the model cannot mean."""
    cfg = dict(FAMILY_DEFAULTS, **cfg)
    need = ["V", "Vp", "L", "NH", "KV", "C", "H", "eps", "theta", "rope_factor", "rope_low",
            "rope_high", "rope_orig", "tied", "maxT"]
    missing = [k for k in need if k not in cfg]
    if missing:
        sys.exit(f"{where}: missing {missing}")
    for key in ("layer_types", "no_rope_layers"):
        if cfg[key] is not None and len(cfg[key]) != cfg["L"]:
            sys.exit(f"{where}: {key} has {len(cfg[key])} entries for {cfg['L']} layers")
    if cfg["num_experts"] > 0:
        E, k = cfg["num_experts"], cfg["experts_per_tok"]
        if not (1 <= k <= E) or cfg["moe_ffn"] < 1 or cfg["decoder_sparse_step"] < 1:
            sys.exit(f"{where}: experts_per_tok {k} must be in 1..num_experts {E}, moe_ffn "
                     f"{cfg['moe_ffn']} and decoder_sparse_step {cfg['decoder_sparse_step']} >= 1")
        if not (isinstance(cfg["n_shared_experts"], int) and cfg["n_shared_experts"] >= 0):
            sys.exit(f"{where}: n_shared_experts {cfg['n_shared_experts']!r} must be an integer >= 0")
        sef = cfg["shared_expert_ffn"]
        if not (isinstance(sef, int) and sef >= 0) or (sef > 0 and cfg["n_shared_experts"] > 0):
            sys.exit(f"{where}: shared_expert_ffn {sef!r} must be an integer >= 0, and 0 beside "
                     f"n_shared_experts {cfg['n_shared_experts']}")
        ng, tg = cfg["n_group"], cfg["topk_group"]
        if ng < 1 or E % ng or not 1 <= tg <= ng or k > tg * (E // ng):
            sys.exit(f"{where}: n_group {ng} must divide num_experts {E}, topk_group {tg} be in "
                     f"1..n_group and experts_per_tok {k} <= topk_group * E / n_group")
        if not cfg["bias_update_rate"] >= 0:
            sys.exit(f"{where}: bias_update_rate {cfg['bias_update_rate']} must be >= 0")
        if cfg["scoring_func"] not in ("softmax", "sigmoid") or not cfg["routed_scaling_factor"] > 0:
            sys.exit(f"{where}: scoring_func {cfg['scoring_func']!r} must be softmax or sigmoid "
                     f"and routed_scaling_factor {cfg['routed_scaling_factor']} > 0")
    for key, ok in (("qk_norm", ("none", "per_head", "full_width")),
                    ("norm_placement", ("pre", "post", "sandwich")),
                    ("mlp_act", ("silu", "gelu_tanh"))):
        if cfg[key] not in ok:
            sys.exit(f"{where}: {key} {cfg[key]!r} is not one of {ok}")
    return cfg


def read_params(path, cfg):
    return lr.read_params(path, cfg, param_shapes)


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
    with open(a.config) as f:
        cfg = check_config(json.load(f), a.config)
    flat = read_params(a.params, cfg)
    inputs, targets = g2.read_batch(a.batch)
    if inputs.shape[1] > cfg["maxT"]:
        sys.exit(f"T={inputs.shape[1]} exceeds max_seq_len={cfg['maxT']}")
    fwd = forward
    if cfg["num_experts"] > 0 and cfg["bias_update_rate"] > 0:
        # The update after each AdamW step from that step's counts: before
        # every forward but the first (g2.run makes one forward per step).
        calls = [0]

        def fwd(flat, cfg, inputs, targets):
            if calls[0] > 0:
                bias_update(cfg)
            calls[0] += 1
            return forward(flat, cfg, inputs, targets)
    r = g2.run(cfg, flat, inputs, targets, a, fwd=fwd, wd=weight_decay_mask(cfg, a.weight_decay))
    final_bias = None
    if fwd is not forward:
        bias_update(cfg)  # after the last step
        E = cfg["num_experts"]
        final_bias = [v for l in range(cfg["L"])
                      for v in (sel_bias[l].tolist() if l in sel_bias else [0.0] * E)]
        sel_bias.clear()  # aux0 below is of the initial parameters and bias
    if biased_gaps and min(biased_gaps) < MIN_BIASED_GAP:
        sys.exit(f"routing near-tie: a token's k-th and (k+1)-th biased scores (scores + "
                 f"selection bias) differ by {min(biased_gaps):.3g} < {MIN_BIASED_GAP} in some "
                 f"forward; float32 may choose another expert there: change the rate or the inputs")
    if routing_gaps and min(routing_gaps) < MIN_ROUTING_GAP:
        sys.exit(f"routing near-tie: a token's k-th and (k+1)-th router logits differ by "
                 f"{min(routing_gaps):.3g} < {MIN_ROUTING_GAP} in some forward; float32 may choose "
                 f"another expert there: widen the router's margins or change the inputs")
    g2.write_output(a.out, cfg, inputs.shape[0], inputs.shape[1], a.steps, r)
    print(f"loss0={r['loss']:.10f} params={r['grads'].numel()} -> {a.out}")
    if cfg["num_experts"] > 0:  # the initial parameters' aux loss, unweighted, for the caller to compare
        forward(flat, cfg, inputs, targets)
        print(f"aux0={last_aux[0]:.17g}")
    if final_bias is not None:
        print("bias=" + ",".join(f"{v:.9g}" for v in final_bias))
    return 0


# ---- self-test ---------------------------------------------------------------

BASE = dict(V=37, Vp=128, L=3, NH=4, KV=2, C=32, H=40, eps=1e-5, theta=500.0, rope_factor=0.0,
            rope_low=1.0, rope_high=4.0, rope_orig=64, tied=True, maxT=16)
SW = "sliding_attention"
FULL = "full_attention"
SELF_TEST_FAMILIES = {
    "qwen2": dict(qkv_bias=True, sliding_window=5, layer_types=[FULL, SW, SW]),
    "qwen3": dict(head_dim=12, qk_norm="per_head", tied=False),
    "olmo2": dict(qk_norm="full_width", norm_placement="post", tied=False),
    "smollm3": dict(no_rope_layers=[1, 0, 1]),
    "mistral": dict(sliding_window=3, layer_types=[SW, SW, SW]),
    "gemma3": dict(head_dim=16, qk_norm="per_head", norm_placement="sandwich",
                   norm_unit_offset=True, embed_scale=True, query_pre_attn_scalar=11.0,
                   mlp_act="gelu_tanh", attn_softcap=7.0, final_softcap=5.0, sliding_window=4,
                   layer_types=[SW, SW, FULL], rope_local_theta=300.0),
    # Issue 39: 4 layers; Qwen3-MoE's layer 1 MoE, 0 and 2 dense by the step,
    # 3 dense by mlp_only_layers; OLMoE clipping about half of q/k/v.
    "qwen3_moe": dict(L=4, head_dim=12, qk_norm="per_head", tied=False, num_experts=4,
                      experts_per_tok=2, moe_ffn=8, norm_topk_prob=True, decoder_sparse_step=2,
                      mlp_only_layers=[3], aux_coef=0.01, report_ce=False),
    "olmoe": dict(L=2, qk_norm="full_width", tied=False, num_experts=4, experts_per_tok=2,
                  moe_ffn=8, clip_qkv=0.6, aux_coef=0.01, report_ce=False),
    "mixtral": dict(L=2, num_experts=4, experts_per_tok=2, moe_ffn=8, norm_topk_prob=True,
                    sliding_window=3, layer_types=[SW, SW], tied=False),
    # Qwen2-MoE: q/k/v biases, layer 1 MoE by the step (0 dense), a gated
    # shared expert of width 12 (not a multiple of moe_ffn 8).
    "qwen2_moe": dict(L=2, qkv_bias=True, tied=False, num_experts=4, experts_per_tok=2, moe_ffn=8,
                      decoder_sparse_step=2, shared_expert_ffn=12, aux_coef=0.01, report_ce=False),
}


def random_params(cfg, gen):
    parts = []
    for name, s in param_shapes(cfg):
        w = torch.randn(s, generator=gen, dtype=torch.float64) * 0.2
        if name.startswith("ln") or name.endswith("normw") or name.endswith("postw"):
            w = w + (0.0 if cfg["norm_unit_offset"] else 1.0)
        if name in ("wte", "lmhead"):
            w[cfg["V"]:] = 0.0
        parts.append(w.reshape(-1))
    return torch.cat(parts)


def moe_self_test(gen, inputs, targets):
    """Properties of the MoE block that pin it down apart from the gradients."""
    # The aux loss is exactly k under uniform routing (a zero gate: every
    # probability 1/E, so sum_e f_e P_e = k / E whatever top-k picks).
    cfg = check_config(dict(BASE, **SELF_TEST_FAMILIES["olmoe"]), "olmoe")
    for E, k in ((4, 2), (5, 3), (8, 1)):
        c = dict(cfg, num_experts=E, experts_per_tok=k)
        x = torch.randn(13, cfg["C"], generator=gen, dtype=torch.float64)
        aux = aux_loss([x @ torch.zeros(E, cfg["C"], dtype=torch.float64).T], c)
        assert abs(aux.item() - k) < 1e-12, (E, k, aux.item())
    print("[ok] aux loss = k under uniform routing (E, k) = (4, 2), (5, 3), (8, 1)")

    # report_ce: the loss reported is the cross-entropy, the gradient still
    # the whole CE + coef * aux's (the finite differences above check that one).
    cfg = check_config(dict(BASE, **SELF_TEST_FAMILIES["qwen3_moe"]), "qwen3_moe")
    flat = random_params(cfg, gen)
    _, whole, g_whole = g2.loss_and_grad(flat, cfg, inputs, targets, forward)
    _, ce, g_ce = g2.loss_and_grad(flat, dict(cfg, report_ce=True), inputs, targets, forward)
    _, ce_only, g_ce_only = g2.loss_and_grad(flat, dict(cfg, aux_coef=0.0), inputs, targets, forward)
    assert ce == ce_only and whole > ce, (whole, ce, ce_only)
    assert torch.equal(g_ce, g_whole) and not torch.equal(g_ce, g_ce_only)
    print(f"[ok] report_ce: loss {ce:.6f} is the CE (CE + coef*aux {whole:.6f}), gradients the whole's")

    # One expert, top 1: the MoE block is the dense SwiGLU MLP with its weights.
    cfg = check_config(dict(BASE, num_experts=1, experts_per_tok=1, moe_ffn=BASE["H"]), "e1")
    flat = random_params(cfg, gen)
    p = g2.unflatten(flat, param_shapes(cfg))
    dense = check_config(dict(BASE), "dense")
    parts = []
    for name, shape in param_shapes(dense):
        parts.append({"fcw": p["expw1"][:, 0], "fcprojw": p["expw2"][:, 0]}.get(name, p.get(name)).reshape(-1))
    a = forward(flat, cfg, inputs, targets)[1].item()
    b = forward(torch.cat(parts), dense, inputs, targets)[1].item()
    assert abs(a - b) < 1e-12, (a, b)
    print("[ok] E = 1, k = 1 is the dense SwiGLU MLP")

    # norm_topk_prob changes the model (k < E); with k = E it cannot (the weights sum to 1).
    cfg = check_config(dict(BASE, **SELF_TEST_FAMILIES["mixtral"]), "mixtral")
    flat = random_params(cfg, gen)
    a = forward(flat, cfg, inputs, targets)[1].item()
    b = forward(flat, dict(cfg, norm_topk_prob=False), inputs, targets)[1].item()
    assert abs(a - b) > 1e-6, (a, b)
    c4 = dict(cfg, experts_per_tok=4)
    a = forward(flat, c4, inputs, targets)[1].item()
    b = forward(flat, dict(c4, norm_topk_prob=False), inputs, targets)[1].item()
    assert abs(a - b) < 1e-12, (a, b)
    print("[ok] norm_topk_prob matters for k < E and not for k = E")

    # An expert no token chooses gets no gradient, and the finite differences
    # still pass: top 1 of 4 with gate rows a, -a, b, 0 -> expert 3's logit 0
    # is below max(x.a, -x.a) for every token.
    cfg = check_config(dict(BASE, **dict(SELF_TEST_FAMILIES["mixtral"], experts_per_tok=1)), "empty")
    flat = random_params(cfg, gen)
    p = g2.unflatten(flat, param_shapes(cfg))
    for l in range(cfg["L"]):
        p["routerw"][l, 1] = -p["routerw"][l, 0]
        p["routerw"][l, 3] = 0.0
    flat = torch.cat([p[name].reshape(-1) for name, _ in param_shapes(cfg)])
    routed = routing_counts(flat, cfg, inputs)
    assert all(counts[3] == 0 for counts in routed), routed
    _, _, grads = g2.loss_and_grad(flat, cfg, inputs, targets, forward)
    gp = g2.unflatten(grads, param_shapes(cfg))
    assert gp["expw1"][:, 3].abs().max().item() == 0.0 and gp["expw2"][:, 3].abs().max().item() == 0.0
    worst = g2.gradcheck(lambda z: forward(z, cfg, inputs, targets)[1].item(), flat, grads,
                         param_shapes(cfg), gen, real={"wte": cfg["V"] * cfg["C"], "lmhead": cfg["V"] * cfg["C"]})
    print(f"[ok] an expert with no tokens (tokens per expert by layer {routed}) gets zero "
          f"gradients; gradcheck worst rel err {worst:.2e}")

    # Layer pattern: decoder_sparse_step 2 with mlp_only_layers [3] of 4 layers -> only layer 1.
    cfg = check_config(dict(BASE, **SELF_TEST_FAMILIES["qwen3_moe"]), "qwen3_moe")
    assert [layer_is_moe(cfg, l) for l in range(4)] == [False, True, False, False]
    assert [layer_is_moe(dict(cfg, mlp_only_layers=[]), l) for l in range(4)] == [False, True, False, True]
    print("[ok] decoder_sparse_step 2, mlp_only_layers [3]: MoE layers [1]")

    # Qwen2-MoE's gate: at shgate = 0 every token's scale is sigmoid(0) = 1/2,
    # so the gated model of width 16 is the ungated one (n_shared_experts 2
    # of moe_ffn 8) with shw2 halved; a nonzero gate row changes the loss.
    gcfg = check_config(dict(BASE, **dict(SELF_TEST_FAMILIES["qwen2_moe"], shared_expert_ffn=16)), "qwen2_moe")
    ucfg = check_config(dict(gcfg, shared_expert_ffn=0, n_shared_experts=2), "ungated")
    gp = g2.unflatten(random_params(gcfg, gen), param_shapes(gcfg))
    gp["shgate"] = torch.zeros_like(gp["shgate"])
    up = dict(gp, shw2=gp["shw2"] * 0.5)
    del up["shgate"]
    flat_g = torch.cat([gp[n].reshape(-1) for n, _ in param_shapes(gcfg)])
    flat_u = torch.cat([up[n].reshape(-1) for n, _ in param_shapes(ucfg)])
    a = forward(flat_g, gcfg, inputs, targets)[1].item()
    b = forward(flat_u, ucfg, inputs, targets)[1].item()
    assert abs(a - b) < 1e-12, (a, b)
    gp["shgate"][1, 0] = 1.0
    flat_g = torch.cat([gp[n].reshape(-1) for n, _ in param_shapes(gcfg)])
    c = forward(flat_g, gcfg, inputs, targets)[1].item()
    assert abs(c - a) > 1e-9, (a, c)
    print("[ok] qwen2_moe: a zero shared_expert_gate halves the shared expert; a nonzero one changes the loss")

    # clip_qkv bounds: a tiny clip makes the attention's values (hence the
    # output before o_proj) at most c; a huge one is no clip.
    cfg = check_config(dict(BASE, **SELF_TEST_FAMILIES["olmoe"]), "olmoe")
    flat = random_params(cfg, gen)
    a = forward(flat, dict(cfg, clip_qkv=1e9), inputs, targets)[1].item()
    b = forward(flat, dict(cfg, clip_qkv=0.0), inputs, targets)[1].item()
    c = forward(flat, cfg, inputs, targets)[1].item()
    assert a == b and abs(c - b) > 1e-6, (a, b, c)
    print("[ok] clip_qkv: a clip above every value is none; clip 0.6 changes the model")


def routing_counts(flat, cfg, inputs):
    """Tokens per expert of each MoE layer for this forward."""
    counts = []
    orig = moe_block

    def spy(h, gate_w, w1, w2, c, bias=None, layer=None):
        out, logits = orig(h, gate_w, w1, w2, c, bias, layer)
        _, idx = torch.topk(logits.softmax(-1), c["experts_per_tok"], dim=-1)
        counts.append([int((idx == e).sum()) for e in range(c["num_experts"])])
        return out, logits
    globals()["moe_block"] = spy
    try:
        forward(flat, cfg, inputs, torch.zeros_like(inputs))
    finally:
        globals()["moe_block"] = orig
    return counts


def self_test():
    """Finite differences on every tensor of each family, and properties that
    pin each option down independently of the gradients."""
    gen = torch.Generator().manual_seed(99)
    toks = torch.randint(0, BASE["V"], (2, 2, 9), generator=gen)
    inputs, targets = toks[0], toks[1]
    for fam, opts in SELF_TEST_FAMILIES.items():
        cfg = check_config(dict(BASE, **opts), fam)
        flat = random_params(cfg, gen)
        _, _, grads = g2.loss_and_grad(flat, cfg, inputs, targets, forward)
        f = lambda x: forward(x, cfg, inputs, targets)[1].item()
        real = cfg["V"] * cfg["C"]
        worst = g2.gradcheck(f, flat, grads, param_shapes(cfg), gen,
                             real={"wte": real, "lmhead": real})
        print(f"[ok] {fam}: gradcheck of {len(param_shapes(cfg))} tensors, worst rel err "
              f"{worst:.2e}")

    # Defaults give llama_reference's model exactly.
    lcfg = dict(BASE, tied=False)
    flat = random_params(check_config(lcfg, "llama"), gen)
    a = forward(flat, check_config(lcfg, "llama"), inputs, targets)[1].item()
    b = lr.forward(flat, lcfg, inputs, targets)[1].item()
    assert abs(a - b) < 1e-12, (a, b)
    print("[ok] with every family field at its default the model is llama_reference's")

    # The window: W >= T is full attention; W = 1 attends to itself only
    # (so the output is v); at W the key q-W+1 is in and q-W is out.
    cfg = check_config(dict(BASE, head_dim=8), "w")
    q, k, v = (torch.randn(1, 4, 9, 8, generator=gen, dtype=torch.float64) for _ in range(3))
    cfg["KV"] = 4
    assert torch.allclose(attention(q, k, v, cfg, 9), attention(q, k, v, cfg, 0), atol=0)
    assert torch.allclose(attention(q, k, v, cfg, 1), v, atol=1e-15)
    W, qi = 3, 7
    base = attention(q, k, v, cfg, W)[..., qi, :]
    for kv, inside in ((qi - W + 1, True), (qi - W, False)):
        k2 = k.clone()
        k2[..., kv, :] += 1.0
        changed = not torch.equal(attention(q, k2, v, cfg, W)[..., qi, :], base)
        assert changed == inside, (kv, inside)
    print("[ok] window: W >= T is causal, W = 1 is the diagonal, key q-W+1 in and q-W out")

    # Gemma's (1+w) with w = 0 is the plain norm with w = 1; the soft-cap bounds |logits|.
    x = torch.randn(5, 16, generator=gen, dtype=torch.float64)
    gcfg = check_config(dict(BASE, norm_unit_offset=True), "g")
    assert torch.allclose(norm(x, torch.zeros(16, dtype=torch.float64), gcfg),
                          lr.rmsnorm(x, torch.ones(16, dtype=torch.float64), gcfg["eps"]))
    gcfg = check_config(dict(BASE, **SELF_TEST_FAMILIES["gemma3"]), "gemma3")
    big = random_params(gcfg, gen) * 30
    capped = forward(big, gcfg, inputs, targets)[0].abs().max().item()
    uncapped = forward(big, dict(gcfg, final_softcap=0.0), inputs, targets)[0].abs().max().item()
    assert capped <= 5.0 < uncapped, (capped, uncapped)
    print(f"[ok] (1+w) with w = 0 is the unit norm; final soft-cap 5 bounds |logits| "
          f"(max {uncapped:.1f} uncapped)")

    # A NoPE layer: the same model with every layer NoPE is invariant to theta.
    ncfg = check_config(dict(BASE, no_rope_layers=[0, 0, 0]), "nope")
    flat = random_params(ncfg, gen)
    a = forward(flat, ncfg, inputs, targets)[1].item()
    b = forward(flat, dict(ncfg, theta=7.0), inputs, targets)[1].item()
    assert a == b, (a, b)
    c = forward(flat, dict(ncfg, no_rope_layers=[0, 1, 0]), inputs, targets)[1].item()
    assert abs(a - c) > 1e-6, (a, c)
    print("[ok] NoPE layers ignore theta; a RoPE layer among them does not")

    moe_self_test(gen, inputs, targets)

    # The file path end to end on the Gemma config.
    cfg = dict(BASE, **SELF_TEST_FAMILIES["gemma3"])
    flat = random_params(check_config(cfg, "gemma3"), gen)
    with tempfile.TemporaryDirectory() as d:
        paths = {k: os.path.join(d, k) for k in ("c.json", "p.f32", "b.bin", "o.bin")}
        with open(paths["c.json"], "w") as fh:
            json.dump(cfg, fh)
        np.asarray(flat.float(), "<f4").tofile(paths["p.f32"])
        with open(paths["b.bin"], "wb") as fh:
            np.array([2, 9], "<i4").tofile(fh)
            np.asarray(toks.reshape(-1), "<i4").tofile(fh)
        assert main(["--config", paths["c.json"], "--params", paths["p.f32"], "--batch",
                     paths["b.bin"], "--out", paths["o.bin"], "--steps", "5"]) == 0
        o = g2.read_output(paths["o.bin"])
    assert np.all(np.diff(o["losses"]) < 0), o["losses"]
    print(f"[ok] gemma3 loss decreases over 5 AdamW steps: {o['losses'][0]:.6f} -> "
          f"{o['losses'][-1]:.6f}")
    print("SELF-TEST PASSED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
