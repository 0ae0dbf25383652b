#!/usr/bin/env python3
"""Assembles ci/gpu.sh --quick's summary, OUT/quick.json, from the parts' result lines and the
benchmark JSON they wrote (format kvcheck-gpu-quick, documented in docs/gpu.md). Standard library
only; a part that did not run or whose JSON is missing leaves its list empty, and says so in
`parts`.

    python3 ci/gpu_quick_json.py OUT_DIR [--self-test]
"""
import json
import pathlib
import re
import sys

PARTS = ["gpu-tests", "sanitize-memcheck", "bench-attention", "bench-pages", "bench-serving", "bench-serving-resident",
         "peer-sdpa"]
# The serving runs, one kvcheck bench document per engine: the host-copy one, then the resident one.
SERVING = ["bench-serving.json", "bench-serving-resident.json"]
ATTENTION = re.compile(r"^BM_DecodeAttentionCuda/(?P<tiers>[^/]+)/ctx:(?P<ctx>\d+)/batch:(?P<batch>\d+)(?P<one>/one-block)?"
                       r"(?:/iterations:\d+)?(?:/manual_time)?$")


def part(out, name):
    p = out / f"{name}.result"
    if not p.exists():
        return {"name": name, "ran": False}
    line = p.read_text().strip()
    m = re.match(r"rc=(-?\d+) (\d+)s ?(.*)$", line)
    if not m:
        return {"name": name, "ran": False, "result": line}
    return {"name": name, "ran": True, "rc": int(m.group(1)), "seconds": int(m.group(2)), "result": m.group(3).strip()}


def benchmarks(path):
    try:
        return json.loads(path.read_text()).get("benchmarks", [])
    except (OSError, ValueError):
        return []


def assemble(out):
    doc = {"format": "kvcheck-gpu-quick", "version": 2,
           "device": (out / "device.txt").read_text().strip() if (out / "device.txt").exists() else "unknown",
           "commit": (out / "commit.txt").read_text().strip() if (out / "commit.txt").exists() else "unknown",
           "parts": [part(out, n) for n in PARTS],
           "decode_attention": [], "compaction": [], "serving": [], "peer": None}
    try:
        doc["peer"] = json.loads((out / "peer-sdpa.json").read_text())
    except (OSError, ValueError):
        doc["peer"] = None
    doc["not_measured"] = [] if doc["peer"] else ["a read-stream baseline beside the device-to-device copy",
                                                  "a PyTorch SDPA peer row"]
    for b in benchmarks(out / "bench-attention.json"):
        m = ATTENTION.match(b.get("name", ""))
        if not m or b.get("error_occurred"):
            continue
        copy = b.get("copy_GBps", 0.0)
        ratio = b.get("vs_copy_bw", 0.0)
        doc["decode_attention"].append({
            "tiers": m.group("tiers"), "context": int(m.group("ctx")), "batch": int(m.group("batch")),
            "kernel": "one-block" if m.group("one") else "split", "us": b.get("real_time"),
            "stored_MiB": b.get("stored_MiB"), "GBps": round(ratio * copy, 3), "copy_GBps": copy, "vs_copy_bw": ratio})
    for b in benchmarks(out / "bench-pages.json"):
        if "Gpu" in b.get("name", "") and not b.get("error_occurred"):
            doc["compaction"].append({"name": b["name"], "us": b.get("real_time"), "unit": b.get("time_unit")})
    for name in SERVING:
        try:
            doc["serving"].append(json.loads((out / name).read_text()))
        except (OSError, ValueError):
            pass
    return doc


def self_test():
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        out = pathlib.Path(d)
        (out / "gpu-tests.result").write_text("rc=0 61s PASSED 120 tests.;\n")
        (out / "bench-serving-resident.json").write_text(json.dumps({"device": "cuda-resident", "rows": []}))
        (out / "bench-attention.json").write_text(json.dumps({"benchmarks": [
            {"name": "BM_DecodeAttentionCuda/fp16/ctx:4096/batch:16/manual_time", "real_time": 50.0,
             "copy_GBps": 3000.0, "vs_copy_bw": 0.25, "stored_MiB": 128.0},
            {"name": "BM_DecodeAttentionCuda/K8V4/ctx:32768/batch:16/one-block/iterations:1/manual_time", "real_time": 90.0,
             "copy_GBps": 3000.0, "vs_copy_bw": 0.1, "stored_MiB": 64.0},
            {"name": "BM_DecodeAttention/fp16", "real_time": 1.0}]}))
        doc = assemble(out)
        peer_absent = doc["peer"] is None and len(doc["not_measured"]) == 2
        (out / "peer-sdpa.json").write_text(json.dumps({"format": "kvcheck-peer-sdpa", "read_GBps": 3500.0, "rows": []}))
        with_peer = assemble(out)
        peer_read = with_peer["peer"]["read_GBps"] == 3500.0 and with_peer["not_measured"] == []
        ok = (doc["parts"][0] == {"name": "gpu-tests", "ran": True, "rc": 0, "seconds": 61, "result": "PASSED 120 tests.;"}
              and not doc["parts"][1]["ran"] and len(doc["decode_attention"]) == 2
              and doc["decode_attention"][0]["GBps"] == 750.0 and doc["decode_attention"][1]["kernel"] == "one-block"
              and doc["decode_attention"][1]["context"] == 32768 and peer_absent and peer_read
              and doc["serving"] == [{"device": "cuda-resident", "rows": []}])
        print("self-test:", "passed" if ok else f"FAILED: {json.dumps(doc, indent=1)}")
        return 0 if ok else 1


def main():
    if "--self-test" in sys.argv:
        return self_test()
    out = pathlib.Path(sys.argv[1])
    doc = assemble(out)
    (out / "quick.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {out / 'quick.json'}: {len(doc['decode_attention'])} decode rows, "
          f"{len(doc['compaction'])} compaction rows, {len(doc['serving'])} serving runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
