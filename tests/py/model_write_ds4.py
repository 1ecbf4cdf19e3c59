"""Writes a DS4-layout GGUF with gguf-py's own GGUFWriter (an independent writer), then reads
it back with GGUFReader and prints the tensor table as JSON.

usage: model_write_ds4.py SPEC.json OUT.gguf ALIGNMENT DUMP_TENSOR DUMP_EXPERT DUMP_PATH
  SPEC.json: {"metadata": [[key, type, value], ...], "tensors": [[name, type, [dims]], ...]}
             type of a metadata value: u32 u64 f32 bool str, or arr:<elem type>
  Tensor bytes are random (numpy, seeded per tensor); the raw bytes of expert DUMP_EXPERT of
  tensor DUMP_TENSOR are written to DUMP_PATH.
"""
import json
import sys

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter, GGMLQuantizationType
from gguf.constants import GGML_QUANT_SIZES

spec_path, out, alignment, dump_tensor, dump_expert, dump_path = sys.argv[1:7]
alignment, dump_expert = int(alignment), int(dump_expert)
spec = json.load(open(spec_path))

VT = {
    "u32": GGUFValueType.UINT32,
    "u64": GGUFValueType.UINT64,
    "f32": GGUFValueType.FLOAT32,
    "bool": GGUFValueType.BOOL,
    "str": GGUFValueType.STRING,
}

w = GGUFWriter(out, arch="deepseek4")
w.add_custom_alignment(alignment)
for key, ty, val in spec["metadata"]:
    if ty.startswith("arr:"):
        w.add_key_value(key, val, GGUFValueType.ARRAY, sub_type=VT[ty[4:]])
    else:
        w.add_key_value(key, val, VT[ty])

for i, (name, ty, dims) in enumerate(spec["tensors"]):
    q = GGMLQuantizationType[ty]
    bs, ts = GGML_QUANT_SIZES[q]
    byte_shape = list(reversed(dims))
    byte_shape[-1] = dims[0] // bs * ts
    data = np.random.default_rng(i).integers(0, 256, size=byte_shape, dtype=np.uint8)
    w.add_tensor(name, data, raw_dtype=q)

w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()

r = GGUFReader(out)
table = []
for t in r.tensors:
    table.append({"name": t.name, "offset": int(t.data_offset), "nbytes": int(t.n_bytes),
                  "shape": [int(x) for x in t.shape], "type": t.tensor_type.name})
    if t.name == dump_tensor:
        raw = np.ascontiguousarray(t.data).view(np.uint8).reshape(-1)
        eb = int(t.n_bytes) // int(t.shape[-1])
        with open(dump_path, "wb") as fh:
            fh.write(raw[dump_expert * eb:(dump_expert + 1) * eb].tobytes())
print(json.dumps({"alignment": int(r.alignment), "tensors": table}))
