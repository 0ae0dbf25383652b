#!/usr/bin/env python3
"""Write datasets/gguf/quants.gguf: known-answer fixtures for GGUF dequantization.

For every type in TYPES and every case, the file holds two tensors:

    <TYPE>.<case>            the encoded tensor (ggml type <TYPE>)
    <TYPE>.<case>.expected   F32, same logical shape, bit-exactly
                             gguf.quants.dequantize(raw_bytes, <TYPE>)

Shapes: every case is a numpy array of shape (rows, row_len); GGUFWriter stores
the dims reversed, so the file says ne0 = row_len, ne1 = rows (ne0 fastest).

Run from the repository root (deterministic; fixed seed):

    python3 datasets/gguf/make_quant_fixtures.py

After writing, the file is read back with gguf.GGUFReader and checked:
every encoded tensor is dequantized again with gguf-py and compared bit for bit
(uint32 views) with its .expected tensor, and also against an independent
element-by-element decoder written from the layout description in README.md
(once in float32 arithmetic, once in float64 rounded at the end).
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import struct
import sys
import time
from pathlib import Path

import numpy as np

import gguf
from gguf import GGMLQuantizationType as T
from gguf import GGML_QUANT_SIZES
from gguf.quants import Q4_K, dequantize, quantize

GGUF_VERSION = importlib.metadata.version("gguf")
SEED = 0x6B76_6368  # "kvch"
ARCH = "kvcheck-fixture"
OUT = Path(__file__).resolve().parent / "quants.gguf"

TYPES = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K"]

f32 = np.float32


# --------------------------------------------------------------------------- helpers

def rng_for(tname: str, case: str) -> np.random.Generator:
    """One generator per (type, case): adding a case never changes the others."""
    key = [SEED] + list((tname + "/" + case).encode())
    return np.random.default_rng(key)


def f16_bits_to_u8(bits) -> np.ndarray:
    """uint16 bit patterns -> little-endian byte pairs, shape (..., 2)."""
    return np.asarray(bits, dtype="<u2").reshape(-1, 1).view(np.uint8)


def rand_f16_bits(rng, n, exp_lo, exp_hi, neg_prob):
    """Finite f16 patterns with biased exponent in [exp_lo, exp_hi] (1..30 normal)."""
    sign = (rng.random(n) < neg_prob).astype(np.uint16) << np.uint16(15)
    exp = rng.integers(exp_lo, exp_hi + 1, n).astype(np.uint16) << np.uint16(10)
    man = rng.integers(0, 1024, n).astype(np.uint16)
    return sign | exp | man


def rand_finite_f16(rng, n):
    b = rng.integers(0, 1 << 16, n).astype(np.uint16)
    bad = (b & 0x7C00) == 0x7C00
    b[bad] &= np.uint16(0xBBFF)  # clear one exponent bit: finite
    return b


def rand_finite_bf16(rng, n):
    b = rng.integers(0, 1 << 16, n).astype(np.uint16)
    bad = (b & 0x7F80) == 0x7F80
    b[bad] &= np.uint16(0xBFFF)
    return b


def rand_finite_f32(rng, n):
    b = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    bad = (b & 0x7F800000) == 0x7F800000
    b[bad] &= np.uint32(0xBFFFFFFF)
    return b


def outlier_values(rng, shape, lo, hi, frac=0.05):
    x = rng.normal(0.0, 1.0, shape)
    mask = rng.random(shape) < frac
    # at least one outlier per row
    mask[np.arange(shape[0]), rng.integers(0, shape[1], shape[0])] = True
    mag = np.exp(rng.uniform(np.log(lo), np.log(hi), shape))
    x = np.where(mask, np.where(rng.random(shape) < 0.5, -mag, mag), x)
    return x.astype(np.float32)


# ----------------------------------------------------------------- block encoders
# Each takes integer codes (the stored unsigned values) and returns raw bytes.
# They are the inverse of the layouts described in README.md.

def pack_nibbles_32(q):
    """32 codes 0..15 -> 16 bytes: byte i = q[i] | q[i+16] << 4."""
    q = np.asarray(q, dtype=np.uint8)
    return (q[:16] & 0xF) | ((q[16:] & 0xF) << 4)


def qh_bits_32(q):
    """bit i of the little-endian uint32 = bit 4 of code i."""
    v = 0
    for i, c in enumerate(q):
        v |= ((int(c) >> 4) & 1) << i
    return np.frombuffer(struct.pack("<I", v), dtype=np.uint8)


def enc_legacy(tname, d_bits, m_bits, q):
    d = f16_bits_to_u8([d_bits])[0]
    if tname == "Q8_0":
        return np.concatenate([d, np.asarray(q, dtype=np.int8).view(np.uint8)])
    if tname == "Q4_0":
        return np.concatenate([d, pack_nibbles_32(q)])
    m = f16_bits_to_u8([m_bits])[0] if m_bits is not None else None
    if tname == "Q4_1":
        return np.concatenate([d, m, pack_nibbles_32(q)])
    if tname == "Q5_0":
        return np.concatenate([d, qh_bits_32(q), pack_nibbles_32(q)])
    if tname == "Q5_1":
        return np.concatenate([d, m, qh_bits_32(q), pack_nibbles_32(q)])
    raise ValueError(tname)


def pack_k_scales(sc, mn):
    """Inverse of gguf-py's Q4_K.get_scale_min: 8 scales + 8 mins (0..63) -> 12 bytes."""
    sc = [int(v) for v in sc]
    mn = [int(v) for v in mn]
    assert all(0 <= v < 64 for v in sc + mn)
    b = [0] * 12
    for j in range(4):
        b[j] = (sc[j] & 63) | ((sc[j + 4] >> 4) << 6)
        b[j + 4] = (mn[j] & 63) | ((mn[j + 4] >> 4) << 6)
        b[j + 8] = (sc[j + 4] & 0xF) | ((mn[j + 4] & 0xF) << 4)
    out = np.array(b, dtype=np.uint8)
    s2, m2 = Q4_K.get_scale_min(out.reshape(1, 12))
    assert s2.tolist() == [sc] and m2.tolist() == [mn], "scale packing mismatch"
    return out


