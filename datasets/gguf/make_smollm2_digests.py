#!/usr/bin/env python3
"""Write datasets/gguf/smollm2-dequant.json: per-tensor digests of gguf-py's dequantization
of datasets/models/fetched/SmolLM2-135M-Instruct.Q4_1.gguf.

Run from the repository root:

    python3 datasets/gguf/make_smollm2_digests.py [path/to/model.gguf]

Digest of one tensor (cheap to compute in C++, identical by construction):
  w_i  = float32 bit pattern of value i (i = 0..n-1 in gguf.quants.dequantize's flat order,
         row-major with ne0 fastest), widened to uint64
  m_i  = splitmix64(i) | 1, with splitmix64(x):
           z = x + 0x9E3779B97F4A7C15
           z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
           z = (z ^ (z >> 27)) * 0x94D049BB133111EB
           return z ^ (z >> 31)                       (all arithmetic mod 2^64)
  digest = sum_i w_i * m_i  mod 2^64, as 16 lowercase hex digits.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import json
import sys
import time
from pathlib import Path

import numpy as np

import gguf
from gguf.quants import dequantize

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "datasets/models/fetched/SmolLM2-135M-Instruct.Q4_1.gguf"
OUT = Path(__file__).resolve().parent / "smollm2-dequant.json"
CHUNK = 1 << 22

M64 = (1 << 64) - 1


def splitmix64_np(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.uint64, copy=False)
    with np.errstate(over="ignore"):
        z = x + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def digest_f32(values: np.ndarray) -> int:
    """values: float32 array in the order to digest (flattened C order)."""
    flat = np.ascontiguousarray(values, dtype=np.float32).reshape(-1)
    acc = np.uint64(0)
    with np.errstate(over="ignore"):
        for start in range(0, flat.size, CHUNK):
            w = flat[start:start + CHUNK].view(np.uint32).astype(np.uint64)
            m = splitmix64_np(np.arange(start, start + w.size, dtype=np.uint64)) | np.uint64(1)
            acc = acc + np.sum(w * m, dtype=np.uint64)  # wraps mod 2^64 (intended)
    return int(acc)


def digest_py(values) -> int:
    """Pure-Python reference (slow; used for the self-check only)."""
    import struct
    acc = 0
    for i, v in enumerate(values):
        w = struct.unpack("<I", struct.pack("<f", v))[0]
        z = (i + 0x9E3779B97F4A7C15) & M64
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        z ^= z >> 31
        acc = (acc + w * (z | 1)) & M64
    return acc


EXTRA_BITS = [0x3F800000, 0xC0000000, 0x3DCCCCCD, 0x80000000, 0x7F7FFFFF, 0x00000001, 0x477FE000, 0xBFC00000]


def self_check() -> tuple[str, str]:
    vals = np.array([1.0, -2.0], dtype=np.float32)
    d = digest_f32(vals)
    assert d == digest_py([1.0, -2.0]), "numpy and pure-Python digests disagree"
    extra = np.array(EXTRA_BITS, dtype=np.uint32).view(np.float32)
    d2 = digest_f32(extra)
    assert d2 == digest_py(extra.tolist())
    assert int(splitmix64_np(np.array([0], np.uint64))[0]) == 0xE220A8397B1DCDAF
    # a longer vector crossing a chunk boundary: numpy vs pure Python
    global CHUNK
    saved, CHUNK = CHUNK, 7
    try:
        r = np.random.default_rng(1).normal(size=50).astype(np.float32)
        assert digest_f32(r) == digest_py(r.tolist())
    finally:
        CHUNK = saved
    return f"{d:016x}", f"{d2:016x}"


def main() -> int:
    model = Path(sys.argv[1]) if len(sys.argv) > 1 else MODEL
    t0 = time.perf_counter()
    selfcheck, selfcheck2 = self_check()
    extra_hex = ", ".join(f"{b:08x}" for b in EXTRA_BITS)
    print(f"self-check: digest([1.0f, -2.0f]) = {selfcheck}; digest(bits [{extra_hex}]) = {selfcheck2}")

    h = hashlib.sha256()
    with open(model, "rb") as f:
        for blk in iter(lambda: f.read(1 << 20), b""):
            h.update(blk)
    t_hash = time.perf_counter() - t0

    rd = gguf.GGUFReader(model)
    t_deq = t_dig = 0.0
    rows = []
    for t in rd.tensors:
        a = time.perf_counter()
        v = dequantize(np.asarray(t.data), t.tensor_type)
        v = np.ascontiguousarray(v, dtype=np.float32).reshape(-1)
        b = time.perf_counter()
        dims = [int(x) for x in t.shape]
        assert v.size == int(np.prod(dims)) == int(t.n_elements)
        dg = digest_f32(v)
        bits = v.view(np.uint32)
        rows.append({
            "name": t.name,
            "type": t.tensor_type.name,
            "ggml_type": int(t.tensor_type),
            "dims": dims,
            "numel": int(v.size),
            "digest": f"{dg:016x}",
            "first": [f"{int(x):08x}" for x in bits[:4]],
            "sum": float(np.sum(v, dtype=np.float64)),
            "neg_zero": int(np.count_nonzero(bits == 0x80000000)),
        })
        t_deq += b - a
        t_dig += time.perf_counter() - b

    doc = {
        "source": {
            "file": str(model.relative_to(ROOT)) if model.is_relative_to(ROOT) else model.name,
            "bytes": model.stat().st_size,
            "sha256": h.hexdigest(),
            "license": "Apache-2.0 (SmolLM2-135M-Instruct)",
        },
        "gguf_py_version": importlib.metadata.version("gguf"),
        "numpy_version": np.__version__,
        "generator": "datasets/gguf/make_smollm2_digests.py",
        "digest_definition": (
            "w_i = float32 bits of value i (flat order of gguf.quants.dequantize, ne0 fastest) as uint64; "
            "m_i = splitmix64(i) | 1 with z = i + 0x9E3779B97F4A7C15; z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9; "
            "z = (z ^ (z >> 27)) * 0x94D049BB133111EB; splitmix64 = z ^ (z >> 31); "
            "digest = sum_i w_i * m_i mod 2^64, 16 lowercase hex digits; i restarts at 0 for every tensor"),
        "self_check": {"values_f32": [1.0, -2.0], "value_bits": ["3f800000", "c0000000"], "digest": selfcheck},
        "self_check_2": {"value_bits": [f"{b:08x}" for b in EXTRA_BITS], "digest": selfcheck2,
                         "note": "1, -2, 0.1f, -0.0, FLT_MAX, smallest subnormal, 65504, -1.5"},
        "fields": {
            "dims": "ggml order, ne0 (fastest) first",
            "first": "first 4 dequantized values as float32 bit patterns",
            "sum": "float64 sum of the dequantized values (for humans; not bit-exact across implementations)",
            "neg_zero": "number of dequantized values that are -0.0",
        },
        "tensor_count": len(rows),
        "tensors": rows,
    }
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    total = time.perf_counter() - t0
    types = {}
    for r in rows:
        types[r["type"]] = types.get(r["type"], 0) + 1
    print(f"{len(rows)} tensors {types}, {sum(r['numel'] for r in rows)} values, "
          f"{sum(r['neg_zero'] for r in rows)} are -0.0")
    print(f"sha256 {h.hexdigest()}")
    print(f"time: sha256 {t_hash:.2f} s, dequantize {t_deq:.2f} s, digest {t_dig:.2f} s, total {total:.2f} s")
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
