#!/usr/bin/env python3
"""gguf-py 0.19 as the independent oracle for ds4-stream's GGUF reader.

  gguf_oracle.py types            -> JSON: ggml types (id, name, block elems, block bytes) and
                                     metadata value types (id, name) as gguf-py defines them
  gguf_oracle.py write DIR        -> writes oracle_*.gguf files with GGUFWriter, prints their paths
  gguf_oracle.py read FILE...     -> JSON list: what GGUFReader sees in each file

`read` reports metadata with exact types (floats as their IEEE bit patterns, so no decimal
round-trip can hide a difference) and nested arrays rebuilt from GGUFReader's own parts.
"""
import importlib.metadata
import json
import os
import sys

import numpy as np
from gguf import GGUFReader, GGUFWriter, GGMLQuantizationType as Q, GGUFValueType as VT
from gguf.constants import GGML_QUANT_SIZES


def cmd_types():
    ggml = [
        {"id": int(t.value), "name": t.name, "block": GGML_QUANT_SIZES[t][0], "bytes": GGML_QUANT_SIZES[t][1]}
        for t in Q
    ]
    vts = [{"id": int(t.value), "name": t.name} for t in VT]
    print(json.dumps({"ggml": ggml, "value_types": vts, "gguf_version": importlib.metadata.version("gguf")}))


