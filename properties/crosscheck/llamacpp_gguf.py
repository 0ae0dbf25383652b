#!/usr/bin/env python3
"""Hold kvcheck's reference transformer to llama.cpp on a real GGUF model.

What it checks
  Teacher-forced logits over held-out text (datasets/eval/heldout.jsonl, Brown corpus documents)
  through the same GGUF file, SmolLM2-135M-Instruct.Q4_1.gguf, in kvcheck's double-precision
  reference (`kvcheck generate --model FILE.gguf --ids ... --max-new-tokens 0 --dump-logits`) and
  in llama.cpp (llama-cpp-python, CPU, F32 KV cache, no flash attention, every position's logits).
  Reported per configuration: logits NMSE (overall and worst window), max |diff|, argmax agreement,
  perplexity on both sides and their relative difference, and the time each side took.

  Two llama.cpp configurations:
    "same GGUF (Q4_1 kernels)"  the file as it is. llama.cpp's CPU matmul for Q4_1/Q8_0 weights
                                quantizes the activations to 8 bits (Q8_1/Q8_0) before each dot
                                product, so this is NOT the same arithmetic as kvcheck's (exactly
                                dequantized weights, double accumulation). Informational.
    "dequantized F32 GGUF"      a copy written here with gguf-py: every tensor dequantized with
                                gguf.quants.dequantize (exact: the float32 values kvcheck uses) and
                                stored as F32 in the original order, every metadata key/value copied
                                (tokenizer arrays, chat template) except general.file_type, set to
                                ALL_F32. llama.cpp then computes in float32 without activation
                                quantization. THIS is the fair comparison, and the gate.
  A third line compares the two llama.cpp configurations with each other (sanity: the size of
  llama.cpp's own activation-quantization error). --numpy-reference adds a referee: an independent
  float64 numpy forward (Llama architecture, written from llama.cpp's conventions) on window 0,
  held to both llama.cpp configurations and to kvcheck.

  Definitions. NMSE = sum((a-b)^2) / sum(b^2) over all positions and the whole vocabulary, with
  b = llama.cpp's logits and a = kvcheck's (for the llama.cpp-vs-llama.cpp line, a = Q4_1 run,
  b = F32 run). Perplexity = exp(mean NLL of the next token) over positions 0..T-2 of every
  window, from each side's own logits, log-softmax in float64. Argmax agreement: the share of all
  N*T positions whose top-1 token is the same on both sides.
  Acceptance bar (gate: kvcheck vs the dequantized F32 GGUF): NMSE < 1e-6, argmax agreement
  >= 99.9%, |ppl_kvcheck / ppl_llamacpp - 1| < 0.1%; and greedy chat ("What is the capital of
  France?" through `generate --chat`, 16 tokens or EOS): kvcheck's reference and optimized engine
  give llama.cpp's tokens on the F32 copy (the Q4_1 file's continuation is reported too).

  Text to windows: the documents, in file order, are joined with "\\n\\n" into one string, tokenized
  once by llama.cpp's tokenizer (add_bos=False, special=False; SmolLM2's GGUF has
  tokenizer.ggml.add_bos_token = false, so neither side adds a BOS); window w is tokens
  [w*T, (w+1)*T) of that stream (consecutive, non-overlapping, each evaluated from position 0 in
  a fresh context). With --check-tokenizer (default when kvcheck runs) kvcheck's own GGUF
  tokenizer is also asked to tokenize the first 1500 characters of the first document and the
  ids are compared with llama.cpp's (reported, not gated).

How to run (from the repository root; needs the model from ci/install-deps.sh, and
  `python3 -m pip install llama-cpp-python==0.3.36 gguf==0.19.0 numpy`):
    python3 properties/crosscheck/llamacpp_gguf.py [--kvcheck build/bin/kvcheck] \
        [--windows 4] [--tokens 512] [--threads 2] [--json out.json]
    python3 properties/crosscheck/llamacpp_gguf.py --llamacpp-only   # llama.cpp sides only
  Exit status: 0 the F32 comparison meets the bar (or --llamacpp-only finished); 1 it misses the
  bar, or kvcheck failed to run; 2 a prerequisite is missing (the model file: run
  ci/install-deps.sh; llama_cpp / gguf not importable: pip install as above).

Versions measured with: llama-cpp-python 0.3.36 (ggml 0.25.3, CPU: AVX2/AVX512, llamafile sgemm,
  OpenMP), gguf 0.19.0, numpy 2.4.6, Python 3.11.7.
Runtime on 2 cores (defaults, 4 x 512 tokens; measured while a C++ build shared the cores, so an
  upper bound): tokenizing 1 s; writing the F32 GGUF 6-10 s (515 MiB in a temporary directory,
  removed afterwards); llama.cpp 20-50 s per configuration; kvcheck's reference (double,
  single-threaded) 25-30 s per 512-token window including ~4 s of model loading, ~2 min in all;
  metrics ~10 s; --numpy-reference +20-40 s. About 3.5 minutes end to end; peak RSS ~2 GB (more with
  --numpy-reference, which holds the weights in float64).
  OMP_WAIT_POLICY defaults to PASSIVE here (llama.cpp's OpenMP threads spinning on a shared
  machine made it 2x slower; the arithmetic is unchanged).

Measured (SmolLM2-135M-Instruct.Q4_1.gguf, 4 x 512 tokens):
  kvcheck vs llama.cpp F32 GGUF  NMSE 2.7e-12 (worst window 3.6e-12), max|diff| 2.2e-4, argmax 100%,
                                 ppl 35.13263 vs 35.13264 (rel -5.9e-8): PASS
  kvcheck vs llama.cpp Q4_1      NMSE 7.8e-4, max|diff| 1.52, argmax 97.12%, ppl 35.1326 vs 35.1614
  llama.cpp Q4_1 vs F32          NMSE 7.8e-4, argmax 97.12%, ppl 35.1614 vs 35.1326 (+0.082%)
  kvcheck vs numpy f64 (win 0)   NMSE 6.3e-16, max|diff| 1.9e-6 (float32 output rounding)
"""
import argparse
import ctypes
import json
import math
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
DEFAULT_MODEL = REPO / "datasets/models/fetched/SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_HELDOUT = REPO / "datasets/eval/heldout.jsonl"
DEFAULT_KVCHECK = REPO / "build/bin/kvcheck"
JOIN = "\n\n"
BAR = {"nmse_lt": 1e-6, "argmax_agreement_ge": 0.999, "rel_ppl_diff_lt": 1e-3}
GATE = "kvcheck_vs_llamacpp_f32"