def enc_q4k_qs(q):
    """256 codes 0..15 -> 128 bytes: byte 32c+l = q[64c+l] | q[64c+32+l] << 4."""
    q = np.asarray(q, dtype=np.uint8).reshape(4, 2, 32)
    return ((q[:, 0, :] & 0xF) | ((q[:, 1, :] & 0xF) << 4)).reshape(128)


def enc_q5k_qh(q):
    """256 codes 0..31 -> 32 bytes: bit j of byte l = bit 4 of q[32j+l]."""
    q = np.asarray(q, dtype=np.uint8).reshape(8, 32)
    out = np.zeros(32, dtype=np.uint8)
    for j in range(8):
        out |= ((q[j] >> 4) & 1) << j
    return out


def enc_kquant(tname, d_bits, dmin_bits, sc, mn, q):
    if tname == "Q4_K":
        return np.concatenate([f16_bits_to_u8([d_bits])[0], f16_bits_to_u8([dmin_bits])[0],
                               pack_k_scales(sc, mn), enc_q4k_qs(q)])
    if tname == "Q5_K":
        return np.concatenate([f16_bits_to_u8([d_bits])[0], f16_bits_to_u8([dmin_bits])[0],
                               pack_k_scales(sc, mn), enc_q5k_qh(q), enc_q4k_qs(q)])
    raise ValueError(tname)


