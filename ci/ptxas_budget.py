#!/usr/bin/env python3
"""Kernel budgets on sm_90 without a device: ptxas's resource report of every CUDA kernel and
template instance, the theoretical occupancy those numbers allow, and the SASS instruction count of
decode attention's key loop per 16 bytes of KV read, per stored format.

Inputs are the build's own objects, at no extra compile: kernels/CMakeLists.txt compiles every .cu
with -Xptxas -v through ci/ptxas-log.sh, which keeps ptxas's report beside each object as
OBJECT.ptxas; the SASS comes from `cuobjdump -sass` of the same objects (cuobjdump and nvdisasm:
the CUDA toolkit's, or the PyPI wheels that ci/install-deps.sh unpacks into .tools/cuda/bin).

    python3 ci/ptxas_budget.py --write [--build build]   regenerate docs/perf/ptxas-sm90.{json,md}
    python3 ci/ptxas_budget.py --check [--build build]   the gate (KernelBudgets.*): exit 1 on a
        spill in a hot kernel (decode attention, quantize, compaction) over its recorded
        allowance, on a kernel without a block size below, or on a committed table that differs
        from the build's (same nvcc only; the SASS part only where cuobjdump is found); exit 77
        when the build has no CUDA objects. Prints the table either way.
    python3 ci/ptxas_budget.py --self-test               the checker against made-up reports

Occupancy rules (sm_90, CUDA occupancy calculator, per multiprocessor): 65,536 registers, allocated
per warp in units of 256 (a thread's count times 32, rounded up to 256), warps granted in groups of
4; 2,048 threads (64 warps); 32 blocks; 228 KiB of shared memory, a block's rounded up to 128 bytes
plus 1 KiB the system reserves per block, the carveout at its largest. Blocks per SM is the least
of the four limits; occupancy is those blocks' warps over 64.
"""
import argparse
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
JSON_PATH = ROOT / "docs/perf/ptxas-sm90.json"
MD_PATH = ROOT / "docs/perf/ptxas-sm90.md"
OBJ_DIR = "kernels/CMakeFiles/kvcheck_kernels.dir/cuda"

# Hopper (sm_90) per-SM limits, as the module docstring states them.
REGS_PER_SM = 65536
REG_UNIT = 256
WARP_GRANULE = 4
MAX_WARPS = 64
MAX_BLOCKS = 32
SMEM_PER_SM = 228 * 1024
SMEM_UNIT = 128
SMEM_RESERVED = 1024

# Every kernel: its block size (the launch in its .cu), the dynamic shared memory cases to report
# (name, bytes), and its hot class (None: not hot). A kernel missing here fails --check: add it.
# The cub kernels are the compaction round's device scan (block size cub's own policy: 128).
KERNELS = {
    "PagedDecodeSplitKernel": (128, [("stage 32 KiB", 32 * 1024), ("stage 96 KiB (max)", 96 * 1024)],
                               "decode attention"),
    "PagedDecodeCombineKernel": (128, [], "decode attention"),
    "PagedDecodeKernel": (128, [], "decode attention"),
    "QuantParamsKernel": (256, [], "quantize"),
    "QuantCodesKernel": (256, [], "quantize"),
    "AmaxKernel": (256, [], "quantize"),
    "Fp8EncodeKernel": (256, [], "quantize"),
    "Fp8DecodeKernel": (256, [], None),
    "DequantKernel": (256, [], None),
    "DotDequantKernel": (256, [], None),
    "CompactCopyKernel": (32, [], "compaction"),
    "cub::DeviceScanKernel": (128, [], "compaction"),
    "cub::DeviceScanInitKernel": (128, [], "compaction"),
    "cub::EmptyKernel": (32, [], None),
    "LinearRowsKernel": (256, [], None),
    "WidenKernel": (256, [], None),
    "AddBiasKernel": (256, [], None),
    "RmsNormKernel": (256, [], None),
    "RopeKernel": (256, [], None),
    "SwiGluKernel": (256, [], None),
    "PrefillRowsKernel": (128, [], None),
    "PrefillColumnSumsKernel": (128, [], None),
    "AddKernel": (256, [], None),
    "GatherRowsKernel": (256, [], None),
    "SlotMaxKernel": (256, [], None),
    "ScatterPagesKernel": (256, [], None),
}