def die(code, msg):
    print(f"llamacpp_gguf: {msg}", file=sys.stderr)
    sys.exit(code)


# ---------------------------------------------------------------------------------------------
# Text and tokens


def load_documents(path):
    docs = []
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if line.strip():
                rec = json.loads(line)
                if "text" not in rec:
                    die(2, f"{path}:{line_no}: no \"text\" field")
                docs.append((rec.get("id", f"line{line_no}"), rec["text"]))
    return docs


def make_windows(llama_cpp, model_path, docs, n_windows, T):
    with LogCapture(llama_cpp):  # keeps the vocab-only load quiet
        vocab = llama_cpp.Llama(model_path=str(model_path), vocab_only=True, verbose=False)
    stream = vocab.tokenize(JOIN.join(text for _, text in docs).encode("utf-8"), add_bos=False, special=False)
    need = n_windows * T
    if len(stream) < need:
        die(2, f"the held-out text is {len(stream)} tokens, fewer than {n_windows} x {T} = {need}")
    windows = [list(stream[w * T : (w + 1) * T]) for w in range(n_windows)]
    return vocab, windows, len(stream)


# ---------------------------------------------------------------------------------------------
# The F32 copy of the GGUF


def write_f32_gguf(gguf, src, dst):
    """Every tensor dequantized to float32 (gguf.quants.dequantize: exact), same order, same
    metadata (general.file_type set to ALL_F32)."""
    reader = gguf.GGUFReader(str(src))
    arch = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(str(dst), arch)  # writes general.architecture itself
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        vtype = field.types[0]
        sub = field.types[1] if vtype == gguf.GGUFValueType.ARRAY else None
        value = field.contents()
        if key == "general.file_type":
            value = int(gguf.LlamaFileType.ALL_F32)
        if key == "general.alignment":
            writer.data_alignment = int(value)
        writer.add_key_value(key, value, vtype, sub_type=sub)
    for t in reader.tensors:
        # t.data is row-major with the reversed ggml shape; quantized: [.., bytes per row] uint8.
        arr = np.ascontiguousarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
        expect = tuple(int(n) for n in reversed(t.shape))
        if arr.shape != expect:
            arr = arr.reshape(expect)
        writer.add_tensor(t.name, arr)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return len(reader.tensors)


# ---------------------------------------------------------------------------------------------
# llama.cpp side


