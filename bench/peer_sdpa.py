#!/usr/bin/env python3
"""The PyTorch peer of kvcheck's CUDA decode-attention benchmark, and the same run's memory
baselines, for ci/gpu.sh --quick (issue 49; the JSON is described in docs/gpu.md).

For each context C and batch B: a contiguous fp16 cache K, V of [B, 8, C, 128] (Llama-3-8B's 8 kv
heads and head_dim 128, the shape of BM_DecodeAttentionCuda) and one decode step's queries with
the group of 4 query heads folded into the query length, q [B, 8, 4, 128], so that one call reads
each kv head once; torch.nn.functional.scaled_dot_product_attention(q, K, V) timed with CUDA
events over enough copies of the cache that they do not stay in L2 (256 MiB at least). Bytes read:
K and V. Beside them, in the same process: a device-to-device copy of 512 MiB, counted as
2 x bytes / s as kernels/cuda/paged_attention_timing.cu counts it, and a read stream (torch.sum
over 512 MiB of float32, bytes / s).

    python3 bench/peer_sdpa.py --out peer-sdpa.json [--contexts 4096,32768] [--batches 1,16,64]
    python3 bench/peer_sdpa.py --self-test    CPU, small shapes: the attention it times against
                                              softmax(q k^T / sqrt(d)) v in float64, and the JSON
"""
import argparse
import json
import math
import sys

KV_HEADS, GROUP, HEAD_DIM = 8, 4, 128
MIN_SET_BYTES = 256 << 20
STREAM_BYTES = 512 << 20


def attend(torch, q, k, v):
    """SDPA where this torch has it (2.0 and later), else the plain formula (named in `backend`)."""
    f = getattr(torch.nn.functional, "scaled_dot_product_attention", None)
    if f is not None:
        return f(q, k, v), "sdpa"
    s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    return torch.matmul(torch.softmax(s.float(), dim=-1).to(v.dtype), v), "manual"


def timed(torch, device, fn, repeats):
    """Median seconds of fn() over `repeats` calls: CUDA events on a GPU, perf_counter elsewhere."""
    import time
    fn()
    times = []
    for _ in range(repeats):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e-3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]


def baselines(torch, device, nbytes, repeats):
    src = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    copy_s = timed(torch, device, lambda: dst.copy_(src), repeats)
    read_s = timed(torch, device, lambda: torch.sum(src, dtype=torch.float32), repeats)
    return 2.0 * nbytes / copy_s, nbytes / read_s


def measure(torch, device, contexts, batches, repeats, stream_bytes=STREAM_BYTES):
    """fp16 on the GPU; float32 on the CPU (the self-test: CPU torch has no fp16 matmul)."""
    copy_bps, read_bps = baselines(torch, device, stream_bytes, repeats)
    dtype = torch.float16 if device == "cuda" else torch.float32
    elem = 2 if device == "cuda" else 4
    rows = []
    for context in contexts:
        for batch in batches:
            shape = (batch, KV_HEADS, context, HEAD_DIM)
            bytes_read = 2 * batch * KV_HEADS * context * HEAD_DIM * elem
            sets = max(1, math.ceil(MIN_SET_BYTES / bytes_read)) if device == "cuda" else 1
            caches = [(torch.randn(shape, dtype=dtype, device=device),
                       torch.randn(shape, dtype=dtype, device=device)) for _ in range(sets)]
            q = torch.randn((batch, KV_HEADS, GROUP, HEAD_DIM), dtype=dtype, device=device)
            backend = attend(torch, q, *caches[0])[1]
            calls = [0]

            def step():
                k, v = caches[calls[0] % sets]
                calls[0] += 1
                return attend(torch, q, k, v)[0]

            seconds = timed(torch, device, step, repeats)
            rows.append({"context": context, "batch": batch, "backend": backend, "us": seconds * 1e6,
                         "bytes": bytes_read, "GBps": bytes_read / seconds * 1e-9, "copies": sets,
                         "vs_copy_bw": bytes_read / seconds / copy_bps, "vs_read_stream": bytes_read / seconds / read_bps})
            del caches
    return {"copy_GBps": copy_bps * 1e-9, "read_GBps": read_bps * 1e-9, "rows": rows}


def self_test():
    try:
        import torch
    except ImportError:
        print("peer_sdpa self-test: skipped: no torch in this python3", file=sys.stderr)
        return 77
    torch.manual_seed(3)
    print("seed 3")
    q = torch.randn((2, KV_HEADS, GROUP, 16), dtype=torch.float32)
    k = torch.randn((2, KV_HEADS, 37, 16), dtype=torch.float32)
    v = torch.randn((2, KV_HEADS, 37, 16), dtype=torch.float32)
    got, backend = attend(torch, q, k, v)
    qd, kd, vd = q.double(), k.double(), v.double()
    want = torch.softmax(qd @ kd.transpose(-1, -2) / 4.0, dim=-1) @ vd
    err = (got.double() - want).abs().max().item()
    doc = measure(torch, "cpu", [64], [1, 2], 3, stream_bytes=1 << 20)
    ok = (err < 1e-5 and [(r["context"], r["batch"]) for r in doc["rows"]] == [(64, 1), (64, 2)]
          and all(r["GBps"] > 0 and r["bytes"] == 2 * r["batch"] * KV_HEADS * 64 * HEAD_DIM * 4 for r in doc["rows"])
          and doc["copy_GBps"] > 0 and doc["read_GBps"] > 0)
    print(f"peer_sdpa self-test ({backend}, torch {torch.__version__}): max |error| {err:.2e}:",
          "passed" if ok else "FAILED " + json.dumps(doc))
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out")
    ap.add_argument("--contexts", default="4096,32768")
    ap.add_argument("--batches", default="1,16,64")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    if not a.out:
        ap.error("--out FILE is required")
    try:
        contexts = [int(x) for x in a.contexts.split(",")]
        batches = [int(x) for x in a.batches.split(",")]
    except ValueError:
        ap.error("--contexts and --batches take comma-separated integers")
    import torch
    if not torch.cuda.is_available():
        print("peer_sdpa: no CUDA device for torch", file=sys.stderr)
        return 2
    doc = {"format": "kvcheck-peer-sdpa", "version": 1, "torch": torch.__version__,
           "device": torch.cuda.get_device_name(0), "shape": {"kv_heads": KV_HEADS, "group": GROUP, "head_dim": HEAD_DIM}}
    doc.update(measure(torch, "cuda", contexts, batches, a.repeats))
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    for r in doc["rows"]:
        print(f"peer {r['backend']} ctx {r['context']} batch {r['batch']}: {r['GBps']:.0f} GB/s, "
              f"{r['vs_copy_bw']:.2f} of copy, {r['vs_read_stream']:.2f} of read stream")
    return 0


if __name__ == "__main__":
    sys.exit(main())
