#!/usr/bin/env python3
"""Mutation campaign over kvcheck's CPU code (see ci/mutate.sh for the job and the "Mutation
testing" section of docs/developer/testing.md for how to read the summary).

Mutants are single-site operator edits, found by the patterns in RULES over the files of FOLDERS
(comment and string text left alone), sampled with a seed, or listed explicitly in a JSONL file
({"id", "file", "find", "replace", "why"}: the first occurrence of `find`, which must be unique).
Each mutant is written into a scratch copy of the tree, built incrementally, and run against the
gate's ctest suites with --stop-on-failure and a timeout; then the file is restored. Outcomes:
killed (a test failed), timed_out, survived, did_not_compile (the build failed: the compiler
caught it), equivalent (listed in datasets/mutation/equivalent.txt with a one-line argument).

Speed, with the verdict unchanged:
  - a targeted first pass: the gate's tests from the test files that include the mutated file's
    own header (X.cpp -> X.h; an .inc counts as the files that include it), directly or through
    the test helpers in properties/, or are named for it, or, when none does,
    every test file of the same area (kernels/cpu -> properties/kernels, ...), run with
    --stop-on-failure. A failure there is a kill by a gate test (it runs under the same ctest
    label filter); only a mutant that passes it goes on to the whole gate, so a survivor has
    still passed every gate test. The summary says which pass killed each mutant.
  - the scratch build uses Ninja when it is installed (and ccache), and a mutant rebuilds only
    what ctest runs (--build-targets; by default the CLI and the two test executables).
  - the summary is rewritten after every mutant; --resume keeps the outcomes of an earlier run
    with the same seed, count, shard, mutants file and gate, and tries only the rest, so a
    campaign can be interrupted or spread over sessions.
"""
import argparse
import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time

FOLDERS = ["kernels/cpu", "optimized", "oracles", "cli/report_", "reference/safetensors", "reference/config",
           "reference/npy", "reference/weights", "reference/tokenizer", "reference/sentencepiece_tokenizer"]
# Code the CPU gate does not run (without a GPU its tests skip), or that only times or traces.
EXCLUDE = ["optimized/cuda_backend", "optimized/nvtx_range.h", "kernels/cpu/no_cuda.cc"]

# (name, pattern, replacement): one regex match in a line is one mutant. The patterns ask for
# spaces around binary operators (the project's style), which keeps templates and pointers out.
RULES = [
    ("lt->le", r"(?<=\s)<(?=\s)", "<="),
    ("le->lt", r"(?<=\s)<=(?=\s)", "<"),
    ("gt->ge", r"(?<=\s)>(?=\s)", ">="),
    ("ge->gt", r"(?<=\s)>=(?=\s)", ">"),
    ("eq->ne", r"(?<=\s)==(?=\s)", "!="),
    ("ne->eq", r"(?<=\s)!=(?=\s)", "=="),
    ("plus->minus", r"(?<=\s)\+(?=\s)", "-"),
    ("minus->plus", r"(?<=\s)-(?=\s)", "+"),
    ("and->or", r"(?<=\s)&&(?=\s)", "||"),
    ("or->and", r"(?<=\s)\|\|(?=\s)", "&&"),
    ("const+1", r"(?<![\w.])(\d+)(?![\w.'])", lambda m: str(int(m.group(1)) + 1)),
    ("const-1", r"(?<![\w.])([1-9]\d*)(?![\w.'])", lambda m: str(int(m.group(1)) - 1)),
    ("index+1", r"\[([a-z_]\w*)\]", r"[\1 + 1]"),
    ("max->min", r"std::max\(", "std::min("),
    ("min->max", r"std::min\(", "std::max("),
    ("swap-args", r"\(([a-z_][\w.]*), ([a-z_][\w.]*)\)", r"(\2, \1)"),
    ("true->false", r"\btrue\b", "false"),
    ("false->true", r"\bfalse\b", "true"),
]
# Dropped statements: an assignment or a call that is a whole line.
DROP = re.compile(r"^(\s*)((?:[\w.\[\]]|->)+ (?:[-+*/|&]?=) .*;|(?:[\w.:\[\]]|->)+\(.*\);)\s*$")