class LogCapture:
    """Routes llama.cpp's log into a list for the duration (to read the KV cache's types)."""

    def __init__(self, llama_cpp):
        self.llama_cpp = llama_cpp
        self.lines = []

        @llama_cpp.llama_log_callback
        def cb(level, text, user_data):
            self.lines.append(text.decode("utf-8", "replace"))

        self.cb = cb  # keep the ctypes thunk alive

    def __enter__(self):
        self.llama_cpp.llama_log_set(self.cb, ctypes.c_void_p(0))
        return self

    def __exit__(self, *exc):
        from llama_cpp import _logger

        self.llama_cpp.llama_log_set(_logger.llama_log_callback, ctypes.c_void_p(0))
        return False

    def text(self):
        return "".join(self.lines)


def run_llamacpp(llama_cpp, model_path, windows, T, threads):
    t0 = time.perf_counter()
    with LogCapture(llama_cpp) as log:
        llm = llama_cpp.Llama(
            model_path=str(model_path),
            n_ctx=T,
            n_batch=T,
            n_ubatch=T,
            logits_all=True,
            n_threads=threads,
            n_threads_batch=threads,
            type_k=0,  # GGML_TYPE_F32
            type_v=0,
            flash_attn=False,
            verbose=False,
        )
    load_s = time.perf_counter() - t0
    m = re.search(r"K \((\w+)\):.*?V \((\w+)\):", log.text())
    kv = (m.group(1), m.group(2)) if m else None
    fa = re.search(r"flash_attn\s*=\s*(\w+)", log.text())
    ftype = re.search(r"file type\s*=\s*(.+)", log.text())
    if kv != ("f32", "f32"):
        die(1, f"{model_path}: llama.cpp's KV cache is {kv}, not (f32, f32) (log parsed for 'K (..): .. V (..):')")
    if not fa or fa.group(1) != "disabled":
        die(1, f"{model_path}: llama.cpp's flash_attn is {fa.group(1) if fa else 'not reported'}, not disabled")
    out = np.empty((len(windows), T, llm.n_vocab()), dtype=np.float32)
    t0 = time.perf_counter()
    for w, ids in enumerate(windows):
        llm.reset()
        llm.eval(ids)
        scores = llm.scores
        if scores.shape[0] < T or scores.shape[1] != out.shape[2]:
            die(1, f"llama.cpp scores have shape {scores.shape}, expected at least [{T}, {out.shape[2]}]")
        out[w] = scores[:T]
    eval_s = time.perf_counter() - t0
    info = {
        "model": str(model_path),
        "file_type": ftype.group(1).strip() if ftype else None,
        "kv_cache": {"k": kv[0], "v": kv[1]},
        "flash_attn": fa.group(1),
        "n_threads": threads,
        "load_s": round(load_s, 3),
        "eval_s": round(eval_s, 3),
    }
    del llm
    return out, info


CHAT = "What is the capital of France?"


def greedy_llamacpp(llama_cpp, model_path, prompt_ids, n, threads):
    """llama.cpp's greedy continuation (argmax of each step's logits, EOS kept and ends it)."""
    llm = llama_cpp.Llama(model_path=str(model_path), n_ctx=512, n_batch=512, logits_all=True, n_threads=threads,
                          n_threads_batch=threads, type_k=0, type_v=0, flash_attn=False, verbose=False)
    llm.reset()
    llm.eval(prompt_ids)
    out = []
    for _ in range(n):
        tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        out.append(tok)
        if tok == llm.token_eos():
            break
        llm.eval([tok])
    del llm
    return out


def greedy_kvcheck(binary, model_path, engine, n, timeout=None):
    """kvcheck generate --chat: (prompt ids, generated ids, generated text)."""
    r = subprocess.run([str(binary), "generate", "--model", str(model_path), "--chat", CHAT, "--max-new-tokens", str(n),
                        "--engine", engine], capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"kvcheck generate --chat exited {r.returncode}: {r.stderr.strip()[-500:]}")
    field = {}
    for line in r.stdout.splitlines():
        key, _, value = line.partition(": ")
        field[key] = value
    ids = lambda k: [int(x) for x in field.get(k, "").split()]
    return ids("prompt ids"), ids("generated ids"), field.get("generated text", "")


# ---------------------------------------------------------------------------------------------
# A third, independent forward (optional): numpy float64, Llama architecture only


