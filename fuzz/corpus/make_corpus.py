#!/usr/bin/env python3
"""Writes the seed corpus for fuzz/fuzz_idx and fuzz/fuzz_safetensors (fuzz/corpus/{idx,safetensors}).

A few valid files and a few broken ones of each format, each well under 4 KiB, so that the
fuzzer starts from inputs that already reach deep into the parsers. Run it from anywhere;
the files it writes are committed, so the fuzz script needs no Python.
"""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def idx(type_code, dims, payload):
    return bytes([0, 0, type_code, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + payload


def st(header, data=b""):
    h = header if isinstance(header, bytes) else json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<Q", len(h)) + h + data


def write(folder, name, data):
    assert len(data) < 4096, name
    os.makedirs(os.path.join(HERE, folder), exist_ok=True)
    with open(os.path.join(HERE, folder, name), "wb") as f:
        f.write(data)


# ---- IDX ----
write("idx", "ubyte_images_2x4x4", idx(0x08, [2, 4, 4], bytes(range(32))))
write("idx", "ubyte_labels_5", idx(0x08, [5], bytes([9, 0, 0, 3, 0])))
write("idx", "int8_3", idx(0x09, [3], b"\x80\xff\x7f"))
write("idx", "int16_2x2", idx(0x0B, [2, 2], struct.pack(">4h", 1, -2, 300, -32768)))
write("idx", "int32_3", idx(0x0C, [3], struct.pack(">3i", -1, 2**31 - 1, 7)))
write("idx", "float32_2", idx(0x0D, [2], struct.pack(">2f", 1.5, float("nan"))))
write("idx", "float64_rank8", idx(0x0E, [1] * 7 + [2], struct.pack(">2d", 1e300, -0.0)))
write("idx", "bad_truncated", idx(0x08, [3, 3], bytes(5)))
write("idx", "bad_trailing", idx(0x08, [2], bytes(4)))
write("idx", "bad_type_code", idx(0x0A, [1], b"x"))
write("idx", "bad_zero_dim", idx(0x08, [2, 0], b""))

# ---- safetensors ----
f32 = struct.pack("<3f", 1.0, -2.0, 0.5)
write("safetensors", "f32_with_metadata", st(
    {"__metadata__": {"format": "pt"}, "w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]}}, f32))
write("safetensors", "three_dtypes", st({
    "a": {"dtype": "F64", "shape": [1, 2], "data_offsets": [0, 16]},
    "b": {"dtype": "I64", "shape": [], "data_offsets": [16, 24]},
    "c": {"dtype": "F32", "shape": [0, 4], "data_offsets": [24, 24]},
}, struct.pack("<2dq", 0.25, -8.0, 42)))
write("safetensors", "empty", st({}))
write("safetensors", "out_of_order", st({
    "z": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]},
    "a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
}, struct.pack("<2f", 1, 2)))
write("safetensors", "bad_duplicate", st(
    b'{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}',
    struct.pack("<f", 1)))
write("safetensors", "bad_overlap", st({
    "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
    "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]},
}, bytes(12)))
write("safetensors", "bad_bf16", st({"h": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]}}, bytes(4)))
write("safetensors", "bad_overflow", st({"o": {"dtype": "F32", "shape": [2**32, 2**32], "data_offsets": [0, 4]}},
                                        bytes(4)))
write("safetensors", "bad_metadata", st({"__metadata__": {"epoch": 3}}))
write("safetensors", "bad_truncated", st({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]}}, f32[:7]))