def code_spans(line):
    """The parts of a line outside string/char literals and a trailing // comment."""
    spans, start, i, quote = [], 0, 0, None
    while i < len(line):
        c = line[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote, start = None, i + 1
        elif c in "\"'" and not (c == "'" and i > 0 and line[i - 1].isalnum()):  # 1'000 digit separators
            spans.append((start, i))
            quote = c
        elif line.startswith("//", i):
            spans.append((start, i))
            return spans
        i += 1
    if not quote:
        spans.append((start, len(line)))
    return spans


def sources(root):
    out = []
    for dirpath, _, names in os.walk(root):
        for n in names:
            rel = os.path.relpath(os.path.join(dirpath, n), root)
            if not n.endswith((".cpp", ".h", ".inc")) or not any(rel.startswith(f) for f in FOLDERS):
                continue
            if any(rel.startswith(e) for e in EXCLUDE) or rel.startswith(("build", "properties/")):
                continue
            out.append(rel)
    return sorted(out)


def mutant_id(rel, original, rule, occurrence):
    return hashlib.sha1(f"{rel}\0{original.strip()}\0{rule}\0{occurrence}".encode()).hexdigest()[:12]


def enumerate_mutants(root):
    mutants = []
    for rel in sources(root):
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            lines = f.read().split("\n")
        in_block_comment = False
        copies = {}  # identical lines of a file get distinct ids: the k-th copy hashes k in
        for no, line in enumerate(lines, 1):
            copy = copies[line.strip()] = copies.get(line.strip(), -1) + 1
            s = line.strip()
            if in_block_comment or s.startswith("/*"):
                in_block_comment = "*/" not in s
                continue
            if not s or s.startswith(("//", "#")) or "static_assert" in s:
                continue
            spans = code_spans(line)
            seen = {}
            for name, pat, rep in RULES:
                for m in re.finditer(pat, line):
                    if not any(a <= m.start() and m.end() <= b for a, b in spans):
                        continue
                    new = line[:m.start()] + m.expand(rep) if isinstance(rep, str) else line[:m.start()] + rep(m)
                    new += line[m.end():]
                    k = seen[name] = seen.get(name, -1) + 1
                    mutants.append({"id": mutant_id(rel, line, name, f"{k}.{copy}" if copy else k), "file": rel, "line": no, "rule": name,
                                    "original": line, "mutated": new})
            d = DROP.match(line)
            if d and not s.startswith(("return", "case", "else", "if", "for", "while")) and len(spans) == 1:
                mutants.append({"id": mutant_id(rel, line, "drop", f"0.{copy}" if copy else 0), "file": rel, "line": no, "rule": "drop",
                                "original": line, "mutated": d.group(1) + ";  // dropped"})
    return mutants


def listed_mutants(root, path):
    out = []
    with open(path, encoding="utf-8") as f:
        for n, raw in enumerate(f, 1):
            if not raw.strip() or raw.lstrip().startswith("#"):
                continue
            m = json.loads(raw)
            with open(os.path.join(root, m["file"]), encoding="utf-8") as g:
                lines = g.read().split("\n")
            hits = [i for i, l in enumerate(lines) if m["find"] in l]
            if len(hits) != 1:
                sys.exit(f"{path}:{n}: 'find' of {m['id']} occurs on {len(hits)} lines of {m['file']} (needs exactly 1)")
            line = lines[hits[0]]
            out.append({"id": m["id"], "file": m["file"], "line": hits[0] + 1, "rule": "listed", "why": m.get("why", ""),
                        "original": line, "mutated": line.replace(m["find"], m["replace"], 1)})
    return out


def equivalents(path):
    eq = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.strip() and not line.startswith("#"):
                    mid, _, why = line.strip().partition(" ")
                    eq[mid] = why.strip()
    return eq


def run(cmd, cwd, timeout=None):
    try:
        p = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
        return p.returncode, p.stdout
    except subprocess.TimeoutExpired as e:
        return None, (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")


def diff_of(m):
    return f"--- a/{m['file']}\n+++ b/{m['file']}\n@@ -{m['line']} +{m['line']} @@\n-{m['original']}\n+{m['mutated']}\n"


def tally(results, eq):
    """Re-reads each survivor's equivalence (datasets/mutation/equivalent.txt) and counts the
    outcomes; the kill rate is over the mutants that are neither equivalent nor unbuildable."""
    for r in results:
        if r["outcome"] in ("survived", "equivalent"):
            r["outcome"] = "equivalent" if r["id"] in eq else "survived"
            r.pop("equivalent_because", None)
            if r["id"] in eq:
                r["equivalent_because"] = eq[r["id"]]
    counts = {k: sum(r["outcome"] == k for r in results)
              for k in ("killed", "survived", "timed_out", "did_not_compile", "equivalent", "stale")}
    live = counts["killed"] + counts["survived"] + counts["timed_out"]
    return counts, round((counts["killed"] + counts["timed_out"]) / live, 4) if live else None


def failed_tests(out):
    tail = out.split("The following tests FAILED:")
    return [l.strip() for l in tail[1].strip().split("\n") if l.strip()] if len(tail) > 1 else []


# Where each mutated folder's tests live (the fallback of the targeted pass).
TEST_AREAS = {"kernels/cpu/": "properties/kernels/", "optimized/": "properties/optimized/",
              "oracles/": "properties/oracles/", "cli/report_": "properties/cli/report_",
              "reference/": "properties/reference/"}
TEST_DEF = re.compile(r"^\s*(?:TEST|TEST_F|TEST_P|RC_GTEST_PROP|RC_GTEST_FIXTURE_PROP|TYPED_TEST)\(\s*(\w+)\s*,", re.M)
INCLUDE = re.compile(r'^\s*#include "([^"]+)"', re.M)


def read(root, rel):
    with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
        return f.read()


def test_index(root):
    """{test file: (suite names, project includes)} over properties/ (gpu tests left out)."""
    index = {}
    for dirpath, _, names in os.walk(os.path.join(root, "properties")):
        for n in sorted(names):
            if n.endswith((".cpp", ".cc")) and not n.endswith("_gpu_test.cpp"):
                rel = os.path.relpath(os.path.join(dirpath, n), root)
                text = read(root, rel)
                suites = sorted(set(TEST_DEF.findall(text)))
                includes, todo = set(), INCLUDE.findall(text)
                while todo:  # through the test helpers (properties/**.h and their .cpp) too
                    h = todo.pop()
                    if h in includes:
                        continue
                    includes.add(h)
                    for helper in (h, os.path.splitext(h)[0] + ".cpp"):
                        if h.startswith("properties/") and os.path.exists(os.path.join(root, helper)):
                            todo += INCLUDE.findall(read(root, helper))
                if suites:
                    index[rel] = (suites, includes)
    return index


def module_headers(root, rel, seen=None):
    """The headers a test includes to reach the code of `rel`: its own header, or for an .inc
    the headers of the files that include it."""
    seen = seen if seen is not None else set()
    if rel in seen:
        return set()
    seen.add(rel)
    stem, ext = os.path.splitext(rel)
    if ext == ".h":
        return {rel}
    if ext == ".inc":
        out = set()
        for other in sources(root):
            if other != rel and rel in INCLUDE.findall(read(root, other)):
                out |= module_headers(root, other, seen)
        return out
    return {stem + ".h"} if os.path.exists(os.path.join(root, stem + ".h")) else set()


def targeted_regex(root, rel, index):
    """A ctest -R selecting the suites most likely to kill a mutant of `rel`, or None."""
    heads = module_headers(root, rel)
    stem = os.path.splitext(os.path.basename(rel))[0]
    # ... or are named for it (tokenizer_json_test.cpp tests tokenizer_json_text.cpp).
    named = lambda t: stem.startswith(re.sub(r"_(test|props)$", "", os.path.splitext(os.path.basename(t))[0]))
    files = [t for t, (_, inc) in index.items() if inc & heads or (named(t) and t.startswith(
        next((v for k, v in TEST_AREAS.items() if rel.startswith(k)), "properties/")))]
    if not files:
        area = next((v for k, v in TEST_AREAS.items() if rel.startswith(k)), None)
        files = [t for t in index if area and t.startswith(area)]
    suites = sorted({s for t in files for s in index[t][0]})
    return f"(^|/)({'|'.join(suites)})[.]" if suites else None


def write_json(path, obj):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)  # --merge's --out may not exist yet
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)


