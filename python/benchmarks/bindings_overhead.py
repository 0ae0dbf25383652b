"""The bindings' overhead: kvcheck.quantize from Python against the same C++ call timed in C++.

Both sides quantize the same 1M-element float32 block ([8192, 128]) and allocate their outputs
each call, as the binding does; the C++ side is kvcheck._kvcheck._time_quantize_cpp (a loop of
kvcheck::quantize in C++). Rounds alternate the two sides; the medians are compared.

    python3 python/benchmarks/bindings_overhead.py [--rounds 15] [--repeats 20]

Prints one line per format: C++ ms, Python ms, overhead %; then the fixed cost of one call, from
an 8-element block (where the work is nothing), which is what the overhead is made of. docs/perf/2026-11-28-python-bindings.md
holds a measured run.
"""

import argparse
import statistics
import time

import numpy as np

import kvcheck
from kvcheck import _kvcheck


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--repeats", type=int, default=20, help="calls per round")
    ap.add_argument("--formats", default="int8/token,int4/token,int4/group-g32")
    args = ap.parse_args()
    x = np.random.default_rng(0).standard_normal((8192, 128)).astype(np.float32)
    print(f"{'format':16} {'C++ ms':>9} {'Python ms':>10} {'overhead':>9}   (1M float32 elements, median of {args.rounds} rounds x {args.repeats})")
    for fmt in args.formats.split(","):
        kvcheck.quantize(x, fmt)  # warm up
        cpp, py = [], []
        for _ in range(args.rounds):
            cpp.append(_kvcheck._time_quantize_cpp(x, fmt, args.repeats))
            t = time.perf_counter()
            for _ in range(args.repeats):
                kvcheck.quantize(x, fmt)
            py.append((time.perf_counter() - t) / args.repeats)
        c, p = statistics.median(cpp), statistics.median(py)
        print(f"{fmt:16} {c * 1e3:9.3f} {p * 1e3:10.3f} {100 * (p / c - 1):8.1f}%")
    tiny = x[:1, :8].copy()
    cpp, py = [], []
    for _ in range(args.rounds):
        cpp.append(_kvcheck._time_quantize_cpp(tiny, "int4/token", 2000))
        t = time.perf_counter()
        for _ in range(2000):
            kvcheck.quantize(tiny, "int4/token")
        py.append((time.perf_counter() - t) / 2000)
    c, p = statistics.median(cpp), statistics.median(py)
    print(f"one call on 8 elements: C++ {c * 1e6:.2f} us, Python {p * 1e6:.2f} us: {1e6 * (p - c):.2f} us a call")


if __name__ == "__main__":
    main()
