"""The `claims` table of render_tables.py: the papers' claims, each re-measured on two models.

    <!-- table: claims SMOLLM2_LONG_REPORT.json KVCHECK_TINY_SWEEP.json -->

The first file is the report.json of `kvcheck report --long` (rows named `h2o@1/8`, ...), the
second the committed `kvcheck verify --sweep` of kvcheck-tiny (rows named by full spec). Paths are
relative to the page. The rule (stated on docs/perf/2026-11-28-papers-claims.md):

- a comparison "A beats B" is **held** when A's mean KL is lower than B's by more than twice the
  combined standard error (sqrt(se_A^2 + se_B^2)) and, where the claim is at equal bytes, A holds
  (or reads) at most 1.05x B's bytes; **not held** when A's KL is not lower and A has at least
  1/1.05 of B's bytes; **within noise** when A's KL is lower by less than that at about equal
  bytes; **bytes differ** when the two sides' bytes differ by more than 5% and the KL does not
  settle it (A wins only with more bytes, or loses with fewer);
- "near lossless": perplexity ratio at most 1.01 and top-1 agreement at least 0.95;
- **not measured** when a model's JSON has no row for a side.
"""
import math

BYTES_SLACK = 1.05
SIGMAS = 2.0
LOSSLESS_PPL = 1.01
LOSSLESS_TOP1 = 0.95