def merge(paths, eq, out):
    """One campaign from shard summaries: the outcomes of --only re-runs (summary-only.json,
    listed after the shards) replace the earlier outcome of the same mutant, so a survivor that a
    new test kills counts as killed, with its first outcome kept as `first_outcome`."""
    merged, shards, wall = {}, [], 0.0
    for path in paths:
        with open(path, encoding="utf-8") as f:
            s = json.load(f)
        rerun = bool(s.get("only"))
        if not rerun:
            shards.append({k: s.get(k) for k in ("seed", "count", "shard", "shards", "tried", "wall_s")})
        wall += s.get("wall_s") or 0.0
        for r in s["mutants"]:
            if rerun and r["id"] not in merged:
                continue  # a mutant outside these shards
            if rerun:
                r = {**r, "first_outcome": merged[r["id"]].get("first_outcome", merged[r["id"]]["outcome"])}
            merged[r["id"]] = r
    results = list(merged.values())
    counts, kill_rate = tally(results, eq)
    summary = {"format": "kvcheck-mutation-campaign", "version": 1, "summaries": paths, "shards": shards,
               "tried": len(results), **counts,
               "killed_after_new_tests": sum(r.get("first_outcome") == "survived" and r["outcome"] == "killed" for r in results),
               "kill_rate": kill_rate,
               "wall_s": round(wall, 1),
               "survivors": [r for r in results if r["outcome"] == "survived"],
               "equivalent_mutants": [{"id": r["id"], "file": r["file"], "line": r["line"], "because": r["equivalent_because"]}
                                      for r in results if r["outcome"] == "equivalent"]}
    write_json(out, summary)
    print(f"ci/mutate.sh: {json.dumps({k: summary[k] for k in ('tried', *counts, 'killed_after_new_tests', 'kill_rate', 'wall_s')})}\n"
          f"campaign: {out}")
    return 1 if counts["survived"] else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, default=150)
    ap.add_argument("--shard", type=int, default=0)
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--mutants", help="JSONL of listed mutants instead of sampled ones")
    ap.add_argument("--only", help="comma-separated mutant ids (reproduce; summary-only.json)")
    ap.add_argument("--list", action="store_true", help="print the selected mutants and exit")
    ap.add_argument("--resume", action="store_true",
                    help="keep the outcomes in an existing summary of the same campaign, try the rest")
    ap.add_argument("--no-targeted", dest="targeted", action="store_false",
                    help="run every mutant against the whole gate only (no targeted first pass)")
    ap.add_argument("--work", default="build-mutate")
    ap.add_argument("--out", default="mutate-out")
    ap.add_argument("--jobs", type=int, default=os.cpu_count())
    ap.add_argument("--timeout", type=int, default=1800, help="seconds for one mutant's test run")
    ap.add_argument("--test-timeout", type=int, default=120,
                    help="seconds for one test (the gate's longest takes ~10 s; a mutant that hangs one is timed out)")
    ap.add_argument("--ctest-args", default="-LE gpu|slow", help="which tests form the gate (ctest arguments)")
    ap.add_argument("--cmake-args", default="-DKVCHECK_CUDA=OFF",
                    help="configure flags of the scratch build (default: the CPU gate, no CUDA)")
    ap.add_argument("--build-targets", default="kvcheck,kvcheck_unit_tests,kvcheck_property_tests",
                    help="comma-separated targets a mutant rebuilds ('' for all)")
    ap.add_argument("--merge", nargs="+", metavar="SUMMARY",
                    help="merge shard summaries (then --only re-runs) into OUT/campaign.json; builds nothing")
    a = ap.parse_args()
    root = os.getcwd()
    if a.merge:
        return merge(a.merge, equivalents(os.path.join(root, "datasets/mutation/equivalent.txt")),
                     os.path.join(a.out, "campaign.json"))
    pool = listed_mutants(root, a.mutants) if a.mutants else enumerate_mutants(root)
    if a.only:
        want = set(a.only.split(","))
        chosen = [m for m in pool if m["id"] in want]
        if len(chosen) != len(want):
            sys.exit(f"ci/mutate.sh: no candidate mutant with id {', '.join(sorted(want - {m['id'] for m in chosen}))}")
    elif a.mutants:
        chosen = pool
    else:
        chosen = random.Random(a.seed).sample(pool, min(a.count, len(pool)))
    if not a.only:
        chosen = chosen[a.shard::a.shards]
    if a.list:
        for m in chosen:
            print(f"{m['id']}  {m['file']}:{m['line']}  {m['rule']}\n    - {m['original'].strip()}\n    + {m['mutated'].strip()}")
        print(f"{len(chosen)} of {len(pool)} candidate mutants")
        return 0
    eq = equivalents(os.path.join(root, "datasets/mutation/equivalent.txt"))
    index = test_index(root)
    targeted = a.targeted and "-R" not in a.ctest_args.split()

    # The scratch copy: the tracked and untracked-not-ignored files, built once; a mutant then
    # rebuilds what depends on its file. Same layout as the tree (build/ inside), so ccache hits.
    src = os.path.abspath(os.path.join(a.work, "src"))
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=root,
                           stdout=subprocess.PIPE, check=True).stdout.decode().split("\0")
    for rel in filter(None, files):
        if os.path.isfile(os.path.join(root, rel)):
            dst = os.path.join(src, rel)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            if not os.path.exists(dst) or open(dst, "rb").read() != open(os.path.join(root, rel), "rb").read():
                # A fresh mtime: a file that changed since the scratch build must look newer than its
                # objects, whatever its mtime in the tree (copy2 kept it, and a reused scratch tree
                # then linked stale objects).
                shutil.copy(os.path.join(root, rel), dst)
    build = os.path.join(src, "build")
    cfg = ["cmake", "-S", src, "-B", build, "-DCMAKE_BUILD_TYPE=Release", *a.cmake_args.split()]
    # Ninja rebuilds a one-file change with less overhead; an existing build dir keeps its generator.
    if shutil.which("ninja") and not os.path.exists(os.path.join(build, "CMakeCache.txt")):
        cfg += ["-G", "Ninja"]
    if shutil.which("ccache"):
        cfg += ["-DCMAKE_CXX_COMPILER_LAUNCHER=ccache", "-DCMAKE_CUDA_COMPILER_LAUNCHER=ccache"]
    build_cmd = ["cmake", "--build", build, "-j", str(a.jobs)]
    if a.build_targets:
        build_cmd += ["--target", *a.build_targets.split(",")]
    t0 = time.time()
    for cmd in (cfg, build_cmd):
        rc, out = run(cmd, src)
        if rc != 0:
            sys.exit(f"ci/mutate.sh: the unmutated scratch tree does not build:\n{out[-4000:]}")
    ctest = ["ctest", "--test-dir", build, "--stop-on-failure", "--timeout", str(a.test_timeout), "-j", str(a.jobs)] + a.ctest_args.split()
    print(f"ci/mutate.sh: scratch tree built in {time.time() - t0:.0f} s; {len(chosen)} mutants"
          f"{' (targeted first pass on)' if targeted else ''}", flush=True)

    os.makedirs(a.out, exist_ok=True)
    name = os.path.join(a.out, "summary-only.json" if a.only else f"summary-shard{a.shard}.json")
    campaign = {"format": "kvcheck-mutation-summary", "version": 2, "seed": a.seed, "count": a.count,
                "shard": a.shard, "shards": a.shards, "mutants_file": a.mutants, "only": a.only,
                "gate": a.ctest_args}
    ctest_line = " ".join(ctest[:1] + ctest[3:])  # without the machine's build path
    results, wall_before = [], 0.0
    if a.resume and not a.only and os.path.exists(name):
        with open(name, encoding="utf-8") as f:
            old = json.load(f)
        old.setdefault("gate", re.sub(r"^.* -j \d+ ", "", old.get("ctest", "")))  # summaries before "gate"
        if any(old.get(k) != v for k, v in campaign.items() if k != "version"):
            sys.exit(f"ci/mutate.sh: {name} is another campaign's summary (seed, count, shard, mutants or gate differ)")
        want = {m["id"] for m in chosen}
        results = [r for r in old["mutants"] if r["id"] in want and r["outcome"] != "stale"]
        wall_before = old.get("wall_s", 0.0)
        print(f"ci/mutate.sh: resuming {name}: {len(results)} of {len(chosen)} mutants already tried", flush=True)
    done = {r["id"] for r in results}

    def summary():
        counts, kill_rate = tally(results, eq)  # an argument added to equivalent.txt counts at once
        return {**campaign, "ctest": ctest_line, "selected": len(chosen), "tried": len(results), **counts,
                "killed_by_targeted_pass": sum(r.get("killed_by") == "targeted" for r in results),
                "kill_rate": kill_rate,
                "wall_s": round(wall_before + time.time() - t0, 1),
                "survivors": [r for r in results if r["outcome"] == "survived"], "mutants": results}

    def ctest_pass(args):
        begin = time.time()
        rc, out = run(ctest + args, src, timeout=a.timeout)
        failed = failed_tests(out) if rc else []
        timed = rc is None or (failed and all("Timeout" in t for t in failed))
        return rc, failed, timed, round(time.time() - begin, 1)

    todo = [m for m in chosen if m["id"] not in done]
    for m in todo:
        path = os.path.join(src, m["file"])
        with open(path, encoding="utf-8") as f:
            text = f.read()
        lines = text.split("\n")
        r = {k: m[k] for k in ("id", "file", "line", "rule")}
        r["diff"] = diff_of(m)
        r["reproduce"] = (f"ci/mutate.sh --only {m['id']}" +
                          (f" --mutants {a.mutants}" if a.mutants else f" --seed {a.seed} --count {a.count}") +
                          (f" --ctest-args '{a.ctest_args}'" if a.ctest_args != ap.get_default("ctest_args") else ""))
        if m.get("why"):
            r["why"] = m["why"]
        start = time.time()
        try:
            if lines[m["line"] - 1] != m["original"]:
                r["outcome"] = "stale"
            else:
                lines[m["line"] - 1] = m["mutated"]
                with open(path, "w", encoding="utf-8") as f:
                    f.write("\n".join(lines))
                rc, out = run(build_cmd, src)
                r["build_s"] = round(time.time() - start, 1)
                if rc != 0:
                    r["outcome"] = "did_not_compile"
                else:
                    rc, failed, timed = 0, [], False
                    regex = targeted_regex(root, m["file"], index) if targeted else None
                    if regex:
                        rc, failed, timed, r["targeted_s"] = ctest_pass(["-R", regex])
                        r["killed_by"] = "targeted"
                    if rc == 0:
                        rc, failed, timed, r["gate_s"] = ctest_pass([])
                        r["killed_by"] = "gate"
                    r["failed_tests"] = failed
                    if timed:
                        r["outcome"] = "timed_out"
                    elif rc != 0:
                        r["outcome"] = "killed"
                    else:
                        r["outcome"] = "survived"
                    if r["outcome"] != "killed":
                        r.pop("killed_by")
        finally:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        r["seconds"] = round(time.time() - start, 1)
        results.append(r)
        write_json(name, summary())
        print(f"[{len(results)}/{len(chosen)}] {r['outcome']:<15} {m['id']} {m['file']}:{m['line']} {m['rule']} "
              f"({r['seconds']} s{', ' + r['killed_by'] if r.get('killed_by') else ''}) "
              f"{' '.join(r.get('failed_tests', [])[:1])}", flush=True)
    # Put the scratch build back to the unmutated tree for the next run.
    run(build_cmd, src)

    s = summary()
    write_json(name, s)
    print(f"ci/mutate.sh: {json.dumps({k: s[k] for k in ('tried', 'killed', 'survived', 'timed_out', 'did_not_compile', 'equivalent', 'stale', 'kill_rate', 'wall_s')})}\n"
          f"summary: {name}")
    return 1 if s["survived"] else 0


if __name__ == "__main__":
    sys.exit(main())
