"""Reads a GGUF file with gguf-py (the independent oracle) and prints what it sees as JSON.

usage: gen_readback.py FILE DUMP_DIR NAMES MAX_DEQUANT_BYTES
  NAMES: comma-separated tensor names whose raw bytes are written to DUMP_DIR/<name>.bin
  MAX_DEQUANT_BYTES: per quantized/float tensor, dequantize at most this many leading bytes
                     (whole rows) and report finiteness and magnitude; 0 = skip
"""
import json
import os
import sys

import numpy as np
from gguf import GGUFReader, GGMLQuantizationType, quants

path, dump_dir, names, max_deq = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
names = [n for n in names.split(",") if n]
r = GGUFReader(path)

out = {"alignment": int(r.alignment), "data_offset": int(r.data_offset), "tensors": [], "fields": {}}
for t in r.tensors:
    out["tensors"].append({
        "name": t.name,
        "type": t.tensor_type.name,
        "shape": [int(x) for x in t.shape],
        "offset": int(t.data_offset),
        "nbytes": int(t.n_bytes),
    })

for k, f in r.fields.items():
    if k.startswith("GGUF."):
        continue
    v = f.contents()
    if k == "tokenizer.ggml.tokens":
        v = {"count": len(v), "first": v[:3], "last": v[-1]}
    elif isinstance(v, float):
        v = float(np.float32(v))
    elif isinstance(v, list) and v and isinstance(v[0], float):
        v = [float(np.float32(x)) for x in v]
    out["fields"][k] = {"types": [x.name for x in f.types], "value": v}

by_name = {t.name: t for t in r.tensors}
for n in names:
    t = by_name[n]
    with open(os.path.join(dump_dir, n + ".bin"), "wb") as fh:
        fh.write(np.ascontiguousarray(t.data).tobytes())

deq = {}
if max_deq > 0:
    for t in r.tensors:
        q = t.tensor_type
        if q.name not in ("IQ2_XXS", "Q2_K", "Q8_0", "Q4_K", "F16", "F32"):
            continue
        raw = np.ascontiguousarray(t.data).view(np.uint8).reshape(-1)
        bs, ts = quants.GGML_QUANT_SIZES[q]
        row = int(t.shape[0]) // bs * ts
        take = max(row, min(len(raw), max_deq) // row * row)
        d = quants.dequantize(raw[:take].reshape(-1, row), q)
        deq[t.name] = {
            "type": q.name,
            "n": int(d.size),
            "finite": bool(np.isfinite(d).all()),
            "max_abs": float(np.abs(d).max()),
            "mean_abs": float(np.abs(d).mean()),
        }
out["dequant"] = deq
print(json.dumps(out))
