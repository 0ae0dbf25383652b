#!/usr/bin/env python3
"""Writes the scheduler fuzzer's seed corpus (datasets/fuzz/scheduler/): command streams in the
byte encoding scheduler_fuzz.cpp reads (each field one byte taken modulo its range, token ids two
bytes), one per scenario the fuzzer should start from. Deterministic: rerunning rewrites the
same files.  python3 properties/fuzz/make_scheduler_seeds.py"""
import pathlib
import random

POLICIES = ["full-fp16", "int8", "leankv", "kivi2", "h2o", "streaming", "snapkv", "spvllm-no-op", "spvllm-sparse-copy"]
MODES = {"recompute": 0, "swap": 1, "auto": 2}
rng = random.Random(7)


def header(policy, mode, batch, watermark_tenths, recompute_max, swap_quarters, contiguous, pages, page_bytes=512,
           prefix_cache=False):
    # reservation byte: 0 contiguous, 1 paging with the prefix cache (prefix-closed policies), 2 paging
    return bytes([POLICIES.index(policy), MODES[mode], batch - 1, watermark_tenths - 5, recompute_max,
                  swap_quarters, 0 if contiguous else 1 if prefix_cache else 2, pages - 6,
                  {512: 0, 1024: 1, 2048: 2}[page_bytes]])


TEMPERATURES = {0.0: 0, 0.8: 1, 1.5: 2}


def submit(rid, n, max_new, eos=False, arrival=0, tokens=None, unknown=False, samples=1, temperature=0.0):
    assert max_new < 24 and arrival < 4 and 1 <= samples <= 4
    b = [0, rid, n, 0 if unknown else 1]
    for i in range(n):
        t = tokens[i] if tokens else rng.randrange(2048)
        b += [t >> 8, t & 255]
    return bytes(b + [max_new, 0 if eos else 1, arrival, samples - 1, TEMPERATURES[temperature]])


STEP, STEPS4 = bytes([1]), bytes([3])


def cancel(rid):
    return bytes([2, rid])


def many(k, n, max_new, **kw):
    return b"".join(submit(i, n, max_new, **kw) for i in range(k))


SYSTEM = [rng.randrange(2048) for _ in range(13)]

SEEDS = {
    # swap preemption on a tight pool, unbounded host memory
    "swap-full-fp16": header("full-fp16", "swap", 4, 9, 0, 0, False, 30) + many(4, 10, 20) + STEPS4 * 6,
    # the same with 2048 bytes of host memory: swaps beyond it recompute
    "swap-budget": header("full-fp16", "swap", 4, 9, 0, 1, False, 30) + many(4, 10, 20) + STEPS4 * 6,
    # recompute preemption of an evicting policy
    "recompute-h2o": header("h2o", "recompute", 5, 9, 0, 0, False, 24) + many(5, 14, 22) + STEPS4 * 8,
    # LeanKV's tiers in auto mode; a running and a queued request cancelled
    "cancel-leankv": header("leankv", "auto", 2, 9, 20, 0, False, 40)
    + b"".join(submit(i, 8 + i, 16, arrival=i % 3) for i in range(4)) + STEPS4 + cancel(0) + STEP + cancel(3) + STEPS4 * 4,
    # bad requests (empty, too long, an unknown token id, a duplicate id) among good ones; KIVI groups need 2 KiB pages
    "bad-requests-kivi2": header("kivi2", "auto", 3, 9, 30, 0, False, 60, 2048) + submit(1, 0, 4) + submit(2, 50, 4)
    + submit(3, 6, 4, tokens=[1, 2100, 5, 6, 7, 8], unknown=True) + submit(4, 6, 4) + submit(4, 7, 4) + submit(5, 20, 23)
    + STEPS4 * 4,
    # contiguous reservation of the whole context, staggered arrivals
    "contiguous-int8": header("int8", "auto", 4, 9, 30, 0, True, 63, 1024)
    + b"".join(submit(i, 6, 10, arrival=i % 4) for i in range(5)) + STEPS4 * 5,
    # SpvLLM's no-op on a small pool: pages are never freed before a request ends
    "spvllm-no-op": header("spvllm-no-op", "auto", 3, 8, 10, 0, False, 20) + many(3, 12, 23) + STEPS4 * 8,
    # sparse-copy with EOS allowed, submissions between steps
    "spvllm-sparse-eos": header("spvllm-sparse-copy", "recompute", 6, 10, 10, 2, False, 45)
    + b"".join(submit(i, 5 + 3 * i, 18, eos=True) + STEP for i in range(6)) + STEPS4 * 4,
    # streaming and snapkv at the context limit
    "context-limit-streaming": header("streaming", "recompute", 2, 9, 0, 0, False, 63, 1024) + many(2, 40, 23) + STEPS4 * 4,
    # the prefix cache: requests sharing a 13-token system prompt (4 whole 3-token pages and one
    # token more), arriving apart, on a pool tight enough to evict cached pages and preempt
    "prefix-cache-fp16": header("full-fp16", "auto", 4, 9, 12, 0, False, 40, prefix_cache=True)
    + b"".join(submit(i, 13 + i, 12, arrival=i % 4, tokens=SYSTEM + [100 + i] * i) + STEP for i in range(6)) + STEPS4 * 6,
    "prefix-cache-int8-swap": header("int8", "swap", 3, 8, 0, 0, False, 30, prefix_cache=True)
    + many(3, 13, 16, tokens=SYSTEM) + b"".join(submit(3 + i, 16, 10, tokens=SYSTEM + [7, 8, 9]) for i in range(3))
    + STEPS4 * 6,
    # parallel sampling: groups of 2 to 4 samples, greedy and sampled, on a tight pool (preempted
    # as units), one group with the prefix cache
    "fork-fp16": header("full-fp16", "auto", 6, 9, 12, 0, False, 36)
    + b"".join(submit(i, 7 + 2 * i, 14, samples=2 + i % 3, temperature=[0.0, 0.8, 1.5][i % 3]) for i in range(4))
    + STEPS4 * 8,
    "fork-int8-prefix-cache": header("int8", "auto", 8, 9, 12, 0, False, 40, prefix_cache=True)
    + b"".join(submit(i, 13, 12, tokens=SYSTEM, samples=3, temperature=0.8, arrival=i % 2) for i in range(3))
    + STEPS4 * 8,
    "context-limit-snapkv": header("snapkv", "recompute", 2, 9, 0, 0, False, 63, 1024) + many(2, 44, 23) + STEPS4 * 4,
}

out = pathlib.Path(__file__).resolve().parents[2] / "datasets" / "fuzz" / "scheduler"
out.mkdir(parents=True, exist_ok=True)
for name, data in SEEDS.items():
    (out / name).write_bytes(data)
print(f"{len(SEEDS)} seeds in {out}")
