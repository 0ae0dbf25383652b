#!/usr/bin/env python3
"""Turns the tagged Brown corpus files (word/tag tokens, one sentence per line, blank lines
between paragraphs) into plain English text, and splits it into training and held-out documents.

Every 20th document (sorted by file name, starting at the 8th) is held out; the held-out
documents are never seen by the tokenizer or the model."""
import argparse
import json
import os
import re

NO_SPACE_BEFORE = {".", ",", ";", ":", "?", "!", ")", "]", "''", "'", "n't"}
NO_SPACE_AFTER = {"(", "[", "``"}
HELDOUT_EVERY = 20
HELDOUT_OFFSET = 7


def detokenize(tokens):
    out = []
    glue = True
    for tok in tokens:
        word = tok.rsplit("/", 1)[0] if "/" in tok else tok
        if word == "``":
            text = '"'
        elif word == "''":
            text = '"'
        else:
            text = word
        if out and not glue and word not in NO_SPACE_BEFORE:
            out.append(" ")
        out.append(text)
        glue = word in NO_SPACE_AFTER
    return "".join(out)


def read_document(path):
    paragraphs, sentences = [], []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            sentences.append(detokenize(line.split()))
    # The files separate sentences by blank lines; paragraphs are not marked reliably, so a
    # document is one line of sentences.
    text = " ".join(sentences)
    text = re.sub(r"\s+", " ", text).strip()
    return text


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("package")
    ap.add_argument("--train", required=True)
    ap.add_argument("--train-docs", required=True)
    ap.add_argument("--heldout", required=True)
    args = ap.parse_args()
    names = sorted(n for n in os.listdir(args.package) if re.fullmatch(r"c[a-r]\d\d", n))
    if len(names) != 500:
        raise SystemExit(f"{args.package}: expected 500 Brown files, found {len(names)}")
    os.makedirs(os.path.dirname(args.heldout), exist_ok=True)
    n_train = n_held = 0
    with open(args.train, "w", encoding="utf-8") as train, \
            open(args.train_docs, "w", encoding="utf-8") as train_docs, \
            open(args.heldout, "w", encoding="utf-8") as held:
        for i, name in enumerate(names):
            text = read_document(os.path.join(args.package, name))
            record = json.dumps({"id": f"brown-{name}", "text": text}, ensure_ascii=False)
            if i % HELDOUT_EVERY == HELDOUT_OFFSET:
                held.write(record + "\n")
                n_held += 1
            else:
                train.write(text + "\n")
                train_docs.write(record + "\n")
                n_train += 1
    print(f"brown_to_text: {n_train} training documents, {n_held} held out")


if __name__ == "__main__":
    main()
