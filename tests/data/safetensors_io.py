#!/usr/bin/env python3
"""An independent safetensors reader and writer for ratchet's tests.

Plain python3 (struct + json), written from the format's description, not
from ratchet's code: u64 little-endian header length, JSON header {name:
{dtype, shape, data_offsets}, "__metadata__": {...}}, raw little-endian data.

  safetensors_io.py write SPEC.json OUT.safetensors
      SPEC: {"metadata": {..}, "tensors": [{"name", "dtype" F32|BF16|F16,
             "shape", "values": [floats]}]}; written in the given order.
  safetensors_io.py read PATH
      PATH: a .safetensors file or a directory (model.safetensors, or
      model.safetensors.index.json and its shards). Prints JSON
      {"metadata": {..}, "files": [..], "tensors": {name: {"dtype", "shape",
      "values"}}} with values decoded to Python floats (exact for all three dtypes).
  safetensors_io.py make-llama DIR --layers L --channels C --heads NH
      --kv-heads KV --hidden H --vocab V [--untied] [--dtype F32|BF16]
      [--shard-bytes N] [--seed S] [--std-milli M]
      A Hugging Face Llama checkpoint with random weights: config.json, and
      model.safetensors or shards + model.safetensors.index.json. Matrices
      are N(0, M/1000) (default 20: 0.02), gains 1 +- 0.1.
"""
import json
import math
import os
import random
import struct
import sys

SIZES = {"F32": 4, "BF16": 2, "F16": 2}


def f32_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def to_bf16(x):
    b = f32_bits(x)
    b += 0x7FFF + ((b >> 16) & 1)  # round to nearest even
    return (b >> 16) & 0xFFFF


def encode(dtype, values):
    if dtype == "F32":
        return struct.pack("<%df" % len(values), *values)
    if dtype == "F16":
        return struct.pack("<%de" % len(values), *values)
    if dtype == "BF16":
        return struct.pack("<%dH" % len(values), *[to_bf16(v) for v in values])
    raise ValueError(dtype)


def decode(dtype, raw):
    n = len(raw) // SIZES[dtype]
    if dtype == "F32":
        return list(struct.unpack("<%df" % n, raw))
    if dtype == "F16":
        return list(struct.unpack("<%de" % n, raw))
    halves = struct.unpack("<%dH" % n, raw)
    return [struct.unpack("<f", struct.pack("<I", h << 16))[0] for h in halves]


