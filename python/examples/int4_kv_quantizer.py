"""A numpy INT4 KV quantizer held to kvcheck's bound: copy this file and replace `quantize_int4`
with your kernel (numpy, torch, Triton: anything that gives back x_hat as float32).

The quantizer stores, per token (row) of a [tokens, head_dim] block, a min-max scale and zero and
one 4-bit code per element: x_hat = code * scale + zero. kvcheck.check_quantized holds every
element to the bound kvcheck derives for the format "int4/token" (docs/design.md §4: half the
covering fp16 scale plus float slack) and, when one is outside it, raises kvcheck.BoundViolation
naming the element, its error and its bound.

    python3 python/examples/int4_kv_quantizer.py          # the correct quantizer passes
    python3 python/examples/int4_kv_quantizer.py --bug    # the planted bug is caught

The planted bug is the classic off-by-one: dividing the range by 2^4 = 16 levels instead of the
2^4 - 1 = 15 steps between 16 codes, so every row's maximum clamps one step short.
"""

import sys

import numpy as np

import kvcheck


def quantize_int4(x, planted_bug=False):
    """x [tokens, head_dim] float32 -> (codes uint8 [tokens, head_dim], scale, zero [tokens, 1] float16)."""
    lo = x.min(axis=1, keepdims=True)
    hi = x.max(axis=1, keepdims=True)
    steps = 16 if planted_bug else 15
    # fp16 metadata, as a KV cache stores it: the scale rounded up so the range stays covered,
    # the zero rounded down.
    zero = lo.astype(np.float16)
    zero = np.where(zero.astype(np.float32) > lo, np.nextafter(zero, np.float16(-np.inf)), zero)
    scale = ((hi - zero.astype(np.float32)) / steps).astype(np.float16)
    scale = np.where(scale.astype(np.float32) * steps < hi - zero.astype(np.float32),
                     np.nextafter(scale, np.float16(np.inf)), scale)
    s = scale.astype(np.float32)
    codes = np.clip(np.rint((x - zero.astype(np.float32)) / np.where(s > 0, s, 1)), 0, 15).astype(np.uint8)
    return codes, scale, zero


def dequantize_int4(codes, scale, zero):
    return (codes.astype(np.float32) * scale.astype(np.float32) + zero.astype(np.float32)).astype(np.float32)


def check(x, planted_bug=False):
    """Raises kvcheck.BoundViolation when the quantizer misses kvcheck's int4/token bound."""
    x_hat = dequantize_int4(*quantize_int4(x, planted_bug))
    return kvcheck.check_quantized(x, x_hat, "int4/token")


def main():
    rng = np.random.default_rng(0)
    keys = rng.standard_normal((256, 128)).astype(np.float32)  # one (layer, head) block
    report = check(keys, planted_bug="--bug" in sys.argv)
    print(f"int4/token: every element within kvcheck's bound; the worst uses {report['share_of_bound']:.3f} of it")


if __name__ == "__main__":
    main()
