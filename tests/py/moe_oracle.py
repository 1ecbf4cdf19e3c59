"""An independent implementation of MOE_STACK.md with gguf-py + numpy (float64 arithmetic on
weights dequantised by gguf.quants.dequantize): the oracle of tests/decode_oracle.rs.

usage: moe_oracle.py MODEL.gguf OUT.f32 TOKEN[,TOKEN...]
Writes n_tokens x E little-endian float32 (token-major), like `ds4 --dump-hidden`, and prints
`clamped N of M`: how many gate/up values the SwiGLU clamp changed (the tests check it ran).
"""
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


def main():
    path, out, toks = sys.argv[1], sys.argv[2], [int(t) for t in sys.argv[3].split(",")]
    r = GGUFReader(path)
    f = lambda k: r.fields["deepseek4." + k].contents()
    n_layer = int(f("block_count"))
    k = int(f("expert_used_count"))
    h_layers = int(f("hash_layer_count"))
    eps = float(f("attention.layer_norm_rms_epsilon"))
    scale = float(f("expert_weights_scale"))
    norm = bool(f("expert_weights_norm"))
    clamp = [float(c) for c in f("swiglu_clamp_exp")] if "deepseek4.swiglu_clamp_exp" in r.fields else [0.0] * n_layer
    t = {x.name: x for x in r.tensors}

    def w(name):
        x = t[name]
        return dequantize(x.data, x.tensor_type).astype(np.float64)

    emb = t["token_embd.weight"]
    states = []
    cache = {}

    def cw(name):
        if name not in cache:
            cache[name] = w(name)
        return cache[name]

    def expert(name, e):
        # One expert's slice only (dequantising whole routed tensors would take GiBs).
        key = (name, e)
        if key not in cache:
            x = t[name]
            cache[key] = dequantize(x.data[e], x.tensor_type).astype(np.float64)
        return cache[key]

    counts = [0, 0]

    def ffn(g, u, d, x, c):
        a, b = g @ x, u @ x
        if c > 0:
            counts[0] += int(np.sum(a > c) + np.sum(np.abs(b) > c))
            counts[1] += a.size + b.size
            a = np.minimum(a, c)
            b = np.clip(b, -c, c)
        return d @ (a / (1.0 + np.exp(-a)) * b)

    for tok in toks:
        h = dequantize(emb.data[tok : tok + 1], emb.tensor_type).astype(np.float64)[0]
        for l in range(n_layer):
            p = f"blk.{l}."
            x = h / np.sqrt(np.mean(h * h) + eps) * cw(p + "ffn_norm.weight")
            z = cw(p + "ffn_gate_inp.weight") @ x
            pr = np.sqrt(np.logaddexp(0.0, z))
            if l < h_layers:
                ids = [int(i) for i in t[p + "ffn_gate_tid2eid.weight"].data[tok][:k]]
            else:
                b = cw(p + "exp_probs_b.bias") if p + "exp_probs_b.bias" in t else np.zeros_like(pr)
                s = pr + b
                ids = sorted(range(len(s)), key=lambda i: (-s[i], i))[:k]
            wt = pr[ids]
            if norm:
                wt = wt / wt.sum()
            wt = wt * scale
            y = np.zeros_like(h)
            for j, e in enumerate(ids):
                g, u, d = (expert(p + f"ffn_{m}_exps.weight", e) for m in ("gate", "up", "down"))
                y += wt[j] * ffn(g, u, d, x, clamp[l])
            if p + "ffn_gate_shexp.weight" in t:
                y += ffn(cw(p + "ffn_gate_shexp.weight"), cw(p + "ffn_up_shexp.weight"), cw(p + "ffn_down_shexp.weight"), x, clamp[l])
            h = h + y
        states.append(h.astype(np.float32))
    np.concatenate(states).astype("<f4").tofile(out)
    print(f"clamped {counts[0]} of {counts[1]}")


if __name__ == "__main__":
    main()