def numpy_forward(gguf, model_path, ids):
    """Float64 logits [len(ids), vocab] from the GGUF's dequantized weights, written from the
    llama.cpp conventions: Q/K rows as stored (permuted by convert_hf_to_gguf) with RoPE on adjacent
    pairs (2i, 2i+1), RMSNorm eps as the file's float32, GQA by kv head = head // (heads / kv heads),
    tied output when there is no output.weight. A referee when kvcheck and llama.cpp disagree."""
    r = gguf.GGUFReader(str(model_path))
    arch = r.fields["general.architecture"].contents()
    if arch != "llama":
        raise RuntimeError(f"the numpy forward covers general.architecture llama, not {arch}")
    meta = lambda k: r.fields[f"{arch}.{k}"].contents()  # noqa: E731
    n_layer, n_head, n_kv = int(meta("block_count")), int(meta("attention.head_count")), int(meta("attention.head_count_kv"))
    eps = float(meta("attention.layer_norm_rms_epsilon"))
    base = float(meta("rope.freq_base")) if f"{arch}.rope.freq_base" in r.fields else 10000.0
    W = {t.name: np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float64).reshape(
         tuple(int(n) for n in reversed(t.shape))) for t in r.tensors}
    if any(n.endswith(".bias") for n in W) or "rope_freqs.weight" in W:
        raise RuntimeError("the numpy forward covers plain Llama tensors (no biases, no rope_freqs)")
    T, D = len(ids), W["blk.0.attn_q.weight"].shape[0] // n_head
    ang = np.arange(T)[:, None] * (base ** (-np.arange(0, D, 2) / D))[None, :]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]

    def rms(x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w

    def rope(x):
        a, b = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2], out[..., 1::2] = a * cos - b * sin, a * sin + b * cos
        return out

    mask = np.triu(np.full((T, T), -np.inf), 1)
    x = W["token_embd.weight"][np.asarray(ids)]
    for layer in range(n_layer):
        p = f"blk.{layer}."
        h = rms(x, W[p + "attn_norm.weight"])
        q = rope((h @ W[p + "attn_q.weight"].T).reshape(T, n_head, D))
        k = rope((h @ W[p + "attn_k.weight"].T).reshape(T, n_kv, D))
        v = (h @ W[p + "attn_v.weight"].T).reshape(T, n_kv, D)
        o = np.empty((T, n_head, D))
        for hh in range(n_head):
            kv = hh // (n_head // n_kv)
            sc = q[:, hh] @ k[:, kv].T / math.sqrt(D) + mask
            sc = np.exp(sc - sc.max(-1, keepdims=True))
            o[:, hh] = (sc / sc.sum(-1, keepdims=True)) @ v[:, kv]
        x = x + o.reshape(T, n_head * D) @ W[p + "attn_output.weight"].T
        h = rms(x, W[p + "ffn_norm.weight"])
        g = h @ W[p + "ffn_gate.weight"].T
        x = x + ((g / (1.0 + np.exp(-g))) * (h @ W[p + "ffn_up.weight"].T)) @ W[p + "ffn_down.weight"].T
    return rms(x, W["output_norm.weight"]) @ W.get("output.weight", W["token_embd.weight"]).T


# ---------------------------------------------------------------------------------------------
# kvcheck side


def run_kvcheck(binary, model_path, ids, out_npy, timeout=None):
    """kvcheck's reference logits for every position of `ids`: float32 [len(ids), vocab]."""
    cmd = [str(binary), "generate", "--model", str(model_path), "--ids", ",".join(map(str, ids)),
           "--max-new-tokens", "0", "--dump-logits", str(out_npy)]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    secs = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} ... exited {r.returncode}:\n{r.stderr.strip()[-2000:]}")
    logits = np.load(out_npy)
    if logits.dtype != np.float32 or logits.ndim != 2 or logits.shape[0] != len(ids):
        raise RuntimeError(f"{out_npy}: {logits.dtype} {logits.shape}, expected float32 [{len(ids)}, vocab]")
    m = re.search(r"^prompt ids: (.*)$", r.stdout, re.M)
    if m and [int(x) for x in m.group(1).split()] != list(ids):
        raise RuntimeError("kvcheck's 'prompt ids' differ from the ids given (a BOS added?)")
    return logits, secs


def kvcheck_tokenize(binary, model_path, text, timeout=None):
    cmd = [str(binary), "generate", "--model", str(model_path), "--prompt", text, "--no-bos", "--max-new-tokens", "0"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"kvcheck generate --prompt exited {r.returncode}: {r.stderr.strip()[-500:]}")
    m = re.search(r"^prompt ids: (.*)$", r.stdout, re.M)
    if not m:
        raise RuntimeError("kvcheck generate --prompt printed no 'prompt ids:' line")
    return [int(x) for x in m.group(1).split()]