# Spills a hot kernel may have, in bytes (stores, loads), and why; more fails --check, and so does
# any spill in a hot kernel not named here.
SPILL_ALLOWANCE = {
    "PagedDecodeKernel": (16, 32, "the one-block fallback (heads the split path cannot tile in 16-byte "
                                  "vectors, or whose splits would stage over 96 KiB): its acc[kMaxGroup] "
                                  "and x[kPerLane] are indexed at run time (issue 49 item 4)"),
}

# The compiled key loops of PagedDecodeSplitKernel<G> (split_keys_page): elements per 16-byte
# vector, per format class.
KEY_CLASSES = [("fp16", 8), ("e4m3", 16), ("int8 per-token", 16), ("int4 per-token", 32), ("int2 per-token", 64)]
CLASS_FORMATS = {
    "fp16": "fp16 keys (fp16, kivi/leankv high tier)",
    "e4m3": "fp8 E4M3 keys (fp8)",
    "int8 per-token": "K8 (K8V8, K8V4)",
    "int4 per-token": "K4 (K4V4)",
    "int2 per-token": "K2 (K2V2)",
}


# ---- ptxas reports -------------------------------------------------------------------------------

ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(sm_\d+)'")
PROPS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
USED = re.compile(r"Used (\d+) registers")
SMEM = re.compile(r"(\d+) bytes smem")
BARRIERS = re.compile(r"used (\d+) barriers")


def demangle(names):
    if not names:
        return []
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True).stdout
    return out.splitlines()


def display_name(demangled):
    """`void kvcheck::(anonymous namespace)::PagedDecodeSplitKernel<16>(...)` -> PagedDecodeSplitKernel<16>;
    cub's kernels keep `cub::` and their name only (their template arguments are cub's policy)."""
    s = re.sub(r"^void ", "", demangled)
    depth = 0
    for i, ch in enumerate(s):  # cut the parameter list: the first '(' outside template brackets
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0 and not s[i:].startswith("(anonymous namespace)"):
            s = s[:i]
            break
    s = s.replace("(anonymous namespace)::", "")
    if s.startswith("cub::"):
        base = re.sub(r"<.*", "", s).split("::")[-1]
        return "cub::" + base
    s = s.replace("kvcheck::", "")
    return s.replace("unsigned short", "u16")


def base_name(name):
    return re.sub(r"<.*", "", name)


def parse_ptxas(text):
    """The entries of one OBJECT.ptxas: [(mangled, arch, fields)] in ptxas's order."""
    entries = []
    for line in text.splitlines():
        m = ENTRY.search(line)
        if m:
            entries.append([m.group(1), m.group(2), {}])
            continue
        if not entries:
            continue
        f = entries[-1][2]
        m = PROPS.search(line)
        if m:
            f["stack"], f["spill_stores"], f["spill_loads"] = (int(x) for x in m.groups())
        m = USED.search(line)
        if m:
            f["registers"] = int(m.group(1))
            f["smem"] = int(SMEM.search(line).group(1)) if SMEM.search(line) else 0
            f["barriers"] = int(BARRIERS.search(line).group(1)) if BARRIERS.search(line) else 0
    return entries


