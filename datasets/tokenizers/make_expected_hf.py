#!/usr/bin/env python3
"""Writes expected/qwen3.jsonl with Hugging Face `tokenizers` (pinned in requirements.txt) from the
committed qwen3/tokenizer.json, for every input of strings.jsonl.

Line i: {"ids": encode(text_i, add_special_tokens=False), "prefix"/"suffix": what
encode(text_i, add_special_tokens=True) adds before/after those ids, "decoded":
decode(ids, skip_special_tokens=True), omitted when it equals text_i}. Same format as the files
the former make_expected.mjs (transformers.js) wrote. `tokenizers` applies no
clean_up_tokenization_spaces (Qwen3's tokenizer_config.json sets it false anyway).

Usage (from anywhere):
  python3 datasets/tokenizers/make_expected_hf.py [--name qwen3] [--out PATH]
Other tokenizer.json files can be used with --tokenizer DIR/tokenizer.json --name NAME.
"""
import argparse
import os

from tokenizers import Tokenizer

from expected_lines import HERE, expected_line, read_strings, write_lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", default="qwen3")
    ap.add_argument("--tokenizer", help="tokenizer.json (default: <here>/<name>/tokenizer.json)")
    ap.add_argument("--out", help="output (default: <here>/expected/<name>.jsonl)")
    args = ap.parse_args()
    tok_path = args.tokenizer or os.path.join(HERE, args.name, "tokenizer.json")
    out = args.out or os.path.join(HERE, "expected", f"{args.name}.jsonl")

    tok = Tokenizer.from_file(tok_path)
    strings = read_strings()

    lines = []
    for s in strings:
        # Python str from JSON may hold lone surrogates; tokenizers (Rust) cannot take them.
        # strings.jsonl has none; fail loudly rather than guess if one ever appears.
        s.encode("utf-8")
        ids = tok.encode(s, add_special_tokens=False).ids
        special = tok.encode(s, add_special_tokens=True).ids
        decoded = tok.decode(ids, skip_special_tokens=True) if ids else ""
        lines.append(expected_line(s, ids, special, decoded, args.name))

    write_lines(out, lines)
    print(f"{args.name}: {len(strings)} strings -> {out}")


if __name__ == "__main__":
    main()