def write_file(path, tensors, metadata=None):
    header, blobs, pos = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for t in tensors:
        blob = encode(t["dtype"], t["values"])
        assert len(blob) == SIZES[t["dtype"]] * math.prod(t["shape"]), t["name"]
        header[t["name"]] = {"dtype": t["dtype"], "shape": t["shape"],
                             "data_offsets": [pos, pos + len(blob)]}
        blobs.append(blob)
        pos += len(blob)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def read_file(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    meta = header.pop("__metadata__", {})
    out = {}
    for name, e in header.items():
        b, end = e["data_offsets"]
        assert end - b == SIZES[e["dtype"]] * math.prod(e["shape"]), name
        out[name] = {"dtype": e["dtype"], "shape": e["shape"], "values": decode(e["dtype"], body[b:end])}
    return meta, out


def read_any(path):
    files = [path]
    if os.path.isdir(path):
        index = os.path.join(path, "model.safetensors.index.json")
        if os.path.exists(index):
            with open(index) as f:
                wm = json.load(f)["weight_map"]
            files = [os.path.join(path, s) for s in sorted(set(wm.values()))]
        else:
            files = [os.path.join(path, "model.safetensors")]
    meta, tensors = {}, {}
    for p in files:
        m, t = read_file(p)
        meta.update(m)
        for k in t:
            assert k not in tensors, "tensor %s in two files" % k
        tensors.update(t)
    return {"metadata": meta, "files": [os.path.basename(p) for p in files], "tensors": tensors}


def make_llama(d, L, C, NH, KV, H, V, untied, dtype, shard_bytes, seed, std):
    hs = C // NH
    rng = random.Random(seed)

    def mat(r, c, scale=std):
        return [rng.gauss(0.0, scale) for _ in range(r * c)]

    def gain(c):
        return [1.0 + rng.uniform(-0.1, 0.1) for _ in range(c)]

    tensors = [("model.embed_tokens.weight", [V, C], mat(V, C))]
    for l in range(L):
        p = "model.layers.%d." % l
        tensors += [
            (p + "input_layernorm.weight", [C], gain(C)),
            (p + "self_attn.q_proj.weight", [NH * hs, C], mat(NH * hs, C)),
            (p + "self_attn.k_proj.weight", [KV * hs, C], mat(KV * hs, C)),
            (p + "self_attn.v_proj.weight", [KV * hs, C], mat(KV * hs, C)),
            (p + "self_attn.o_proj.weight", [C, NH * hs], mat(C, NH * hs)),
            (p + "post_attention_layernorm.weight", [C], gain(C)),
            (p + "mlp.gate_proj.weight", [H, C], mat(H, C)),
            (p + "mlp.up_proj.weight", [H, C], mat(H, C)),
            (p + "mlp.down_proj.weight", [C, H], mat(C, H)),
        ]
    tensors.append(("model.norm.weight", [C], gain(C)))
    if untied:
        tensors.append(("lm_head.weight", [V, C], mat(V, C)))
    os.makedirs(d, exist_ok=True)
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": C, "intermediate_size": H, "num_hidden_layers": L,
        "num_attention_heads": NH, "num_key_value_heads": KV, "vocab_size": V,
        "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "rope_scaling": None, "tie_word_embeddings": not untied,
        "torch_dtype": {"F32": "float32", "BF16": "bfloat16"}[dtype],
        "hidden_act": "silu", "attention_bias": False, "mlp_bias": False, "head_dim": hs,
        "bos_token_id": 1, "eos_token_id": 2,
    }
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    specs = [{"name": n, "dtype": dtype, "shape": s, "values": v} for n, s, v in tensors]
    shards, cur, size = [], [], 0
    for t in specs:
        b = SIZES[dtype] * math.prod(t["shape"])
        if cur and size + b > shard_bytes:
            shards.append(cur)
            cur, size = [], 0
        cur.append(t)
        size += b
    shards.append(cur)
    if len(shards) == 1:
        write_file(os.path.join(d, "model.safetensors"), shards[0], {"format": "pt"})
        return
    wm = {}
    for i, s in enumerate(shards):
        name = "model-%05d-of-%05d.safetensors" % (i + 1, len(shards))
        write_file(os.path.join(d, name), s, {"format": "pt"})
        for t in s:
            wm[t["name"]] = name
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": sum(SIZES[dtype] * math.prod(t["shape"]) for t in specs)},
                   "weight_map": wm}, f, indent=2)


def main(argv):
    if len(argv) >= 3 and argv[0] == "write":
        with open(argv[1]) as f:
            spec = json.load(f)
        write_file(argv[2], spec["tensors"], spec.get("metadata"))
    elif len(argv) == 2 and argv[0] == "read":
        json.dump(read_any(argv[1]), sys.stdout)
    elif len(argv) >= 2 and argv[0] == "make-llama":
        opts = {"--layers": 2, "--channels": 64, "--heads": 4, "--kv-heads": 2, "--hidden": 128,
                "--vocab": 300, "--dtype": "F32", "--shard-bytes": 1 << 40, "--seed": 1,
                "--std-milli": 20}
        untied, i = False, 2
        while i < len(argv):
            if argv[i] == "--untied":
                untied, i = True, i + 1
                continue
            opts[argv[i]] = argv[i + 1] if argv[i] == "--dtype" else int(argv[i + 1])
            i += 2
        make_llama(argv[1], opts["--layers"], opts["--channels"], opts["--heads"], opts["--kv-heads"],
                   opts["--hidden"], opts["--vocab"], untied, opts["--dtype"], opts["--shard-bytes"],
                   opts["--seed"], opts["--std-milli"] / 1000.0)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
