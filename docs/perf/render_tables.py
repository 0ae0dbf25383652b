#!/usr/bin/env python3
"""Regenerates the tables of the dated pages in docs/perf/ from the benchmark JSON beside them.

A generated table sits between two comments that name its kind and its JSON file:

    <!-- table: bench-engine 2026-11-28-smollm2-bench-engine.json -->
    | run | ... |
    <!-- /table -->

Kinds: `bench-engine` (the JSON of `kvcheck bench --engine --json`), `llamacpp-crosscheck` (the
JSON of properties/crosscheck/llamacpp_gguf.py --json) and `claims` (two files: the report.json of
`kvcheck report --long` and kvcheck-tiny's committed sweep; docs/perf/claims.py). A marker may name
several files, separated by spaces, each relative to the page. The pages are docs/perf/*.md and the
repository's README.md. With --check nothing is written: the exit
status is 1, naming the page and table, when a committed table differs from its JSON (the unit test
PerfPages.TablesMatchTheirJson runs that). Without it, every table is rewritten in place.

    python3 docs/perf/render_tables.py [--check] [PAGE.md ...]
    python3 docs/perf/render_tables.py --self-test   (a changed figure in any JSON is caught)
"""
import argparse
import json
import pathlib
import re
import shutil
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from claims import claims_table  # noqa: E402

ROOT = HERE.parent.parent
BLOCK = re.compile(r"(<!-- table: (\S+) ([^\n]+?) -->\n)(.*?)(<!-- /table -->)", re.S)
# Files outside docs/perf/ that a table reads or sits in (paths from the repository root); the
# self-test copies them with docs/perf/ into a scratch tree.
OUTSIDE = ["README.md", "datasets/baselines/sweep-kvcheck-tiny.json"]


def sci(x, digits):
    """Scientific notation without the exponent's padding: 7.82e-4, not 7.82e-04."""
    mantissa, exponent = f"{x:.{digits}e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def short(x):
    """A figure as the pages print it: 2.2e-4, 1.52, 35.1."""
    if x == 0:
        return "0"
    return sci(x, 1) if abs(x) < 0.01 else f"{x:.3g}"


def signed_short(x):
    return ("+" if x > 0 else "") + short(x)


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def bench_engine(doc):
    """One row per run: throughput, the decode step's parts, the roofline."""
    if doc.get("format") != "kvcheck-bench-engine":
        raise ValueError(f"format is {doc.get('format')!r}, not kvcheck-bench-engine")
    rows = []
    for run in doc["runs"]:
        part = run["per_token_us"]
        roof = run["roofline"]
        rows.append([
            run["name"],
            f"{run['pp_tokens_per_s']['mean']:.1f}",
            f"{run['tg_tokens_per_s']['mean']:.1f}",
            " / ".join(f"{part[k] / 1000:.1f}" for k in ("projections", "attention", "kv_write")),
            f"{roof['predicted_step_s'] * 1000:.1f} ({roof['bound'].removesuffix('-bound')})",
            f"{roof['achieved_fraction']:.2f}",
        ])
    return table(["run", "pp tokens/s", "tg tokens/s", "per token: projections / attention / KV write, ms",
                  "roofline step ms (bound)", "x roof"], rows)


CROSSCHECK_ROWS = [
    ("kvcheck_vs_llamacpp_f32", "kvcheck vs llama.cpp on the dequantized F32 copy"),
    ("kvcheck_vs_llamacpp_q4_1", "kvcheck vs llama.cpp on the Q4_1 file itself"),
    ("llamacpp_q4_1_vs_llamacpp_f32", "llama.cpp Q4_1 file vs llama.cpp F32 copy"),
]


def llamacpp_crosscheck(doc):
    """One row per comparison: logits NMSE, argmax agreement, both perplexities."""
    rows = []
    for key, label in CROSSCHECK_ROWS:
        c = doc["comparisons"][key]
        rows.append([
            label,
            sci(c["nmse"], 2),
            sci(c["nmse_worst_window"], 2),
            short(c["max_abs_diff"]),
            f"{100 * c['argmax_agreement']:.3f}%",
            f"{c['ppl_' + c['a']]:.4f}",
            f"{c['ppl_' + c['b']]:.4f}",
            signed_short(c["rel_ppl_diff"]),
        ])
    return table(["comparison", "logits NMSE", "worst window", "max abs diff", "argmax agreement", "ppl a",
                  "ppl b", "ppl a / b - 1"], rows)