# One claim per row. `a` is the side the paper says is better, `b` the side it is compared with;
# each side names its kvcheck-tiny row (full spec in the sweep) and its SmolLM2 row (report name),
# None where that model's JSON has no such row. `bytes`: which bytes must be equal (None: the
# claim is at equal bit width, the bytes are shown but not required to match).
CLAIMS = [
    dict(claim="Keys need more bits than values: K8V4 beats K4V8 (LeanKV, 000)", bytes="kv_bytes_vs_fp16",
         a=("K8V4", "kv-bits:k=8,v=4", "kv-bits:k=8,v=4"), b=("K4V8", "kv-bits:k=4,v=8", "kv-bits:k=4,v=8")),
    dict(claim="Keys need more bits than values: K4V2 beats K2V4 (LeanKV, 000)", bytes="kv_bytes_vs_fp16",
         a=("K4V2", "kv-bits:k=4,v=2", "kv-bits:k=4,v=2"), b=("K2V4", "kv-bits:k=2,v=4", "kv-bits:k=2,v=4")),
    dict(claim="K8V4 is near lossless (LeanKV, 000)", lossless=("K8V4", "kv-bits:k=8,v=4", "kv-bits:k=8,v=4")),
    dict(claim="Per-head dynamic tiers beat static tiers at equal memory (LeanKV, 000)", bytes="kv_bytes_vs_fp16",
         a=("dynamic", "leankv:alpha_h=1,alpha_l=0.02,window=64,high_k=8,high_v=4,low_k=4,low_v=2", "leankv"),
         b=("static", "leankv:static_high=71,static_low=115,window=64,high_k=8,high_v=4,low_k=4,low_v=2", None)),
    dict(claim="Pyramid per-layer budgets beat uniform ones (MiniKV, 002)", bytes="kv_bytes_vs_fp16", at="1/8",
         a=("pyramidkv", "pyramidkv:budget=32,ratio=20,window=8,pool=7", "pyramidkv@1/8"),
         b=("snapkv", "snapkv:budget=32,window=16,pool=7", "snapkv@1/8")),
    dict(claim="Greedy per-layer budgets beat uniform ones (XKV, 003)", bytes="kv_bytes_vs_fp16", at="1/8",
         a=("xkv", "xkv:budget=32,window=8,pool=7", "xkv@1/8"),
         b=("snapkv", "snapkv:budget=32,window=16,pool=7", "snapkv@1/8")),
    dict(claim="Heavy hitters beat sinks + a recent window (H2O vs StreamingLLM, primer 004)",
         bytes="kv_bytes_read_vs_fp16", at="1/8",
         a=("h2o", "h2o:budget=32,recent=0.5", "h2o@1/8"),
         b=("streaming", "streaming:sinks=4,window=28", "streaming@1/8")),
    dict(claim="Prompt selection by an observation window beats H2O (SnapKV)", bytes="kv_bytes_read_vs_fp16", at="1/8",
         a=("snapkv", "snapkv:budget=32,window=16,pool=7", "snapkv@1/8"),
         b=("h2o", "h2o:budget=32,recent=0.5", "h2o@1/8")),
    dict(claim="Head-wise budgets beat their uniform base (Ada-KV over SnapKV)", bytes="kv_bytes_read_vs_fp16", at="1/8",
         a=("adakv", "adakv:budget=32,base=snapkv,floor=0.2,window=16,pool=7", "adakv@1/8"),
         b=("snapkv", "snapkv:budget=32,window=16,pool=7", "snapkv@1/8")),
    dict(claim="Query-aware page selection beats eviction at equal bytes read (Quest over H2O)",
         bytes="kv_bytes_read_vs_fp16", nearest=True,
         a=("quest", "quest:pages=1", "quest"),
         b=("h2o", ["h2o:budget=32,recent=0.5", "h2o:budget=64,recent=0.5", "h2o:budget=96,recent=0.5",
                    "h2o:budget=128,recent=0.5"], ["h2o@1/8", "h2o@1/4", "h2o@1/2"])),
    dict(claim="Full cache on retrieval heads only beats StreamingLLM (DuoAttention)", bytes="kv_bytes_read_vs_fp16", at="1/8",
         a=("duo", "duo:retrieval=0.25,sinks=4,recent=28", "duo@1/8"),
         b=("streaming", "streaming:sinks=4,window=28", "streaming@1/8")),
    dict(claim="Per-channel keys, per-token values beat per-token INT2 (KIVI-2, via MiniKV 002)", bytes=None,
         a=("kivi2", "kivi2:group=32,residual=128", "kivi2"), b=("INT2", "kv-bits:k=2,v=2", "kv-bits:k=2,v=2")),
    dict(claim="A Hadamard rotation lowers INT4 error (rotation before quantization)", bytes="kv_bytes_vs_fp16",
         a=("rotated", "int4:rotate=hadamard", "int4:rotate=hadamard"), b=("plain", "int4", "int4")),
    dict(claim="A Hadamard rotation lowers INT2 error (rotation before quantization)", bytes="kv_bytes_vs_fp16",
         a=("rotated", "kv-bits:k=2,v=2,rotate=hadamard", "kv-bits:k=2,v=2,rotate=hadamard"),
         b=("plain", "kv-bits:k=2,v=2", "kv-bits:k=2,v=2")),
    dict(claim="FP8 with calibrated scales beats the prompt's amax (primer 004)", bytes="kv_bytes_vs_fp16",
         a=("calibrated", None, "fp8:scale=calibrated"), b=("prompt amax", "fp8", "fp8")),
    dict(claim="2-bit KIVI on heavy hitters is near lossless at 1/8 (MiniKV, 002)",
         lossless=("minikv", "minikv:budget=32,recent=0.5,pyramid=1,group=16,value_group=16,residual=128",
                   "minikv@1/8")),
]


def figure(x):
    """A figure as the tables print it: 2.2e-4, 1.52, 0.125."""
    if x == 0:
        return "0"
    if abs(x) < 0.01:
        mantissa, exponent = f"{x:.2e}".split("e")
        return f"{mantissa}e{int(exponent)}"
    return f"{x:.3g}"


def rows_by_name(doc):
    """Every row of a report or sweep under each name it answers to (policy, spec, engine_policy)."""
    out = {}
    for r in doc["rows"]:
        for key in ("policy", "engine_policy", "spec"):
            name = r.get(key)
            if name and name not in out:
                out[name] = r
    return out


def tiny_metrics(row, doc):
    return dict(kl=row["kl_mean"], se=row["kl_stderr"], top1=row["top1_agreement"],
                ppl=row["perplexity"] / doc["reference_perplexity"],
                kv_bytes_vs_fp16=row["kv_bytes_vs_fp16"], kv_bytes_read_vs_fp16=row["kv_bytes_read_vs_fp16"])


def long_metrics(row, doc):
    return dict(kl=row["kl_mean"], se=row["kl_stderr"], top1=row["top1_agreement"], ppl=row["perplexity_ratio"],
                kv_bytes_vs_fp16=row["kv_bytes_vs_fp16"], kv_bytes_read_vs_fp16=row["kv_bytes_read_vs_fp16"])


