#!/usr/bin/env python3
"""Inputs for bench/eval/eval_speed.sh, all synthetic (no download):
  model  an llm.c fp32 GPT-2 .bin of shape d12 (12 layers, 12 heads, 768
         channels, vocab 50257 padded to 50304, 1024 positions), weights
         N(0, 0.02) (the scores are meaningless; the time is what counts)
  task   a HellaSwag-shaped jsonl (`ctx`, 4 `endings`, `label`) of N examples of
         random common English words: contexts of 25-40 words, endings of 8-20
         (about HellaSwag validation's lengths in GPT-2 tokens)
  tokens an llm.c token file (magic 20240520, uint16 GPT-2 ids) of K random ids
Deterministic in --seed.

  make_inputs.py model OUT.bin
  make_inputs.py task OUT.jsonl --examples N
  make_inputs.py tokens OUT.bin --count K
"""
import argparse
import json

import numpy as np

WORDS = ("the of and to a in is it you that he was for on are with as his they be at one have "
         "this from or had by hot word but what some we can out other were all there when up use "
         "your how said an each she which do their time if will way about many then them write "
         "would like so these her long make thing see him two has look more day could go come did "
         "number sound no most people my over know water than call first who may down side been "
         "now find any new work part take get place made live where after back little only round "
         "man year came show every good me give our under name very through just form sentence "
         "great think say help low line differ turn cause much mean before move right boy old too "
         "same tell does set three want air well also play small end put home read hand port large "
         "spell add even land here must big high such follow act why ask men change went light kind "
         "off need house picture try us again animal point mother world near build self earth father").split()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["model", "task", "tokens"])
    ap.add_argument("out")
    ap.add_argument("--examples", type=int, default=10042)
    ap.add_argument("--count", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    if a.what == "model":
        L, NH, C, V, Vp, maxT = 12, 12, 768, 50257, 50304, 1024
        hdr = np.zeros(256, dtype="<i4")
        hdr[:8] = [20240326, 3, maxT, V, L, NH, C, Vp]
        n = Vp * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C
        w = rng.normal(0, 0.02, n).astype("<f4")
        w[V * C:Vp * C] = 0  # wte's padded rows, as llm.c writes them
        with open(a.out, "wb") as f:
            hdr.tofile(f)
            w.tofile(f)
    elif a.what == "task":
        def words(lo, hi):
            return " ".join(rng.choice(WORDS, rng.integers(lo, hi + 1)))
        with open(a.out, "w") as f:
            for i in range(a.examples):
                ex = {"ind": i, "ctx": words(25, 40).capitalize() + ".",
                      "endings": [words(8, 20) + "." for _ in range(4)], "label": int(rng.integers(4))}
                f.write(json.dumps(ex) + "\n")
    else:
        hdr = np.zeros(256, dtype="<i4")
        hdr[:3] = [20240520, 1, a.count]
        with open(a.out, "wb") as f:
            hdr.tofile(f)
            rng.integers(0, 50256, a.count).astype("<u2").tofile(f)


if __name__ == "__main__":
    main()