def occupancy(registers, threads, smem):
    """(blocks per SM, occupancy, limiter) on sm_90 by the rules in the docstring."""
    warps = (threads + 31) // 32
    regs_per_warp = -(-registers * 32 // REG_UNIT) * REG_UNIT
    by_regs = (REGS_PER_SM // regs_per_warp) // WARP_GRANULE * WARP_GRANULE // warps if regs_per_warp else MAX_BLOCKS
    by_threads = MAX_WARPS // warps
    block_smem = -(-smem // SMEM_UNIT) * SMEM_UNIT + SMEM_RESERVED
    by_smem = SMEM_PER_SM // block_smem
    limits = {"registers": by_regs, "threads": by_threads, "shared memory": by_smem, "blocks": MAX_BLOCKS}
    blocks = min(limits.values())
    # A tie names the hardware's own cap first: 8 blocks of 256 threads are "threads" however few
    # registers they use.
    limiter = min(limits, key=lambda k: (limits[k], ["threads", "blocks", "registers", "shared memory"].index(k)))
    return blocks, round(blocks * warps / MAX_WARPS, 4), limiter


def kernel_rows(reports):
    """reports: {source .cu name: OBJECT.ptxas text}. One row per (kernel, dynamic smem case)."""
    rows, problems = [], []
    for source in sorted(reports):
        entries = [e for e in parse_ptxas(reports[source]) if e[1] == "sm_90"]
        names = [display_name(d) for d in demangle([e[0] for e in entries])]
        seen = {}
        for name, (_, _, f) in zip(names, entries):
            seen[name] = seen.get(name, 0) + 1
            if seen[name] > 1:
                name = f"{name} #{seen[name]}"
            base = base_name(name).split(" #")[0]
            if base not in KERNELS:
                problems.append(f"{source}: kernel {name} has no block size in ci/ptxas_budget.py KERNELS")
                continue
            threads, cases, hot = KERNELS[base]
            # A kernel launched with dynamic shared memory is reported at each of its cases only.
            for case, dyn in cases or [("", 0)]:
                blocks, occ, limiter = occupancy(f["registers"], threads, f["smem"] + dyn)
                rows.append({"source": source, "kernel": name, "hot": hot or "", "registers": f["registers"],
                             "stack": f["stack"], "spill_stores": f["spill_stores"], "spill_loads": f["spill_loads"],
                             "smem_static": f["smem"], "dynamic_smem": case, "barriers": f["barriers"],
                             "threads": threads, "blocks_per_sm": blocks, "occupancy": occ, "limiter": limiter})
    return rows, problems


def spill_problems(rows):
    out = []
    for r in rows:
        if not r["hot"] or (r["spill_stores"] == 0 and r["spill_loads"] == 0):
            continue
        allow = SPILL_ALLOWANCE.get(base_name(r["kernel"]), (0, 0, ""))
        if r["spill_stores"] > allow[0] or r["spill_loads"] > allow[1]:
            out.append(f"{r['kernel']} ({r['hot']}, {r['source']}) spills {r['spill_stores']} bytes stored / "
                       f"{r['spill_loads']} loaded; allowed {allow[0]} / {allow[1]}")
    return out


# ---- SASS: decode attention's key loop ---------------------------------------------------------

SASS_INS = re.compile(r"/\*([0-9a-f]{4,})\*/\s+([^;]*?)\s*;")
BRANCH = re.compile(r"\bBRA(?:\.\w+)*\s+(?:`\(\.L_x_\d+\)\s*)?0x([0-9a-f]+)")


def opcode(ins):
    parts = ins.split()
    return parts[1] if parts[0].startswith("@") and len(parts) > 1 else parts[0]


def innermost_loops(ins):
    """ins: [(address, text)]. Loops are backward branches; an innermost one holds no other."""
    index = {a: i for i, (a, _) in enumerate(ins)}
    loops = []
    for i, (a, t) in enumerate(ins):
        m = BRANCH.search(t)
        if m and int(m.group(1), 16) <= a and int(m.group(1), 16) in index:
            loops.append((index[int(m.group(1), 16)], i))
    return [(s, e) for s, e in loops if not any(s <= s2 and e2 <= e and (s2, e2) != (s, e) for s2, e2 in loops)]


def key_loops(ins, group):
    """The compiled key loops of split_keys_page<G, C> in one PagedDecodeSplitKernel<G>'s SASS.

    How a loop is located: an innermost loop (a backward branch with none inside) that reads key
    vectors and query floats from shared memory with LDS.128 and multiplies them with FFMA. Per key
    vector of E elements the source does G * E multiply-adds (FFMA) and G * E / 4 query loads plus one
    key load (LDS.128), so a body unrolled over k vectors has FFMA = k*G*E and LDS.128 = k + FFMA/4:
    k = LDS.128 - FFMA/4 and E = FFMA/(k*G) name the class (E 8: fp16; 16: E4M3 if it scales by
    FMUL, else int8; 32: int4; 64: int2). Value loops read one 32-bit word per step and fail k >= 1.
    """
    found = {}
    for s, e in innermost_loops(ins):
        body = [t for _, t in ins[s:e + 1]]
        ops = [opcode(t) for t in body]
        ffma, lds = ops.count("FFMA"), ops.count("LDS.128")
        if ffma == 0 or ffma % 4 or lds * 4 <= ffma:
            continue
        k = lds - ffma // 4
        if ffma % (k * group):
            continue
        elements = ffma // (k * group)
        if elements == 8 and "HADD2.F32" in ops:
            cls = "fp16"
        elif elements == 16:
            cls = "e4m3" if ops.count("FMUL") >= 16 * k else "int8 per-token"
        elif elements == 32:
            cls = "int4 per-token"
        elif elements == 64:
            cls = "int2 per-token"
        else:
            continue
        if cls in found and found[cls]["unroll"] >= k:
            continue
        found[cls] = {"unroll": k, "instructions": len(body), "ffma": ffma, "lds128": lds}
    return found


def sass_tools():
    """cuobjdump with nvdisasm beside it or on PATH, or None."""
    for d in [os.environ.get("KVCHECK_CUDA_TOOLS", ""), str(ROOT / ".tools/cuda/bin"), "/usr/local/cuda/bin"]:
        if d and (pathlib.Path(d) / "cuobjdump").exists() and (pathlib.Path(d) / "nvdisasm").exists():
            return pathlib.Path(d) / "cuobjdump"
    c = shutil.which("cuobjdump")
    return pathlib.Path(c) if c and shutil.which("nvdisasm") else None


def tool_version(path):
    out = subprocess.run([str(path), "--version"], capture_output=True, text=True).stdout
    m = re.search(r"V(\d+\.\d+\.\d+)", out)
    return m.group(1) if m else "unknown"


def sass_rows(sass_text):
    rows, problems = [], []
    funcs = re.split(r"\n\s*Function : ", sass_text)[1:]
    for f in funcs:
        mangled = f.split("\n", 1)[0].strip()
        m = re.search(r"PagedDecodeSplitKernelILi(\d+)E", mangled)
        if not m:
            continue
        group = int(m.group(1))
        ins = [(int(a, 16), t.strip()) for a, t in SASS_INS.findall(f)]
        found = key_loops(ins, group)
        for cls, elements in KEY_CLASSES:
            if cls not in found:
                problems.append(f"SASS: PagedDecodeSplitKernel<{group}>: no {cls} key loop located")
                continue
            x = found[cls]
            k = x["unroll"]
            rows.append({"group": group, "class": cls, "formats": CLASS_FORMATS[cls], "unroll": k,
                         "per_16B": round(x["instructions"] / k, 2), "ffma_per_16B": x["ffma"] // k,
                         "lds128_per_16B": x["lds128"] // k,
                         "other_per_16B": round((x["instructions"] - x["ffma"] - x["lds128"]) / k, 2),
                         "per_element": round(x["instructions"] / k / elements, 2)})
    rows.sort(key=lambda r: (r["group"], [c for c, _ in KEY_CLASSES].index(r["class"])))
    return rows, problems


# ---- the document --------------------------------------------------------------------------------

def nvcc_version(build):
    cache = pathlib.Path(build) / "CMakeCache.txt"
    nvcc = "nvcc"
    if cache.exists():
        m = re.search(r"^CMAKE_CUDA_COMPILER:\w+=(.+)$", cache.read_text(), re.M)
        if m:
            nvcc = m.group(1).strip()
    try:
        return tool_version(nvcc)
    except OSError:
        return "unknown"


def collect(build):
    obj = pathlib.Path(build) / OBJ_DIR
    reports = {p.name[: -len(".o.ptxas")]: p.read_text() for p in sorted(obj.glob("*.cu.o.ptxas"))}
    if not reports:
        return None, []
    rows, problems = kernel_rows(reports)
    doc = {"format": "kvcheck-ptxas-budget", "version": 1,
           "regenerate": "python3 ci/ptxas_budget.py --write --build build",
           "toolchain": {"nvcc": nvcc_version(build), "arch": "sm_90"},
           "kernels": rows}
    tool = sass_tools()
    if tool and (obj / "paged_attention.cu.o").exists():
        env = dict(os.environ, PATH=f"{tool.parent}:{os.environ.get('PATH', '')}")
        sass = subprocess.run([str(tool), "-sass", str(obj / "paged_attention.cu.o")], capture_output=True,
                              text=True, env=env)
        if sass.returncode != 0:
            problems.append(f"cuobjdump -sass failed: {sass.stderr.strip()}")
        else:
            doc["toolchain"]["cuobjdump"] = tool_version(tool)
            doc["decode_key_loop_sass"], sass_problems = sass_rows(sass.stdout)
            problems += sass_problems
    return doc, problems


def render(doc):
    lines = ["# Kernel budgets on sm_90 (ptxas and SASS)", "",
             f"Generated by `{doc['regenerate']}` from the build's objects (nvcc "
             f"{doc['toolchain']['nvcc']}, {doc['toolchain']['arch']}); do not edit by hand: the gate's "
             "`KernelBudgets.SpillsAndCommittedTable` fails when this page or "
             "[ptxas-sm90.json](ptxas-sm90.json) differs from the build, and on a spill in a hot kernel. "
             "The rules behind the occupancy column are in `ci/ptxas_budget.py`'s docstring: 65,536 "
             "registers per SM in units of 256 per warp and warps in groups of 4, 64 warps, 32 blocks, "
             "228 KiB of shared memory (each block's rounded to 128 bytes plus 1 KiB reserved).", "",
             "| source | kernel | hot | regs | stack | spill st/ld | smem | dyn smem | threads | blocks/SM | occupancy | limited by |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in doc["kernels"]:
        lines.append(f"| {r['source']} | `{r['kernel']}` | {r['hot']} | {r['registers']} | {r['stack']} | "
                     f"{r['spill_stores']}/{r['spill_loads']} | {r['smem_static']} | {r['dynamic_smem'] or '-'} | "
                     f"{r['threads']} | {r['blocks_per_sm']} | {r['occupancy']:.0%} | {r['limiter']} |")
    lines.append("")
    if "decode_key_loop_sass" in doc:
        lines += ["## Decode attention's key loop in SASS",  "",
                  f"`cuobjdump -sass` ({doc['toolchain']['cuobjdump']}) of `paged_attention.cu.o`, "
                  "`PagedDecodeSplitKernel<G>`'s compiled key loops (`split_keys_page<G, C>`): "
                  "instructions per 16-byte key vector read from the staged codes (one iteration of the "
                  "chunk loop, divided by the compiler's unroll). Located as the innermost loops whose "
                  "LDS.128 and FFMA counts fit k key vectors of E elements: FFMA = k·G·E, "
                  "LDS.128 = k + FFMA/4 (`key_loops` in the script). `other` is what is neither an FFMA "
                  "nor an LDS.128: code extraction and conversion, address arithmetic, the loop test. "
                  "Formats on the generic loop (fp32, KIVI's per-channel keys, token groups) are not "
                  "listed; the value loops are not counted here.", "",
                  "| G | key class | stored formats | unroll | instr / 16 B | FFMA | LDS.128 | other | instr / element |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for r in doc["decode_key_loop_sass"]:
            lines.append(f"| {r['group']} | {r['class']} | {r['formats']} | {r['unroll']} | {r['per_16B']} | "
                         f"{r['ffma_per_16B']} | {r['lds128_per_16B']} | {r['other_per_16B']} | {r['per_element']} |")
        lines.append("")
    else:
        lines += ["The SASS table needs cuobjdump and nvdisasm (`ci/install-deps.sh` unpacks them).", ""]
    return "\n".join(lines)


def dumps(doc):
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"


def check(doc, problems, committed_json, committed_md):
    """Problems (each fails) and notes (printed) of a regenerated doc against the committed files."""
    problems = list(problems) + spill_problems(doc["kernels"])
    notes = []
    try:
        old = json.loads(committed_json)
    except (ValueError, TypeError):
        return problems + ["docs/perf/ptxas-sm90.json is missing or not JSON: run " + doc["regenerate"]], notes
    if old.get("toolchain", {}).get("nvcc") != doc["toolchain"]["nvcc"]:
        notes.append(f"the table was made with nvcc {old.get('toolchain', {}).get('nvcc')}, this build's is "
                     f"{doc['toolchain']['nvcc']}: its numbers are not compared")
        return problems, notes
    stale = old["kernels"] != doc["kernels"]
    if stale:
        changed = [r["kernel"] for r in doc["kernels"] if r not in old["kernels"]]
        gone = [r["kernel"] for r in old["kernels"] if r not in doc["kernels"]]
        problems.append(f"docs/perf/ptxas-sm90.json is stale (changed or new: {sorted(set(changed))}; "
                        f"gone: {sorted(set(gone))}): run {doc['regenerate']}")
    if "decode_key_loop_sass" in doc:
        if old.get("decode_key_loop_sass") != doc["decode_key_loop_sass"]:
            problems.append(f"the committed SASS key-loop counts are stale: run {doc['regenerate']}")
        elif not stale and committed_md != render(doc):
            problems.append(f"docs/perf/ptxas-sm90.md differs from its JSON: run {doc['regenerate']}")
    else:
        notes.append("cuobjdump/nvdisasm not found: the SASS counts are not compared (ci/install-deps.sh)")
        if not stale and committed_md != render(old):
            problems.append(f"docs/perf/ptxas-sm90.md differs from its JSON: run {doc['regenerate']}")
    return problems, notes


# ---- self-test ---------------------------------------------------------------------------------

def self_test():
    """The checker on made-up reports: a spill in a hot kernel, a grown allowance spill, a changed
    register count and a new kernel must each fail; occupancy and loop location on known numbers."""
    failures = []

    def expect(cond, what):
        if not cond:
            failures.append(what)

    def report(regs=96, spill=0, name="_ZN7kvcheck12_GLOBAL__N_122PagedDecodeSplitKernelILi4EEEvNS_15CudaDecodeBatchEPfS3_"):
        return (f"ptxas info    : Compiling entry function '{name}' for 'sm_90'\n"
                f"ptxas info    : Function properties for {name}\n"
                f"    0 bytes stack frame, {spill} bytes spill stores, {spill} bytes spill loads\n"
                f"ptxas info    : Used {regs} registers, used 1 barriers, 8240 bytes smem\n")

    rows, probs = kernel_rows({"paged_attention.cu": report()})
    expect(not probs and len(rows) == 2 and rows[0]["kernel"] == "PagedDecodeSplitKernel<4>", f"parse: {rows} {probs}")
    expect(rows[0]["blocks_per_sm"] == 5 and rows[0]["limiter"] == "registers", f"occupancy of 96 regs: {rows[0]}")
    expect(not spill_problems(rows), "no spill, no problem")
    rows_spill, _ = kernel_rows({"paged_attention.cu": report(spill=8)})
    expect(spill_problems(rows_spill), "a spill in the split kernel must fail")
    fallback = "_ZN7kvcheck12_GLOBAL__N_117PagedDecodeKernelENS_15CudaDecodeBatchEPf"
    ok, _ = kernel_rows({"paged_attention.cu": report(spill=16, name=fallback)})
    expect(not [p for p in spill_problems(ok) if "spills 16 bytes stored / 16" in p], "within the allowance")
    grown, _ = kernel_rows({"paged_attention.cu": report(spill=40, name=fallback)})
    expect(spill_problems(grown), "a spill over the allowance must fail")
    _, unknown = kernel_rows({"x.cu": report(name="_ZN7kvcheck9NewKernelEv")})
    expect(unknown, "a kernel without a block size must fail")
    # Occupancy on known numbers: 222 regs x 128 threads -> 7,168 per warp, 9 warps -> 8 -> 2 blocks;
    # 32 regs x 256 -> 64 warps by registers, 8 blocks by threads; 16,480 + 96 KiB smem -> 1 block.
    expect(occupancy(222, 128, 32960) == (2, 0.125, "registers"), f"222 regs: {occupancy(222, 128, 32960)}")
    expect(occupancy(32, 256, 0) == (8, 1.0, "threads"), f"32 regs: {occupancy(32, 256, 0)}")
    expect(occupancy(182, 128, 16480 + 96 * 1024)[0] == 2, f"smem: {occupancy(182, 128, 16480 + 96 * 1024)}")
    expect(occupancy(40, 128, 120 * 1024) == (1, 0.0625, "shared memory"), f"smem 120K: {occupancy(40, 128, 120 * 1024)}")
    # Staleness: the same build passes, a register more fails, on the same nvcc.
    doc = {"format": "kvcheck-ptxas-budget", "version": 1, "regenerate": "R", "toolchain": {"nvcc": "1", "arch": "sm_90"},
           "kernels": rows}
    expect(check(doc, [], dumps(doc), render(doc)) == ([], ["cuobjdump/nvdisasm not found: the SASS counts are not "
                                                             "compared (ci/install-deps.sh)"]), "an unchanged table passes")
    rows97, _ = kernel_rows({"paged_attention.cu": report(regs=97)})
    expect(check(dict(doc, kernels=rows97), [], dumps(doc), render(doc))[0], "a changed register count is stale")
    expect(check(doc, [], dumps(doc), render(doc) + "x")[0], "an edited page is stale")
    # Loop location: a made-up int4 loop at G=2 unrolled twice: 2 key loads + 2*2*32/4 query loads.
    body = ["LDS.128 R4, [R2]"] * (2 + 2 * 2 * 32 // 4) + ["FFMA R8, R4, R5, R8"] * 128 + ["LOP3.LUT R1, R2, R3, RZ"] * 20
    ins = [(0x10 * i, t) for i, t in enumerate(body)] + [(0x10 * len(body), "@P0 BRA 0x0")]
    got = key_loops(ins, 2)
    expect(list(got) == ["int4 per-token"] and got["int4 per-token"]["unroll"] == 2, f"loop location: {got}")
    for f in failures:
        print("self-test FAILED:", f)
    print("self-test:", "passed" if not failures else f"{len(failures)} failed")
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=str(ROOT / "build"))
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true")
    mode.add_argument("--check", action="store_true")
    mode.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    doc, problems = collect(a.build)
    if doc is None:
        print(f"skipped: {a.build}/{OBJ_DIR} has no ptxas reports (a build without CUDA: nvcc was not found)")
        return 77
    if a.write:
        for p in problems:
            print("problem:", p)
        JSON_PATH.write_text(dumps(doc))
        MD_PATH.write_text(render(doc))
        print(f"wrote {JSON_PATH.relative_to(ROOT)} and {MD_PATH.relative_to(ROOT)}")
        return 1 if problems else 0
    committed_json = JSON_PATH.read_text() if JSON_PATH.exists() else None
    committed_md = MD_PATH.read_text() if MD_PATH.exists() else None
    problems, notes = check(doc, problems, committed_json, committed_md)
    print(render(doc))
    for n in notes:
        print("note:", n)
    for p in problems:
        print("FAILED:", p)
    print("kernel budgets:", "ok" if not problems else f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