def lookup(names, doc, metrics):
    """The measured row of a side, or None (not measured). A list of names: all candidates."""
    table = rows_by_name(doc)
    if names is None:
        return None
    if isinstance(names, list):
        found = [(n, metrics(table[n], doc)) for n in names if n in table]
        return found or None
    return (names, metrics(table[names], doc)) if names in table else None


def compare(claim, a, b):
    """(cell, verdict) for one model: A's and B's KL (and bytes), and the rule's verdict."""
    key = claim["bytes"] or "kv_bytes_vs_fp16"
    if claim.get("nearest") and b is not None:
        b = min(b, key=lambda nb: (abs(nb[1][key] - a[1][key]) if a else 0, nb[0]))
    if a is None or b is None:
        return "not measured", "not measured"
    (an, am), (bn, bm) = a, b
    cell = f"{figure(am['kl'])} vs {figure(bm['kl'])}; bytes {figure(am[key])} vs {figure(bm[key])}"
    if claim.get("nearest"):
        cell += f" (`{bn}`)"
    noise = SIGMAS * math.hypot(am["se"], bm["se"])
    lower = am["kl"] < bm["kl"]
    wins = am["kl"] < bm["kl"] - noise
    bytes_ok = claim["bytes"] is None or am[key] <= BYTES_SLACK * bm[key]
    no_fewer = claim["bytes"] is None or am[key] * BYTES_SLACK >= bm[key]
    if wins and bytes_ok:
        return cell, "held"
    if not lower and no_fewer:
        return cell, "not held"
    if lower and not wins and bytes_ok and no_fewer:
        return cell, "within noise"
    return cell, "bytes differ"


def lossless(side):
    if side is None:
        return "not measured", "not measured"
    _, m = side
    cell = (f"KL {figure(m['kl'])}, ppl ratio {m['ppl']:.3f}, top-1 {m['top1']:.3f}; "
            f"bytes {figure(m['kv_bytes_vs_fp16'])}")
    return cell, "held" if m["ppl"] <= LOSSLESS_PPL and m["top1"] >= LOSSLESS_TOP1 else "not held"


def claims_table(smollm2, tiny):
    """The claims table: per claim the comparison, both models' figures and verdicts."""
    if smollm2.get("mode") != "long":
        raise ValueError(f"the first file's mode is {smollm2.get('mode')!r}, not a `kvcheck report --long`")
    if tiny.get("format") != "kvcheck-sweep":
        raise ValueError(f"the second file's format is {tiny.get('format')!r}, not kvcheck-sweep")
    lines = ["| claim (paper) | comparison | kvcheck-tiny | SmolLM2-135M | held? |",
             "| --- | --- | --- | --- | --- |"]
    for c in CLAIMS:
        if "lossless" in c:
            label, tiny_name, smol_name = c["lossless"]
            comparison = f"{label}: ppl ratio <= {LOSSLESS_PPL}, top-1 >= {LOSSLESS_TOP1}"
            t_cell, t_verdict = lossless(lookup(tiny_name, tiny, tiny_metrics))
            s_cell, s_verdict = lossless(lookup(smol_name, smollm2, long_metrics))
        else:
            (al, at, as_), (bl, bt, bs) = c["a"], c["b"]
            what = {"kv_bytes_vs_fp16": "equal bytes held", "kv_bytes_read_vs_fp16": "equal bytes read",
                    None: "equal bit width"}[c["bytes"]]
            comparison = f"KL {al} vs {bl}, {what}"
            if c.get("at"):
                comparison += f", at {c['at']} of the context (tiny: budget 32 of 256)"
            if c.get("nearest"):
                comparison += f"; {bl} at the budget reading the nearest bytes"
            t_cell, t_verdict = compare(c, lookup(at, tiny, tiny_metrics), lookup(bt, tiny, tiny_metrics))
            s_cell, s_verdict = compare(c, lookup(as_, smollm2, long_metrics), lookup(bs, smollm2, long_metrics))
        lines.append(f"| {c['claim']} | {comparison} | {t_cell} | {s_cell} | "
                     f"tiny: {t_verdict}; SmolLM2: {s_verdict} |")
    return "\n".join(lines) + "\n"