def enc_q6k(d_bits, scales, q):
    """q: 256 codes 0..63 (value = code - 32); scales: 16 int8."""
    q = np.asarray(q, dtype=np.uint8).reshape(2, 128)
    ql = np.zeros(128, dtype=np.uint8)
    qh = np.zeros(64, dtype=np.uint8)
    for h in range(2):
        r = q[h]
        ql[64 * h:64 * h + 64] = (r[:64] & 0xF) | ((r[64:] & 0xF) << 4)
        for k in range(4):
            qh[32 * h:32 * h + 32] |= ((r[32 * k:32 * k + 32] >> 4) & 3) << (2 * k)
    sc = np.asarray(scales, dtype=np.int8).view(np.uint8)
    return np.concatenate([ql, qh, sc, f16_bits_to_u8([d_bits])[0]])


def rows_of_blocks(blocks, blocks_per_row):
    b = np.stack(blocks).astype(np.uint8)
    return b.reshape(len(blocks) // blocks_per_row, -1)


# ------------------------------------------------------------------ edge scale sets

LEGACY_D_EDGE = [0x0001, 0x03FF, 0x8001, 0x83FF, 0x0200, 0x0400, 0x8400, 0x7BFF,
                 0xFBFF, 0x7800, 0x0000, 0x8000, 0x3C00, 0xBC00, 0x3555, 0xB800]
LEGACY_DM_EDGE = [(0x0001, 0x0001), (0x03FF, 0x8001), (0x8001, 0x03FF), (0x0400, 0x8400),
                  (0x7BFF, 0x7BFF), (0xFBFF, 0x7BFF), (0x7BFF, 0xFBFF), (0xFBFF, 0xFBFF),
                  (0x0000, 0x0000), (0x8000, 0x8000), (0x0000, 0x8000), (0x8000, 0x0000),
                  (0xB800, 0x0000), (0xB800, 0x8000), (0x0000, 0x3C00), (0x3C00, 0x0001)]
K_DM_EDGE = [(0x0001, 0x03FF), (0x8001, 0x0001), (0x7BFF, 0x7BFF), (0xFBFF, 0x7BFF),
             (0x7BFF, 0xFBFF), (0x0000, 0x0000), (0x8000, 0x0000), (0x0000, 0x8000),
             (0x8000, 0x8000), (0x0400, 0x8400), (0xBC00, 0x3C00), (0x03FF, 0x0000)]
Q6K_D_EDGE = [0x0001, 0x03FF, 0x8001, 0x0400, 0x7BFF, 0xFBFF, 0x0000, 0x8000, 0x3C00, 0xBC00]


def legacy_codes(tname, rng):
    """Codes for one block covering every code (Q4/Q5) or the extremes (Q8)."""
    if tname == "Q8_0":
        fixed = [-128, -127, -64, -2, -1, 0, 1, 2, 64, 126, 127]
        return rng.permutation(np.concatenate([fixed, rng.integers(-128, 128, 32 - len(fixed))]))
    if tname in ("Q4_0", "Q4_1"):
        return rng.permutation(np.tile(np.arange(16), 2))
    return rng.permutation(np.arange(32))


def k_codes(tname, rng):
    n = 16 if tname == "Q4_K" else 32
    return rng.permutation(np.tile(np.arange(n), 256 // n))


# ---------------------------------------------------------------------- cases
# Each case: (name, description, raw uint8 array of shape (rows, bytes_per_row)).

def as_raw(tname, arr):
    """Quantize float32 (rows, row_len) with gguf-py; return raw bytes (rows, nbytes)."""
    q = quantize(np.ascontiguousarray(arr, dtype=np.float32), T[tname])
    return np.ascontiguousarray(q).view(np.uint8)


def cases_float(tname):
    out = []
    r = rng_for(tname, "random_normal")
    out.append(("random_normal", "gguf.quants.quantize of N(0,1) values",
                as_raw(tname, r.normal(0, 1, (4, 32)))))
    r = rng_for(tname, "outliers")
    out.append(("outliers", "gguf.quants.quantize of N(0,1) with about 5% outliers of magnitude 1e2..3e4",
                as_raw(tname, outlier_values(r, (4, 32), 1e2, 3e4))))
    r = rng_for(tname, "edge_values")
    if tname == "F32":
        special = [0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x007FFFFF, 0x807FFFFF,
                   0x00800000, 0x80800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x3F800000, 0xBF800000,
                   0x3F800001, 0x33800000, 0x477FE000, 0xC77FE000, 0x477FF000, 0x00400000]
        bits = np.concatenate([np.array(special, dtype=np.uint32), rand_finite_f32(r, 128 - len(special))])
        raw = bits.astype("<u4").view(np.uint8).reshape(4, 128)
        out.append(("edge_values", "hand-built bit patterns: +-0, subnormals, min normal, max finite, random finite", raw))
    else:
        if tname == "F16":
            special = [0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x83FF, 0x0400, 0x8400, 0x7BFF,
                       0xFBFF, 0x3C00, 0xBC00, 0x3C01, 0x3555, 0x7800, 0x0200]
            rnd = rand_finite_f16(r, 256 - len(special))
        else:
            special = [0x0000, 0x8000, 0x0001, 0x8001, 0x007F, 0x807F, 0x0080, 0x8080, 0x7F7F,
                       0xFF7F, 0x3F80, 0xBF80, 0x3F81, 0x4049, 0x477F, 0x0040]
            rnd = rand_finite_bf16(r, 256 - len(special))
        bits = np.concatenate([np.array(special, dtype=np.uint16), rnd])
        raw = bits.astype("<u2").view(np.uint8).reshape(4, 128)
        out.append(("edge_values", "hand-built bit patterns: +-0, subnormals, min normal, max finite, random finite", raw))
        if tname == "F16":
            sub = np.concatenate([np.arange(0x0000, 0x0400), np.arange(0x8000, 0x8400)]).astype("<u2")
            out.append(("subnormals", "every f16 pattern with zero exponent: +0..max subnormal, -0..-max subnormal",
                        sub.view(np.uint8).reshape(32, 128)))
        else:
            sub = np.concatenate([np.arange(0x0000, 0x0100), np.arange(0x8000, 0x8100)]).astype("<u2")
            out.append(("subnormals", "bf16 patterns 0x0000..0x00ff and 0x8000..0x80ff: zeros, all subnormals, lowest normals",
                        sub.view(np.uint8).reshape(8, 128)))
    return out


def cases_legacy(tname):
    out = []
    bs, ts = GGML_QUANT_SIZES[T[tname]]
    has_m = tname in ("Q4_1", "Q5_1")

    r = rng_for(tname, "random_normal")
    out.append(("random_normal", "gguf.quants.quantize of N(0,1) values, 3 blocks per row",
                as_raw(tname, r.normal(0, 1, (6, 96)))))
    r = rng_for(tname, "outliers")
    out.append(("outliers", "gguf.quants.quantize of N(0,1) with about 5% outliers of magnitude 20..3e4",
                as_raw(tname, outlier_values(r, (4, 64), 20, 3e4))))

    r = rng_for(tname, "random_blocks")
    nb = 16
    raw = r.integers(0, 256, (nb, ts), dtype=np.uint8)
    raw[:, 0:2] = f16_bits_to_u8(rand_f16_bits(r, nb, 5, 18, 0.5))  # |d| in 2^-10 .. 2^4
    if has_m:
        raw[:, 2:4] = f16_bits_to_u8(rand_f16_bits(r, nb, 5, 18, 0.5))
    out.append(("random_blocks", "random bytes with random finite normal f16 d" + (" and m" if has_m else "")
                + " (|x| in 2^-10..2^4, either sign), 2 blocks per row", raw.reshape(8, 2 * ts)))

    r = rng_for(tname, "edge_scales")
    if has_m:
        blocks = [enc_legacy(tname, d, m, legacy_codes(tname, r)) for d, m in LEGACY_DM_EDGE]
        desc = ("one block per (d, m) pair: subnormal, negative, +-0, +-65504 and mixed; "
                "codes cover every value")
    else:
        blocks = [enc_legacy(tname, d, None, legacy_codes(tname, r)) for d in LEGACY_D_EDGE]
        desc = ("one block per d: subnormals, negative, +-0, +-65504, 32768, +-1; "
                "codes cover every value" + (" (Q8_0: extremes -128,127,0 and random)" if tname == "Q8_0" else ""))
    out.append(("edge_scales", desc, rows_of_blocks(blocks, 4)))

    const = np.array([[0.75], [-3.0], [1e-3], [12345.0]], dtype=np.float32) * np.ones((1, 64), np.float32)
    out.append(("all_equal", "gguf.quants.quantize of constant rows 0.75, -3, 1e-3, 12345",
                as_raw(tname, const)))
    zq = as_raw(tname, np.zeros((2, 64), np.float32))
    out.append(("all_zero", "rows 0-1: gguf.quants.quantize of zeros; rows 2-3: all-zero bytes",
                np.concatenate([zq, np.zeros_like(zq)], axis=0)))
    return out


def cases_k(tname):
    out = []
    bs, ts = GGML_QUANT_SIZES[T[tname]]
    r = rng_for(tname, "random_blocks")
    nb = 8
    raw = r.integers(0, 256, (nb, ts), dtype=np.uint8)
    if tname == "Q6_K":
        raw[:, 208:210] = f16_bits_to_u8(rand_f16_bits(r, nb, 5, 12, 0.5))  # |d| in 2^-10..2^-3
        desc = "random bytes (ql, qh, int8 scales) with random finite normal f16 d (|d| in 2^-10..2^-3, either sign)"
    else:
        raw[:, 0:2] = f16_bits_to_u8(rand_f16_bits(r, nb, 5, 12, 0.5))
        raw[:, 2:4] = f16_bits_to_u8(rand_f16_bits(r, nb, 5, 12, 0.5))
        desc = ("random bytes (scales, " + ("qs" if tname == "Q4_K" else "qh, qs")
                + ") with random finite normal f16 d and dmin (|x| in 2^-10..2^-3, either sign)")
    out.append(("random_blocks", desc + ", 2 blocks per row", raw.reshape(4, 2 * ts)))

    r = rng_for(tname, "scale_codes")
    blocks = []
    if tname == "Q6_K":
        allsc = r.permutation(np.arange(-128, 128))
        for b in range(16):
            d = rand_f16_bits(r, 1, 8, 14, 0.5)[0]
            blocks.append(enc_q6k(d, allsc[16 * b:16 * b + 16], r.permutation(np.tile(np.arange(64), 4))))
        desc = "16 blocks whose int8 scales together take all 256 values -128..127; codes cover 0..63"
    else:
        # low positions (j<4) take 4b..4b+3 -> all 0..63 over 16 blocks; high positions (j>=4)
        # and the mins take random permutations of 0..63.
        p_sc_hi, p_mn_lo, p_mn_hi = (r.permutation(64) for _ in range(3))
        for b in range(16):
            sc = [4 * b + j for j in range(4)] + [int(p_sc_hi[4 * b + j]) for j in range(4)]
            mn = [int(p_mn_lo[4 * b + j]) for j in range(4)] + [int(p_mn_hi[4 * b + j]) for j in range(4)]
            d, dm = rand_f16_bits(r, 2, 8, 14, 0.5)
            blocks.append(enc_kquant(tname, d, dm, sc, mn, k_codes(tname, r)))
        desc = ("16 blocks whose packed 6-bit scales and mins each take all 64 values 0..63 both in the "
                "low positions (sub-blocks 0-3) and the split high positions (sub-blocks 4-7)")
    out.append(("scale_codes", desc + ", 2 blocks per row", rows_of_blocks(blocks, 2)))

    r = rng_for(tname, "edge_scales")
    blocks = []
    if tname == "Q6_K":
        for d in Q6K_D_EDGE:
            sc = r.integers(-128, 128, 16)
            sc[:4] = [-128, 127, 0, -1]
            blocks.append(enc_q6k(d, r.permutation(sc), r.permutation(np.tile(np.arange(64), 4))))
        desc = "one block per d: subnormals, negative, +-0, +-65504, +-1; scales include -128, 127, 0, -1"
        out.append(("edge_scales", desc + ", 2 blocks per row", rows_of_blocks(blocks, 2)))
    else:
        for d, dm in K_DM_EDGE:
            sc = r.integers(0, 64, 8)
            mn = r.integers(0, 64, 8)
            sc[:2] = [0, 63]
            mn[:2] = [63, 0]
            blocks.append(enc_kquant(tname, d, dm, r.permutation(sc), r.permutation(mn), k_codes(tname, r)))
        desc = ("one block per (d, dmin) pair: subnormal, negative, +-0, +-65504 and mixed; "
                "scales/mins include 0 and 63")
        out.append(("edge_scales", desc + ", 2 blocks per row", rows_of_blocks(blocks, 2)))

    # all-equal blocks: every element of a block decodes to the same value
    if tname == "Q6_K":
        spec = [(0x3800, 3, 40), (0xB400, -7, 32), (0x3400, -7, 32), (0x0000, 5, 10)]
        blocks = [enc_q6k(d, [s] * 16, [c] * 256) for d, s, c in spec]
        desc = ("one block per row, all scales and codes equal: 0.5*3*8, -0.25*-7*0, 0.25*-7*0 (-0.0), "
                "0*5*-22 (-0.0)")
    else:
        top = 15 if tname == "Q4_K" else 31
        spec = [(0x3800, 0x3400, 10, 3, 7), (0x0000, 0xBE00, 5, 5, 9), (0xB800, 0x0000, 7, 9, 0),
                (0x7BFF, 0x7BFF, 63, 63, top)]
        blocks = [enc_kquant(tname, d, dm, [s] * 8, [m] * 8, [c] * 256) for d, dm, s, m, c in spec]
        desc = ("one block per row, all scales, mins and codes equal: 0.5*10*7-0.25*3, 0*5*9-(-1.5*5), "
                "-0.5*7*0-0*9 (-0.0), 65504*63*max-65504*63")
    out.append(("all_equal", desc, rows_of_blocks(blocks, 1)))
    out.append(("all_zero", "all-zero bytes, 2 blocks per row", np.zeros((2, 2 * ts), np.uint8)))
    return out


def build_cases():
    cases = []
    for tname in TYPES:
        if tname in ("F32", "F16", "BF16"):
            cs = cases_float(tname)
        elif tname.endswith("_K"):
            cs = cases_k(tname)
        else:
            cs = cases_legacy(tname)
        for cname, desc, raw in cs:
            raw = np.ascontiguousarray(raw, dtype=np.uint8)
            assert raw.ndim == 2 and raw.shape[0] >= 2
            cases.append((tname, cname, desc, raw))
    return cases


# ------------------------------------------------- independent element-wise decoder
# Written from the layout/arithmetic description in README.md, not from gguf-py's code.
# mode "f32": every operation on np.float32 scalars (what C++ float code does).
# mode "f64": Python floats (IEEE double), rounded to float32 once at the end; products are
#             asserted to be exactly representable in float32.

def _h(b, o):
    return struct.unpack_from("<e", b, o)[0]  # exact f16 -> double


def _i8(v):
    return v - 256 if v >= 128 else v


def spec_block(tname, b: bytes, mode: str) -> list:
    F = f32 if mode == "f32" else float
    out = []

    def exact(p):
        if mode == "f64":
            assert float(f32(p)) == p, (tname, p)
        return p

    if tname == "Q8_0":
        d = F(_h(b, 0))
        return [exact(F(_i8(b[2 + i])) * d) for i in range(32)]
    if tname in ("Q4_0", "Q4_1", "Q5_0", "Q5_1"):
        d = F(_h(b, 0))
        m = F(_h(b, 2)) if tname in ("Q4_1", "Q5_1") else None
        qs_off = {"Q4_0": 2, "Q4_1": 4, "Q5_0": 6, "Q5_1": 8}[tname]
        qh = struct.unpack_from("<I", b, qs_off - 4)[0] if tname.startswith("Q5") else 0
        for i in range(32):
            lo = (b[qs_off + i % 16] >> (4 * (i // 16))) & 0xF
            q = lo | (((qh >> i) & 1) << 4)
            if tname == "Q4_0":
                out.append(exact(d * F(q - 8)))
            elif tname == "Q5_0":
                out.append(exact(d * F(q - 16)))
            else:
                out.append(exact(d * F(q)) + m)
        return out
    if tname in ("Q4_K", "Q5_K"):
        d, dmin = F(_h(b, 0)), F(_h(b, 2))
        s = b[4:16]
        qh_off, qs_off = 16, (16 if tname == "Q4_K" else 48)
        for j in range(8):
            if j < 4:
                sc, mn = s[j] & 63, s[j + 4] & 63
            else:
                sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4)
                mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4)
            dl = exact(d * F(sc))
            ml = exact(dmin * F(mn))
            for l in range(32):
                q = (b[qs_off + 32 * (j // 2) + l] >> (4 * (j % 2))) & 0xF
                if tname == "Q5_K":
                    q |= ((b[qh_off + l] >> j) & 1) << 4
                out.append(exact(dl * F(q)) - ml)
        return out
    if tname == "Q6_K":
        d = F(_h(b, 208))
        for e in range(256):
            h, rr = divmod(e, 128)
            k, l = divmod(rr, 32)
            lo = (b[64 * h + rr % 64] >> (4 * (rr // 64))) & 0xF
            hi = (b[128 + 32 * h + l] >> (2 * k)) & 3
            q = (lo | (hi << 4)) - 32
            ds = exact(d * F(_i8(b[192 + e // 16])))
            out.append(exact(ds * F(q)))
        return out
    raise ValueError(tname)


def spec_dequant_bits(tname, raw: np.ndarray, mode: str) -> np.ndarray:
    """Return the uint32 bit patterns (rows, row_len) of the spec decoder."""
    rows = raw.shape[0]
    if tname == "F32":
        return raw.view("<u4").astype(np.uint32)
    if tname == "F16":
        v = [_h(bytes(raw[r]), 2 * i) for r in range(rows) for i in range(raw.shape[1] // 2)]
        return np.array(v, dtype=np.float32).view(np.uint32).reshape(rows, -1)
    if tname == "BF16":
        return raw.view("<u2").astype(np.uint32) << np.uint32(16)
    bs, ts = GGML_QUANT_SIZES[T[tname]]
    vals = []
    for r in range(rows):
        row = bytes(raw[r])
        for o in range(0, len(row), ts):
            vals.extend(spec_block(tname, row[o:o + ts], mode))
    return np.array([f32(v) for v in vals], dtype=np.float32).view(np.uint32).reshape(rows, -1)


# -------------------------------------------------------------------------- main

def main() -> int:
    t0 = time.perf_counter()
    cases = build_cases()

    w = gguf.GGUFWriter(OUT, ARCH)
    w.add_name("kvcheck dequantization fixtures")
    w.add_string(f"{ARCH}.generator", "datasets/gguf/make_quant_fixtures.py")
    w.add_string(f"{ARCH}.gguf_py_version", GGUF_VERSION)
    w.add_string(f"{ARCH}.numpy_version", np.__version__)
    w.add_uint32(f"{ARCH}.seed", SEED)
    w.add_array(f"{ARCH}.cases", [f"{t}.{c}" for t, c, _, _ in cases])

    expected = {}
    for tname, cname, desc, raw in cases:
        name = f"{tname}.{cname}"
        w.add_string(f"{ARCH}.case.{name}", desc)
        exp = dequantize(raw, T[tname])
        exp = np.ascontiguousarray(exp)
        assert exp.dtype == np.float32, (name, exp.dtype)
        assert exp.ndim == 2 and exp.shape[0] == raw.shape[0], (name, exp.shape)
        assert np.isfinite(exp).all(), f"{name}: non-finite value"
        expected[name] = exp
        w.add_tensor(name, raw, raw_dtype=T[tname])
        w.add_tensor(name + ".expected", exp)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    t_write = time.perf_counter() - t0

    # ---- verify by reading back
    t1 = time.perf_counter()
    rd = gguf.GGUFReader(OUT)
    assert rd.fields["general.architecture"].contents() == ARCH
    tens = {t.name: t for t in rd.tensors}
    want_names = []
    for tname, cname, _, _ in cases:
        want_names += [f"{tname}.{cname}", f"{tname}.{cname}.expected"]
    assert [t.name for t in rd.tensors] == want_names, "tensor order/names differ"

    print(f"{'tensor':28s} {'type':5s} {'ne (ggml order)':>16s} {'blk/row':>7s} {'-0.0':>5s} {'+0.0':>5s}  min .. max")
    n_negzero_total = 0
    for tname, cname, desc, raw in cases:
        name = f"{tname}.{cname}"
        qt, et = tens[name], tens[name + ".expected"]
        bs, ts = GGML_QUANT_SIZES[T[tname]]
        rows, row_len = expected[name].shape
        assert qt.tensor_type == T[tname] and et.tensor_type == T.F32
        assert qt.shape.tolist() == [row_len, rows] == et.shape.tolist(), (name, qt.shape, et.shape)
        assert np.array_equal(np.asarray(qt.data).view(np.uint8).reshape(raw.shape), raw), f"{name}: raw bytes differ"
        e_bits = np.asarray(et.data).view(np.uint32)
        assert e_bits.shape == (rows, row_len)
        assert np.array_equal(e_bits, expected[name].view(np.uint32))
        re = dequantize(np.asarray(qt.data), qt.tensor_type)
        assert re.dtype == np.float32 and re.shape == (rows, row_len)
        assert np.array_equal(re.view(np.uint32), e_bits), f"{name}: re-dequantization differs"
        for mode in ("f32", "f64"):
            sb = spec_dequant_bits(tname, raw, mode)
            if not np.array_equal(sb, e_bits):
                bad = np.argwhere(sb != e_bits)[0]
                raise AssertionError(f"{name}: spec decoder ({mode}) differs at {tuple(bad)}: "
                                     f"{sb[tuple(bad)]:08x} vs {e_bits[tuple(bad)]:08x}")
        if cname == "scale_codes":  # coverage claimed in the case description
            blocks = raw.reshape(-1, ts)
            if tname == "Q6_K":
                assert sorted(blocks[:, 192:208].view(np.int8).reshape(-1).tolist()) == list(range(-128, 128))
            else:
                sc, mn = Q4_K.get_scale_min(np.ascontiguousarray(blocks[:, 4:16]))
                for part in (sc[:, :4], sc[:, 4:], mn[:, :4], mn[:, 4:]):
                    assert sorted(part.reshape(-1).tolist()) == list(range(64)), name
        negz = int(np.count_nonzero(e_bits == 0x80000000))
        posz = int(np.count_nonzero(e_bits == 0))
        n_negzero_total += negz
        v = np.asarray(et.data)
        print(f"{name:28s} {tname:5s} {str(qt.shape.tolist()):>16s} {row_len // bs if bs > 1 else '-':>7} "
              f"{negz:5d} {posz:5d}  {v.min():.6g} .. {v.max():.6g}")
    t_verify = time.perf_counter() - t1

    data = OUT.read_bytes()
    print(f"\n{OUT.name}: {len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()}")
    print(f"{len(cases)} cases, {len(rd.tensors)} tensors, {n_negzero_total} expected values are -0.0")
    print(f"gguf {GGUF_VERSION}, numpy {np.__version__}")
    print(f"build+write {t_write:.2f} s, read-back verification {t_verify:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
