#!/usr/bin/env python3
"""Where two runs part: per-tensor differences of llm.c model files and per-step
differences of their JSONL logs.

  bench/gpu/ckpt_diff.py REF.bin OTHER.bin [OTHER.bin...]

For each OTHER: one line per GPT-2 tensor (wte, wpe, ln1w, ... lnfb) that is
not bit-identical to REF's, with the count of differing elements and the
largest absolute difference, or "bit-identical"; and, where NAME.jsonl sits
beside NAME.bin, the first step whose loss or grad_norm differs from REF's.
llm.c's model file: a header of 256 int32 (magic 20240326, version 3 = fp32
or 5 = bf16, maxT, V, L, NH, C, Vp), then the tensors in that order.
Used by bench/gpu/window.sh's `zero` step (ZeRO-2/3 against ZeRO-0 on a GPU).
Exit codes: 0 compared (differences are reported, not an error); 2 a file
that is not an llm.c model file, or models of different shapes.
"""
import json
import os
import struct
import sys

import torch  # numpy may be absent (Debian's python3-torch is enough)

NAMES = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb", "ln2w", "ln2b",
         "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]


def load(path):
    with open(path, "rb") as f:
        head = struct.unpack("<256i", f.read(1024))
        magic, version, maxT, V, L, NH, C, Vp = head[:8]
        if magic != 20240326 or version not in (3, 5):
            sys.exit(f"ckpt_diff.py: {path} is not an llm.c model file (magic {magic}, version {version})")
        sizes = [Vp * C, maxT * C, L * C, L * C, L * 3 * C * C, L * 3 * C, L * C * C, L * C, L * C, L * C,
                 L * 4 * C * C, L * 4 * C, L * C * 4 * C, L * C, C, C]
        raw = bytearray(f.read())
    if version == 3:
        flat = torch.frombuffer(raw, dtype=torch.float32) if raw else torch.zeros(0)
    else:  # bf16: the top half of an fp32
        flat = torch.frombuffer(raw, dtype=torch.bfloat16).float() if raw else torch.zeros(0)
    if flat.numel() != sum(sizes):
        sys.exit(f"ckpt_diff.py: {path} holds {flat.numel()} values, its header says {sum(sizes)}")
    out, o = {}, 0
    for n, s in zip(NAMES, sizes):
        out[n] = flat[o:o + s]
        o += s
    return head[:8], out


def steps(path):
    j = os.path.splitext(path)[0] + ".jsonl"
    if not os.path.exists(j):
        return None
    return [json.loads(l) for l in open(j) if '"loss"' in l]


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__.strip().splitlines()[2])
    ref_head, ref = load(argv[1])
    ref_steps = steps(argv[1])
    for other in argv[2:]:
        if not os.path.exists(other):
            print(f"{os.path.basename(other)}: missing (its run failed)")
            continue
        head, t = load(other)
        if head != ref_head:
            sys.exit(f"ckpt_diff.py: {other} has shape {head[2:]}, {argv[1]} {ref_head[2:]}")
        diffs = []
        for n in NAMES:
            a, b = ref[n], t[n]
            ne = int((a.view(torch.int32) != b.view(torch.int32)).sum())
            if ne:
                diffs.append(f"{n} {ne}/{a.numel()} max {float((a - b).abs().max()):.3g}")
        line = "bit-identical" if not diffs else "; ".join(diffs)
        s, r = steps(other), ref_steps
        if s is not None and r is not None:
            first = next((x["step"] for x, y in zip(s, r)
                          if x["loss"] != y["loss"] or x.get("grad_norm") != y.get("grad_norm")), None)
            line += "  | steps: " + ("same loss and grad_norm" if first is None else
                                     f"first differs at step {first}")
        print(f"{os.path.basename(other)} vs {os.path.basename(argv[1])}: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