# ---------------------------------------------------------------------------------------------
# Metrics


METRICS = {"s": 0.0, "depth": 0}  # time spent in nll_sum / compare (outermost calls)


def timed(f):
    def g(*a, **k):
        t = time.perf_counter()
        METRICS["depth"] += 1
        try:
            return f(*a, **k)
        finally:
            METRICS["depth"] -= 1
            if METRICS["depth"] == 0:
                METRICS["s"] += time.perf_counter() - t
    return g


@timed
def nll_sum(logits, ids):
    """Sum of -log p(ids[t+1] | ..t) over t = 0..T-2, float64 log-softmax."""
    x = logits[:-1].astype(np.float64)
    mx = x.max(axis=1, keepdims=True)
    lse = mx[:, 0] + np.log(np.exp(x - mx).sum(axis=1))
    tgt = x[np.arange(x.shape[0]), np.asarray(ids[1:])]
    return float((lse - tgt).sum())


@timed
def compare(a_all, b_all, windows, a_name, b_name, a_nll=None, b_nll=None):
    """a: candidate, b: reference (the NMSE denominator). Both [N, T, V] (or lists of [T, V])."""
    sse = ref = 0.0
    per_window = []
    maxabs = 0.0
    agree = total = 0
    disagreements = []
    a_nll = list(a_nll) if a_nll is not None else [nll_sum(a_all[w], ids) for w, ids in enumerate(windows)]
    b_nll = list(b_nll) if b_nll is not None else [nll_sum(b_all[w], ids) for w, ids in enumerate(windows)]
    for w, ids in enumerate(windows):
        a = np.asarray(a_all[w], dtype=np.float64)
        b = np.asarray(b_all[w], dtype=np.float64)
        d = a - b
        s, r = float((d * d).sum()), float((b * b).sum())
        sse += s
        ref += r
        maxabs = max(maxabs, float(np.abs(d).max()))
        aa, ba = a.argmax(axis=1), b.argmax(axis=1)
        same = aa == ba
        agree += int(same.sum())
        total += len(same)
        for p in np.nonzero(~same)[0]:
            if len(disagreements) < 20:
                top2 = np.sort(b[p])[-2:]
                disagreements.append({"window": w, "position": int(p), a_name + "_argmax": int(aa[p]),
                                      b_name + "_argmax": int(ba[p]), b_name + "_top1_top2_gap": float(top2[1] - top2[0]),
                                      a_name + "_logit_gap": float(a[p, aa[p]] - a[p, ba[p]])})
        per_window.append({"nmse": s / r, "argmax_agreement": float(same.mean()),
                           "ppl_" + a_name: math.exp(a_nll[w] / (len(ids) - 1)),
                           "ppl_" + b_name: math.exp(b_nll[w] / (len(ids) - 1))})
    n_scored = sum(len(ids) - 1 for ids in windows)
    ppl_a = math.exp(sum(a_nll) / n_scored)
    ppl_b = math.exp(sum(b_nll) / n_scored)
    return {
        "a": a_name,
        "b": b_name,
        "nmse": sse / ref,
        "nmse_worst_window": max(pw["nmse"] for pw in per_window),
        "max_abs_diff": maxabs,
        "argmax_agreement": agree / total,
        "argmax_disagreements": total - agree,
        "positions": total,
        "ppl_" + a_name: ppl_a,
        "ppl_" + b_name: ppl_b,
        "rel_ppl_diff": ppl_a / ppl_b - 1.0,
        "per_window": per_window,
        "disagreement_examples": disagreements,
    }


def meets_bar(c):
    return (c["nmse"] < BAR["nmse_lt"] and c["argmax_agreement"] >= BAR["argmax_agreement_ge"]
            and abs(c["rel_ppl_diff"]) < BAR["rel_ppl_diff_lt"])


