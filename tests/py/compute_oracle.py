#!/usr/bin/env python3
"""gguf-py 0.19 + numpy as the independent oracle for ds4-stream's `compute` module.

  compute_oracle.py gen DIR SEED -> writes the cases below into DIR, prints a JSON manifest

Blocks are random but VALID, built field by field: every f16 scale is finite (random finite
bit patterns for the "wide" cases: zero, subnormals, up to 65504; small realistic scales for
the "real" cases), the rest of each block is random bytes (any byte is a valid quant / grid
index). Per case DIR holds, little-endian:
  NAME.w      the raw blocks (rows x row bytes)
  NAME.deq    f32, gguf.quants.dequantize of those bytes (the bit-exact reference)
  NAME.x      f32, a random vector of `cols` values
  NAME.y64    f64, deq @ x computed in float64
  NAME.abs64  f64, |deq| @ |x| in float64 (the scale of the rounding-error bound)
  NAME.f16    (Q8_0 only) u16, deq.astype(float16): Q8_0 -> F16 as "dequantise, then round"
Also f32_to_f16.in / .out (random f32 bit patterns, no NaN, and numpy's float16 of each) and
one expert FFN (IQ2_XXS gate/up, Q2_K down) with its float64 result.
"""
import importlib.metadata
import json
import os
import sys

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize


def f16_bits(rng, n, wide):
    """n finite f16 scales as uint16 bit patterns."""
    if wide:
        bits = rng.integers(0, 0x7C00, size=n, dtype=np.uint16)  # exponent < 31: finite
        return bits | (rng.integers(0, 2, size=n, dtype=np.uint16) << 15)
    v = rng.uniform(1e-3, 1e-2, size=n) * rng.choice([-1.0, 1.0], size=n)
    return v.astype(np.float16).view(np.uint16)


def blocks(rng, ty, n, wide):
    """n valid blocks of type ty as an (n, block bytes) uint8 array."""
    _, size = GGML_QUANT_SIZES[ty]
    b = rng.integers(0, 256, size=(n, size), dtype=np.uint8)
    if ty == Q.Q8_0:
        f16_at = [0]
    elif ty == Q.Q4_K:
        f16_at = [0, 2]
    elif ty == Q.Q2_K:
        f16_at = [80, 82]
    elif ty == Q.IQ2_XXS:
        f16_at = [0]
    else:
        raise ValueError(ty)
    for off in f16_at:
        b[:, off:off + 2] = f16_bits(rng, n, wide).reshape(n, 1).view(np.uint8)
    return b


def plain(rng, ty, rows, cols, wide):
    if ty == Q.F32:
        v = rng.standard_normal((rows, cols)).astype(np.float32)
        return v.view(np.uint8)
    if wide:
        bits = f16_bits(rng, rows * cols, True).reshape(rows, cols)
    else:
        bits = rng.standard_normal((rows, cols)).astype(np.float16).view(np.uint16)
    return bits.view(np.uint8)


def write(path, arr):
    with open(path, "wb") as f:
        f.write(np.ascontiguousarray(arr).tobytes())


