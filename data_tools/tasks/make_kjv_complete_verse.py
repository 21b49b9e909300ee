#!/usr/bin/env python3
"""Writes kjv_complete_verse.jsonl: a small multiple-choice task in the shape of
HellaSwag, made from the King James Bible (Debian's bible-kjv), for `ratchet
eval` on the demo's model (scripts/demo.sh; byte tokenizer, 128 positions).

Each example is one short verse cut at a word boundary near its middle:
  context  the verse's first half
  choices  in a random order: its true second half; the same words shuffled;
           another verse's second half (of similar length: fluent, but not
           this verse's); and that one's words shuffled
  label    the index of the true one
A model that has learnt word order beats chance (1/4) by telling the shuffled
ones apart; telling the true ending from the other verse's takes more.
Verses of at most 110 characters only, so that context + " " + ending fits the
demo model's 128 positions in bytes. Deterministic in --seed.

  bible -f "Gen1:1-Rev22:21" | python3 make_kjv_complete_verse.py --n 200 > kjv_complete_verse.jsonl
"""
import argparse
import json
import random
import sys


def shuffled(text, rng):
    words = text.split(" ")
    for _ in range(10):
        rng.shuffle(words)
        if " ".join(words) != text:
            break
    return " ".join(words)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200, help="examples")
    ap.add_argument("--seed", type=int, default=31)
    ap.add_argument("--max-chars", type=int, default=110)
    a = ap.parse_args()
    verses = []
    for line in sys.stdin:
        ref, _, text = line.rstrip("\n").partition(" ")
        text = text.strip()
        words = text.split(" ")
        if len(words) < 6 or len(text) > a.max_chars:
            continue
        cut = len(words) // 2
        verses.append((ref, " ".join(words[:cut]), " ".join(words[cut:])))
    rng = random.Random(a.seed)
    written = 0
    for i in rng.sample(range(len(verses)), len(verses)):
        if written == a.n:
            break
        ref, head, tail = verses[i]
        # another verse's second half within 15 characters of the true one's length
        pool = [v[2] for v in verses if abs(len(v[2]) - len(tail)) <= 15 and v[2] != tail]
        other = rng.choice(pool)
        endings = [tail, shuffled(tail, rng), other, shuffled(other, rng)]
        if len(set(endings)) < 4:
            continue  # too few words to shuffle into something new
        rng.shuffle(endings)
        print(json.dumps({"ref": ref, "context": head, "choices": endings,
                          "label": endings.index(tail)}, ensure_ascii=False))
        written += 1


if __name__ == "__main__":
    main()