# ---------------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="the GGUF file (default: %(default)s)")
    ap.add_argument("--heldout", type=Path, default=DEFAULT_HELDOUT, help="JSONL with a \"text\" field per line")
    ap.add_argument("--kvcheck", type=Path, default=DEFAULT_KVCHECK, help="kvcheck binary (default: %(default)s)")
    ap.add_argument("--windows", type=int, default=4, help="windows (default: %(default)s)")
    ap.add_argument("--tokens", type=int, default=512, help="tokens per window (default: %(default)s)")
    ap.add_argument("--threads", type=int, default=2, help="llama.cpp threads (default: %(default)s)")
    ap.add_argument("--f32-gguf", type=Path, help="where the dequantized F32 GGUF goes (reused when it exists; "
                    "default: a temporary directory, removed afterwards)")
    ap.add_argument("--llamacpp-only", action="store_true", help="run the two llama.cpp configurations only")
    ap.add_argument("--check-tokenizer", action=argparse.BooleanOptionalAction, default=True,
                    help="also compare kvcheck's GGUF tokenizer with llama.cpp's (default: on)")
    ap.add_argument("--numpy-reference", action="store_true",
                    help="also run an independent numpy float64 forward on window 0 (~20 s per 512 tokens) and "
                         "hold both sides to it: a referee when they disagree")
    ap.add_argument("--kvcheck-timeout", type=float, default=3600, help="seconds per kvcheck run")
    ap.add_argument("--json", type=Path, help="write the summary here")
    args = ap.parse_args()
    if args.windows < 1 or args.tokens < 2:
        die(2, "--windows must be >= 1 and --tokens >= 2")

    if not args.model.is_file():
        die(2, f"{args.model}: model file not found; ci/install-deps.sh fetches it")
    if not args.heldout.is_file():
        die(2, f"{args.heldout}: held-out text not found")
    # llama.cpp's CPU backend runs on OpenMP; on a machine shared with a build, spinning threads
    # make it several times slower. Only scheduling changes, not the arithmetic.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    try:
        import llama_cpp
    except ImportError as e:
        die(2, f"llama_cpp is not importable ({e}); python3 -m pip install llama-cpp-python==0.3.36")
    try:
        import gguf
        import gguf.quants  # noqa: F401
    except ImportError as e:
        die(2, f"gguf is not importable ({e}); python3 -m pip install gguf==0.19.0")
    run_kv = not args.llamacpp_only
    if run_kv and not (args.kvcheck.is_file() and os.access(args.kvcheck, os.X_OK)):
        die(1, f"{args.kvcheck}: no kvcheck binary (build it, pass --kvcheck PATH, or use --llamacpp-only)")

    N, T = args.windows, args.tokens
    docs = load_documents(args.heldout)
    t0 = time.perf_counter()
    vocab, windows, stream_len = make_windows(llama_cpp, args.model, docs, N, T)
    tokenize_s = time.perf_counter() - t0
    print(f"held-out: {len(docs)} documents joined with {JOIN!r}, {stream_len} tokens; "
          f"{N} windows x {T} tokens from token 0", flush=True)

    summary = {
        "what": "kvcheck reference vs llama.cpp, teacher-forced logits over held-out text",
        "model": str(args.model),
        "heldout": str(args.heldout),
        "joining_rule": f"documents in file order joined with {JOIN!r}, tokenized once by llama.cpp "
                        "(add_bos=False, special=False); window w = tokens [w*T, (w+1)*T), each from position 0",
        "windows": N,
        "tokens_per_window": T,
        "tokens": N * T,
        "scored_positions_ppl": N * (T - 1),
        "nmse_definition": "sum((a-b)^2)/sum(b^2) over all positions and vocab, b = llama.cpp's logits",
        "ppl_definition": "exp(mean NLL of the next token) over positions 0..T-2 of every window, float64 log-softmax",
        "bar": BAR,
        "gate": GATE,
        "versions": {"llama_cpp_python": llama_cpp.__version__, "gguf": getattr(gguf, "__version__", None)
                     or _dist_version("gguf"), "numpy": np.__version__, "python": platform.python_version(),
                     "llama_cpp_system_info": llama_cpp.llama_print_system_info().decode().strip()},
        "timings_s": {"tokenize": round(tokenize_s, 3)},
        "llamacpp": {},
        "comparisons": {},
    }

    tmp = None
    if args.f32_gguf is None:
        tmp = tempfile.TemporaryDirectory(prefix="kvcheck-llamacpp-")
        f32_path = Path(tmp.name) / "smollm2-f32.gguf"
    else:
        f32_path = args.f32_gguf
    try:
        if not f32_path.is_file():
            t0 = time.perf_counter()
            n = write_f32_gguf(gguf, args.model, f32_path)
            summary["timings_s"]["write_f32_gguf"] = round(time.perf_counter() - t0, 3)
            print(f"wrote {f32_path}: {n} tensors as F32, {f32_path.stat().st_size / 2**20:.0f} MiB "
                  f"({summary['timings_s']['write_f32_gguf']:.1f} s)", flush=True)
        summary["f32_gguf"] = str(f32_path)

        logits = {}
        for key, path in (("q4_1", args.model), ("f32", f32_path)):
            logits[key], info = run_llamacpp(llama_cpp, path, windows, T, args.threads)
            summary["llamacpp"][key] = info
            print(f"llama.cpp {key}: file type {info['file_type']}, KV cache K {info['kv_cache']['k']} / "
                  f"V {info['kv_cache']['v']}, flash_attn {info['flash_attn']}; load {info['load_s']:.2f} s, "
                  f"eval {info['eval_s']:.2f} s", flush=True)
        if run_kv:
            # Greedy chat: kvcheck's --chat prompt ids, continued by both sides (16 tokens or EOS).
            greedy = {}
            for engine in ("reference", "optimized"):
                prompt, gen, text = greedy_kvcheck(args.kvcheck, args.model, engine, 16, args.kvcheck_timeout)
                greedy[f"kvcheck_{engine}"] = {"ids": gen, "text": text}
            greedy["prompt_ids"] = prompt
            for key, path in (("q4_1", args.model), ("f32", f32_path)):
                gen = greedy_llamacpp(llama_cpp, path, prompt, 16, args.threads)
                greedy[f"llamacpp_{key}"] = {"ids": gen, "text": vocab.detokenize(gen).decode("utf-8", "replace")}
            greedy["chat"] = CHAT
            greedy["kvcheck_equals_llamacpp_f32"] = (greedy["kvcheck_reference"]["ids"] == greedy["llamacpp_f32"]["ids"] ==
                                                     greedy["kvcheck_optimized"]["ids"])
            summary["greedy_chat"] = greedy
            for k in ("kvcheck_reference", "kvcheck_optimized", "llamacpp_f32", "llamacpp_q4_1"):
                print(f"greedy {k}: {greedy[k]['ids']} {greedy[k]['text']!r}", flush=True)
    finally:
        if tmp is not None:
            tmp.cleanup()

    nll = {k: [nll_sum(v[w], ids) for w, ids in enumerate(windows)] for k, v in logits.items()}
    for k in logits:
        summary["llamacpp"][k]["ppl"] = math.exp(sum(nll[k]) / (N * (T - 1)))
    summary["comparisons"]["llamacpp_q4_1_vs_llamacpp_f32"] = compare(
        logits["q4_1"], logits["f32"], windows, "llamacpp_q4_1", "llamacpp_f32", nll["q4_1"], nll["f32"])

    ref64 = None
    if args.numpy_reference:
        t1 = time.perf_counter()
        ref64 = numpy_forward(gguf, args.model, windows[0])
        summary["timings_s"]["numpy_reference_window0"] = round(time.perf_counter() - t1, 3)
        for key in ("f32", "q4_1"):
            summary["comparisons"][f"numpy64_vs_llamacpp_{key}_window0"] = compare(
                [ref64], logits[key][:1], windows[:1], "numpy64", "llamacpp", None, nll[key][:1])

    status = 0
    if run_kv:
        kv = np.empty_like(logits["f32"])
        kv_secs = []
        with tempfile.TemporaryDirectory(prefix="kvcheck-logits-") as d:
            for w, ids in enumerate(windows):
                try:
                    kv[w], s = run_kvcheck(args.kvcheck, args.model, ids, Path(d) / f"w{w}.npy", args.kvcheck_timeout)
                except (RuntimeError, subprocess.TimeoutExpired) as e:
                    die(1, f"kvcheck failed on window {w}: {e}")
                kv_secs.append(s)
                print(f"kvcheck window {w}: {s:.1f} s", flush=True)
        summary["kvcheck"] = {"binary": str(args.kvcheck), "model": str(args.model), "seconds": round(sum(kv_secs), 3),
                              "seconds_per_window": [round(s, 3) for s in kv_secs]}
        kv_nll = [nll_sum(kv[w], ids) for w, ids in enumerate(windows)]
        for key in ("f32", "q4_1"):
            summary["comparisons"][f"kvcheck_vs_llamacpp_{key}"] = compare(
                kv, logits[key], windows, "kvcheck", "llamacpp", kv_nll, nll[key])
        if ref64 is not None:
            summary["comparisons"]["kvcheck_vs_numpy64_window0"] = compare(
                kv[:1], [ref64], windows[:1], "kvcheck", "numpy64", kv_nll[:1], None)
        if args.check_tokenizer:
            text = docs[0][1][:1500]
            ref_ids = list(vocab.tokenize(text.encode("utf-8"), add_bos=False, special=False))
            try:
                kv_ids = kvcheck_tokenize(args.kvcheck, args.model, text, args.kvcheck_timeout)
                first = next((i for i, (x, y) in enumerate(zip(kv_ids, ref_ids)) if x != y),
                             None if len(kv_ids) == len(ref_ids) else min(len(kv_ids), len(ref_ids)))
                summary["tokenizer_check"] = {"text": f"first 1500 characters of {docs[0][0]}", "tokens": len(ref_ids),
                                              "match": kv_ids == ref_ids, "first_difference": first}
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                summary["tokenizer_check"] = {"error": str(e)}
        status = 0 if meets_bar(summary["comparisons"][GATE]) and summary["greedy_chat"]["kvcheck_equals_llamacpp_f32"] else 1
        summary["pass"] = status == 0
    summary["timings_s"]["metrics"] = round(METRICS["s"], 3)

    print_table(summary)
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2) + "\n")
        print(f"summary: {args.json}")
    return status