def weights(rng, ty, rows, cols, wide):
    """(raw bytes as (rows, row bytes) uint8, dequantised f32 (rows, cols))."""
    if ty in (Q.F32, Q.F16):
        raw = plain(rng, ty, rows, cols, wide)
    else:
        block, size = GGML_QUANT_SIZES[ty]
        assert cols % block == 0
        raw = blocks(rng, ty, rows * cols // block, wide).reshape(rows, cols // block * size)
    deq = dequantize(raw, ty).astype(np.float32, copy=False).reshape(rows, cols)
    return raw, deq


CASES = [
    # (name, type, rows, cols, wide scales)
    ("f32_small", Q.F32, 6, 100, False),
    ("f16_wide", Q.F16, 4, 100, True),
    ("f16_router", Q.F16, 16, 4096, False),
    ("q8_0_wide", Q.Q8_0, 8, 256, True),
    ("q8_0_shexp", Q.Q8_0, 16, 4096, False),
    ("q4_k_wide", Q.Q4_K, 8, 512, True),
    ("q4_k_real", Q.Q4_K, 16, 4096, False),
    ("q2_k_wide", Q.Q2_K, 8, 512, True),
    ("q2_k_down", Q.Q2_K, 16, 2048, False),
    ("iq2_xxs_wide", Q.IQ2_XXS, 8, 512, True),
    ("iq2_xxs_gate", Q.IQ2_XXS, 16, 4096, False),
]


def silu(g):
    return g / (1.0 + np.exp(-g))


def cmd_gen(out_dir, seed):
    rng = np.random.default_rng(seed)
    manifest = {"gguf_version": importlib.metadata.version("gguf"), "cases": []}
    for name, ty, rows, cols, wide in CASES:
        raw, deq = weights(rng, ty, rows, cols, wide)
        x = rng.standard_normal(cols).astype(np.float32)
        d64 = deq.astype(np.float64)
        base = os.path.join(out_dir, name)
        write(base + ".w", raw)
        write(base + ".deq", deq)
        write(base + ".x", x)
        write(base + ".y64", d64 @ x.astype(np.float64))
        write(base + ".abs64", np.abs(d64) @ np.abs(x.astype(np.float64)))
        if ty == Q.Q8_0:
            with np.errstate(over="ignore"):  # wide scales overflow f16: inf is the answer
                write(base + ".f16", deq.astype(np.float16).view(np.uint16))
        manifest["cases"].append({"name": name, "type": ty.name, "rows": rows, "cols": cols})

    # f32 -> f16 rounding: random bit patterns over the whole range (NaN excluded) plus edges.
    bits = rng.integers(0, 2**32, size=200_000, dtype=np.uint64).astype(np.uint32)
    edges = np.array([0.0, -0.0, 65504.0, 65519.99, 65520.0, 2.0**-24, 2.0**-25, 1.5 * 2.0**-25,
                      2.0**-14, 2.0**-14 - 2.0**-25, np.inf, -np.inf, 1.0 + 2.0**-11],
                     dtype=np.float32).view(np.uint32)
    bits = np.concatenate([edges, bits])
    f = bits.view(np.float32)
    f = f[~np.isnan(f)]
    write(os.path.join(out_dir, "f32_to_f16.in"), f)
    with np.errstate(over="ignore"):
        write(os.path.join(out_dir, "f32_to_f16.out"), f.astype(np.float16).view(np.uint16))

    # One expert: E = 512, FF = 256; gate/up IQ2_XXS [E, FF], down Q2_K [FF, E].
    e, ff = 512, 256
    graw, gdeq = weights(rng, Q.IQ2_XXS, ff, e, False)
    uraw, udeq = weights(rng, Q.IQ2_XXS, ff, e, False)
    draw, ddeq = weights(rng, Q.Q2_K, e, ff, False)
    x = rng.standard_normal(e).astype(np.float32)
    g = gdeq.astype(np.float64) @ x.astype(np.float64)
    u = udeq.astype(np.float64) @ x.astype(np.float64)
    clamp = float(np.float32(np.median(np.abs(g))))  # clamps about half of the gate values
    gc = np.minimum(g, clamp)
    uc = np.clip(u, -clamp, clamp)
    y = ddeq.astype(np.float64) @ (silu(gc) * uc)
    base = os.path.join(out_dir, "ffn")
    for suffix, arr in ((".gate", graw), (".up", uraw), (".down", draw), (".x", x), (".y64", y)):
        write(base + suffix, arr)
    manifest["ffn"] = {"e": e, "ff": ff, "clamp": clamp,
                       "clamped_gate": int(np.sum(g > clamp)), "clamped_up": int(np.sum(np.abs(u) > clamp))}
    print(json.dumps(manifest))


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "gen":
        cmd_gen(sys.argv[2], int(sys.argv[3]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