KINDS = {"bench-engine": bench_engine, "llamacpp-crosscheck": llamacpp_crosscheck, "claims": claims_table}


def default_pages(root):
    return sorted((root / "docs" / "perf").glob("*.md")) + [root / "README.md"]


def render(page):
    text = page.read_text()

    def one(match):
        kind, source = match.group(2), match.group(3)
        if kind not in KINDS:
            raise ValueError(f"{page.name}: table kind {kind!r} (known: {', '.join(KINDS)})")
        docs = [json.loads((page.parent / s).read_text()) for s in source.split()]
        try:
            body = KINDS[kind](*docs)
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{page.name}: table {kind} from {source}: {e!r}") from e
        return match.group(1) + body + match.group(5)

    return text, BLOCK.sub(one, text)


def stale(page):
    """Whether a generated table of `page` differs from its JSON."""
    old, new = render(page)
    return old != new


def mutate(doc):
    """A 1% change in a figure every table of its kind prints."""
    if "runs" in doc:
        doc["runs"][0]["tg_tokens_per_s"]["mean"] *= 1.01
    elif "comparisons" in doc:
        doc["comparisons"]["kvcheck_vs_llamacpp_f32"]["nmse"] *= 1.01
    else:  # a report or a sweep: every row's mean KL
        for row in doc["rows"]:
            row["kl_mean"] *= 1.01


def self_test():
    """--check on a copy of the committed pages passes, and fails once a figure in a JSON moves."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        (tmp / "docs" / "perf").mkdir(parents=True)
        for f in HERE.iterdir():
            if f.suffix in (".md", ".json"):
                shutil.copy(f, tmp / "docs" / "perf" / f.name)
        for rel in OUTSIDE:
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / rel, tmp / rel)
        pages = default_pages(tmp)
        if any(stale(p) for p in pages):
            print("render_tables.py: self-test: the committed tables are stale")
            return 1
        sources = {(p.parent / s).resolve() for p in pages for m in BLOCK.finditer(p.read_text())
                   for s in m.group(3).split()}
        for source in sorted(sources):
            original = source.read_text()
            doc = json.loads(original)
            mutate(doc)
            source.write_text(json.dumps(doc))
            readers = [p for p in pages if any(source == (p.parent / s).resolve()
                                               for m in BLOCK.finditer(p.read_text()) for s in m.group(3).split())]
            missed = [p for p in readers if not stale(p)]
            if missed:
                print(f"render_tables.py: self-test: a 1% change in {source.relative_to(tmp.resolve())} went "
                      f"unnoticed in {', '.join(str(p.relative_to(tmp)) for p in missed)}")
                return 1
            source.write_text(original)
        names = ", ".join(str(s.relative_to(tmp.resolve())) for s in sorted(sources))
    print(f"render_tables.py: self-test passed ({len(sources)} JSON files: {names})")
    return 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        try:
            return self_test()
        except (OSError, ValueError) as e:
            print(f"render_tables.py: self-test: {e}", file=sys.stderr)
            return 2
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a table is stale")
    parser.add_argument("pages", nargs="*", type=pathlib.Path)
    args = parser.parse_args()
    pages = args.pages or default_pages(ROOT)
    stale = 0
    tables = 0
    for page in pages:
        try:
            old, new = render(page)
        except (OSError, ValueError) as e:
            print(f"render_tables.py: {e}", file=sys.stderr)
            return 2
        tables += len(BLOCK.findall(old))
        if old == new:
            continue
        if args.check:
            stale += 1
            print(f"render_tables.py: {page}: a table differs from its JSON; run python3 docs/perf/render_tables.py")
        else:
            page.write_text(new)
            print(f"render_tables.py: rewrote {page}")
    if args.check and not stale:
        print(f"render_tables.py: {tables} generated tables match their JSON")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