def _dist_version(name):
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:
        return None


def print_table(s):
    ll = s["llamacpp"]
    kv_s = s.get("kvcheck", {}).get("seconds")
    np_s = s["timings_s"].get("numpy_reference_window0")
    print()
    print(f"tokens: {s['tokens']} ({s['windows']} windows x {s['tokens_per_window']}), "
          f"perplexity over {s['scored_positions_ppl']} next-token predictions")
    labels = {
        "kvcheck_vs_llamacpp_f32": ("kvcheck vs llama.cpp, dequantized F32 GGUF [gate]", kv_s, ll["f32"]["eval_s"]),
        "kvcheck_vs_llamacpp_q4_1": ("kvcheck vs llama.cpp, same GGUF (Q4_1 kernels)", kv_s, ll["q4_1"]["eval_s"]),
        "llamacpp_q4_1_vs_llamacpp_f32": ("llama.cpp Q4_1 kernels vs llama.cpp F32", ll["q4_1"]["eval_s"],
                                          ll["f32"]["eval_s"]),
        "numpy64_vs_llamacpp_f32_window0": ("numpy f64 vs llama.cpp F32 (window 0)", np_s, None),
        "numpy64_vs_llamacpp_q4_1_window0": ("numpy f64 vs llama.cpp Q4_1 (window 0)", np_s, None),
        "kvcheck_vs_numpy64_window0": ("kvcheck vs numpy f64 (window 0)", None, np_s),
    }
    fmt_t = lambda t: "-" if t is None else f"{t:.1f}"  # noqa: E731
    rows = []
    for key, (label, ta, tb) in labels.items():
        c = s["comparisons"].get(key)
        if c is None:
            continue
        rows.append((label, f"{c['nmse']:.3e}", f"{c['nmse_worst_window']:.3e}", f"{c['max_abs_diff']:.3e}",
                     f"{100 * c['argmax_agreement']:.3f}%", f"{c['ppl_' + c['a']]:.4f}", f"{c['ppl_' + c['b']]:.4f}",
                     f"{c['rel_ppl_diff']:+.2e}", f"{fmt_t(ta)} / {fmt_t(tb)}"))
    head = ("comparison (a vs b; NMSE relative to b)", "NMSE", "worst win", "max|diff|", "argmax", "ppl a", "ppl b",
            "ppl a/b-1", "time a / b s")
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    for r in [head] + rows:
        print("  ".join(x.ljust(w) if i == 0 else x.rjust(w) for i, (x, w) in enumerate(zip(r, widths))))
    if "tokenizer_check" in s:
        tc = s["tokenizer_check"]
        print(f"tokenizer: kvcheck vs llama.cpp on {tc.get('text')}: "
              + (f"{'match' if tc['match'] else 'DIFFER at token ' + str(tc['first_difference'])} ({tc['tokens']} tokens)"
                 if "match" in tc else f"error: {tc['error']}"))
    if "pass" in s:
        b = s["bar"]
        print(f"gate ({s['gate']}): NMSE < {b['nmse_lt']:g}, argmax >= {100 * b['argmax_agreement_ge']:g}%, "
              f"|ppl ratio - 1| < {100 * b['rel_ppl_diff_lt']:g}%: {'PASS' if s['pass'] else 'FAIL'}")


if __name__ == "__main__":
    sys.exit(main())
