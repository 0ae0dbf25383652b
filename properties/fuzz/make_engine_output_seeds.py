#!/usr/bin/env python3
"""Writes the seed corpus of the engine_output fuzz target (datasets/fuzz/engine_output/):
small engine outputs for kvcheck compare in each format, valid and broken. Standard library only.
Run from the repository root: python3 properties/fuzz/make_engine_output_seeds.py"""
import json
import os
import struct

OUT = os.path.join("datasets", "fuzz", "engine_output")


def npy(descr, shape, values, fmt):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (descr, ", ".join(map(str, shape)) + ("," if len(shape) == 1 else ""))
    pad = (64 - (10 + len(header) + 1) % 64) % 64
    header = header + " " * pad + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + struct.pack("<%d%s" % (len(values), fmt), *values)


def safetensors(tensors):
    header, data = {}, b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + data


def main():
    os.makedirs(OUT, exist_ok=True)
    seeds = {
        "f32.npy": npy("<f4", (2, 3), [0.5, -1.0, 2.0, 0.0, 1.5, -3.25], "f"),
        "f16.npy": npy("<f2", (2, 2), [1.0, -2.0, 0.5, 4.0], "e"),
        "nan_row.npy": npy("<f4", (2, 2), [1.0, 2.0, float("nan"), 0.0], "f"),
        "one_dim.npy": npy("<f4", (3,), [1.0, 2.0, 3.0], "f"),
        "big_endian.npy": npy(">f4", (1, 2), [1.0, 2.0], "f").replace(b"'>f4'", b"'>f4'"),
        "truncated.npy": npy("<f4", (2, 3), [0.5, -1.0, 2.0, 0.0, 1.5, -3.25], "f")[:-5],
        "topk.jsonl": (json.dumps({"id": "text-0", "top_logprobs": [{"5": -0.1, "7": -2.5}, {"1": -0.01}]}) + "\n" +
                       json.dumps({"id": "retrieval-a", "generated_ids": [3, 4, 5]}) + "\n").encode(),
        "topk_sum_above_one.jsonl": (json.dumps({"id": "text-0", "top_logprobs": [{"5": -0.1, "7": -0.2}]}) + "\n").encode(),
        "topk_positive.jsonl": (json.dumps({"id": "text-0", "top_logprobs": [{"5": 0.3}]}) + "\n").encode(),
        "topk_duplicate_token.jsonl": (json.dumps({"id": "text-0", "top_logprobs": [{"5": -1.0, "05": -2.0}]}) + "\n").encode(),
        "twice.jsonl": (json.dumps({"id": "retrieval-a", "generated_ids": [1]}) + "\n" +
                        json.dumps({"id": "retrieval-a", "generated_ids": [2]}) + "\n").encode(),
        "logits.safetensors": safetensors({
            "text-0": ("F32", [2, 2], struct.pack("<4f", 0.1, 0.2, 0.3, 0.4)),
            "retrieval-a": ("I64", [3], struct.pack("<3q", 1, 2, 3)),
        }),
        "bad_dtype.safetensors": safetensors({"text-0": ("U8", [2, 2], bytes(4))}),
        "inf.safetensors": safetensors({"text-0": ("F32", [1, 2], struct.pack("<2f", 1.0, float("inf")))}),
        "negative_id.safetensors": safetensors({"retrieval-a": ("I32", [2], struct.pack("<2i", 4, -1))}),
    }
    for name, data in seeds.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
