"""A hand-written compressed decode attention held to kvcheck's per-step oracle: copy this file
and replace `decode_attention` with your kernel.

The cache keeps StreamingLLM's held set, the first `sinks` tokens and the last `window` ones,
with keys and values stored as INT8 per token (kvcheck's "int8/token"). One decode step of one kv
head and its group of query heads is checked twice by kvcheck.check_decode_step
(docs/design.md §7):
  held  the output equals exact attention (double) over exactly the tokens the cache claims to
        hold, as their format stores them, within the float rounding the kernel may add;
  full  its distance from exact attention over every token, exact, is within the bound the
        oracle derives: a quantization term plus a pruning term (the evicted tokens' mass).
A violation raises kvcheck.OracleViolation naming the worst query head, its error and its bound.

    python3 python/examples/compressed_decode_attention.py          # passes
    python3 python/examples/compressed_decode_attention.py --bug    # the planted bug is caught

The planted bug is an off-by-one in the window: the kernel also reads the newest evicted token,
one the cache no longer holds.
"""

import sys

import numpy as np

import kvcheck

FORMAT = "int8/token"


def held_tokens(context, sinks, window):
    return np.r_[0:min(sinks, context), max(sinks, context - window):context].astype(np.int32)


def decode_attention(q, key_cache, value_cache, context, sinks, window, planted_bug=False):
    """q [group, head_dim]; key_cache, value_cache [context, head_dim] (dequantized rows) -> [group, head_dim]."""
    start = max(sinks, context - window - (1 if planted_bug else 0))
    idx = np.r_[0:min(sinks, context), start:context]
    k, v = key_cache[idx], value_cache[idx]
    s = (q @ k.T) * np.float32(1 / np.sqrt(q.shape[1]))
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return ((p / p.sum(axis=1, keepdims=True)) @ v).astype(np.float32)


def step(seed=0, context=200, sinks=4, window=96, group=4, head_dim=64, planted_bug=False):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((group, head_dim)).astype(np.float32)
    keys = rng.standard_normal((context, head_dim)).astype(np.float32)
    values = rng.standard_normal((context, head_dim)).astype(np.float32)
    # The cache stores every row as INT8 per token (evicted rows are never read by a correct kernel).
    key_cache = kvcheck.dequantize(kvcheck.quantize(keys, FORMAT))
    value_cache = kvcheck.dequantize(kvcheck.quantize(values, FORMAT))
    out = decode_attention(q, key_cache, value_cache, context, sinks, window, planted_bug)
    return kvcheck.check_decode_step(q, keys, values, held_tokens(context, sinks, window), out,
                                     key_format=FORMAT, value_format=FORMAT)


def main():
    check = step(planted_bug="--bug" in sys.argv)
    print(f"per-step oracle holds: held error {check.held_error:.3g} <= {check.held_tolerance:.3g}, "
          f"full error {check.full_error:.3g} <= bound {check.full_bound:.3g} (pruned mass {check.pruned_mass:.3g})")


if __name__ == "__main__":
    main()