def quant(w, name, ty, dims, rng):
    """Adds a tensor of ggml type `ty` with GGUF dims `dims` (dim0 innermost) as raw bytes."""
    block, size = GGML_QUANT_SIZES[ty]
    np_shape = list(reversed(dims))
    if ty in (Q.F32, Q.F16):
        dt = np.float32 if ty == Q.F32 else np.float16
        w.add_tensor(name, rng.standard_normal(np_shape).astype(dt))
        return
    assert dims[0] % block == 0
    byte_shape = np_shape[:-1] + [dims[0] // block * size]
    raw = rng.integers(0, 256, size=byte_shape, dtype=np.uint8)
    w.add_tensor(name, raw, raw_dtype=ty)


def write_one(path, alignment, seed, big_metadata):
    rng = np.random.default_rng(seed)
    w = GGUFWriter(path, arch="oracle")
    if alignment is not None:
        w.add_custom_alignment(alignment)
    w.add_uint8("t.u8", 250)
    w.add_int8("t.i8", -128)
    w.add_uint16("t.u16", 65535)
    w.add_int16("t.i16", -32768)
    w.add_uint32("t.u32", 4294967295)
    w.add_int32("t.i32", -2147483648)
    w.add_float32("t.f32", 0.1)
    w.add_float32("t.f32neg", -3.25e-20)
    w.add_uint64("t.u64", 2**64 - 1)
    w.add_int64("t.i64", -(2**63))
    w.add_float64("t.f64", 1.0 / 3.0)
    w.add_bool("t.true", True)
    w.add_bool("t.false", False)
    w.add_string("t.str", "déjà vu ✓ \u0000 nul inside")
    w.add_array("t.arr.i32", [1, -2, 3])
    w.add_array("t.arr.f32", [0.5, -1.25, 1e-7])
    w.add_array("t.arr.bool", [True, False, True])
    w.add_array("t.arr.str", ["a", "", "ünï", "x" * 100])
    for name, vt, vals in [
        ("u8", VT.UINT8, [0, 255]), ("i8", VT.INT8, [-1, 127]), ("u16", VT.UINT16, [1, 65535]),
        ("i16", VT.INT16, [-7, 7]), ("u32", VT.UINT32, [2**32 - 1]), ("u64", VT.UINT64, [2**64 - 1, 0]),
        ("i64", VT.INT64, [-(2**63), 2**63 - 1]), ("f64", VT.FLOAT64, [1e300, -0.0]),
    ]:
        w.add_key_value(f"t.arr.{name}", vals, VT.ARRAY, sub_type=vt)
    w.add_array("t.nested.i32", [[1, 2], [3], [-4, 5, 6]])
    w.add_array("t.nested.str", [["a", "b"], ["c"]])
    w.add_array("t.nested3", [[[1.5], [2.5, 3.5]], [[4.5]]])
    if big_metadata:
        w.add_array("tokenizer.ggml.tokens", [f"tok{i}" for i in range(3000)])
        w.add_array("tokenizer.ggml.scores", [float(i) / 7 for i in range(3000)])
        w.add_string("tokenizer.chat_template", "{{ x }} " * 700)

    quant(w, "f32.1d", Q.F32, [3], rng)
    quant(w, "f32.4d", Q.F32, [2, 3, 4, 5], rng)
    quant(w, "f16.2d", Q.F16, [5, 3], rng)
    quant(w, "q8_0.3d", Q.Q8_0, [64, 2, 3], rng)
    quant(w, "iq2_xxs.4d", Q.IQ2_XXS, [256, 2, 1, 2], rng)
    quant(w, "q2_k.2d", Q.Q2_K, [512, 3], rng)
    quant(w, "q4_k.3d", Q.Q4_K, [256, 4, 2], rng)
    quant(w, "q8_0.1d", Q.Q8_0, [32], rng)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def cmd_write(out):
    os.makedirs(out, exist_ok=True)
    specs = [("default", None, False), ("a1", 1, False), ("a8", 8, False), ("a64", 64, True),
             ("a1024", 1024, False), ("a4096", 4096, True)]
    for i, (tag, align, big) in enumerate(specs):
        p = os.path.join(out, f"oracle_{tag}.gguf")
        write_one(p, align, 1000 + i, big)
        print(p)


FLOAT_BITS = {VT.FLOAT32: np.uint32, VT.FLOAT64: np.uint64}


def walk(parts, i, t):
    """Rebuilds one value from GGUFReader's parts starting at parts[i]; returns (json, next i)."""
    t = VT(int(t))
    if t == VT.STRING:
        return {"type": "STRING", "value": bytes(parts[i + 1]).decode("utf-8")}, i + 2
    if t == VT.ARRAY:
        it = int(parts[i][0])
        n = int(parts[i + 1][0])
        i += 2
        items = []
        for _ in range(n):
            v, i = walk(parts, i, it)
            items.append(v)
        return {"type": "ARRAY", "elem": VT(it).name, "items": items}, i
    a = parts[i]
    assert a.shape == (1,), (t, a)
    if t in FLOAT_BITS:
        return {"type": t.name, "bits": int(a.view(FLOAT_BITS[t])[0])}, i + 1
    if t == VT.BOOL:
        return {"type": "BOOL", "value": bool(a[0])}, i + 1
    return {"type": t.name, "value": int(a[0])}, i + 1


def cmd_read(paths):
    out = []
    for p in paths:
        r = GGUFReader(p)
        md = []
        for name, f in r.fields.items():
            if name.startswith("GGUF."):
                continue
            v, end = walk(f.parts, 3, f.parts[2][0])
            assert end == len(f.parts), (name, end, len(f.parts))
            # Cross-check the rebuild against gguf-py's own flat view.
            if v["type"] not in ("ARRAY", "FLOAT32", "FLOAT64") or (
                    v["type"] == "ARRAY" and v["elem"] not in ("ARRAY", "FLOAT32", "FLOAT64")):
                flat = v["items"] if v["type"] == "ARRAY" else None
                c = f.contents()
                if flat is None:
                    assert c == v["value"], (name, c, v)
                else:
                    assert c == [x["value"] for x in flat], (name, c)
            md.append([name, v])
        tensors = [
            {"name": t.name, "type": t.tensor_type.name, "shape": [int(d) for d in t.shape],
             "offset": int(t.data_offset), "nbytes": int(t.n_bytes)}
            for t in r.tensors
        ]
        out.append({"path": p, "version": int(r.fields["GGUF.version"].parts[0][0]), "alignment": int(r.alignment),
                    "data_offset": int(r.data_offset), "file_size": os.path.getsize(p),
                    "metadata": md, "tensors": tensors})
    print(json.dumps(out))


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "types":
        cmd_types()
    elif cmd == "write":
        cmd_write(sys.argv[2])
    elif cmd == "read":
        cmd_read(sys.argv[2:])
    else:
        sys.exit(f"unknown command {cmd}")
