#!/usr/bin/env python3
"""Writes datasets/eval/retrieval.jsonl: the committed retrieval evaluation set.

30 items for each of 3 tasks (passkey, kv, needle) and 4 length buckets (128, 256, 384, 512
tokens), 360 in all. An item of bucket L has BOS + prompt + answer tokens in (3L/4, L] under the
embedded model's tokenizer. The filler text comes from the held-out Brown documents
(datasets/eval/heldout.jsonl), never from the training documents; key words and names come from
fixed lists; numbers from a seeded generator, so the file is reproducible byte for byte.

Schema, one JSON object per line:
  {"id": "passkey-256-007", "task": "passkey" | "kv" | "needle", "length_bucket": 256,
   "prompt": "...", "answer": "48213", "tokens": 241}
`tokens` is BOS + prompt + answer under the embedded tokenizer (informational).

Usage (repository root):  /usr/bin/python3 datasets/synthetic/make_eval_sets.py
"""
import argparse
import json
import os
import random
import sys

import sentencepiece as spm

sys.path.insert(0, os.path.dirname(__file__))
import retrieval_tasks  # noqa: E402

BUCKETS = (128, 256, 384, 512)
PER_CELL = 30
SEED = 7


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", default="datasets/models/kvcheck-tiny/tokenizer.model")
    ap.add_argument("--heldout", default="datasets/eval/heldout.jsonl")
    ap.add_argument("--train-docs", default="build/corpus/brown_train_docs.jsonl",
                    help="only for the list of key words of the kv task")
    ap.add_argument("--out", default="datasets/eval/retrieval.jsonl")
    a = ap.parse_args()
    sp = spm.SentencePieceProcessor(model_file=a.tokenizer)
    held = [json.loads(l)["text"] for l in open(a.heldout, encoding="utf-8")]
    words = retrieval_tasks.key_words(json.loads(l)["text"] for l in open(a.train_docs, encoding="utf-8"))
    filler = retrieval_tasks.Filler(held, sp)
    rng = random.Random(SEED)
    items = []
    for kind in retrieval_tasks.TASKS:
        for bucket in BUCKETS:
            made = 0
            while made < PER_CELL:
                prompt, answer = retrieval_tasks.make_task(kind, rng, sp, filler, words, bucket)
                n = 1 + len(sp.encode(prompt)) + len(sp.encode(answer))
                if not (bucket * 3 // 4 < n <= bucket):
                    continue  # token counts are not exactly additive; draw again
                items.append({"id": f"{kind}-{bucket}-{made:03d}", "task": kind, "length_bucket": bucket,
                              "prompt": prompt, "answer": answer, "tokens": n})
                made += 1
    tmp = a.out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        for it in items:
            f.write(json.dumps(it, ensure_ascii=False) + "\n")
    os.replace(tmp, a.out)
    print(f"make_eval_sets: {len(items)} items -> {a.out}")


if __name__ == "__main__":
    main()
