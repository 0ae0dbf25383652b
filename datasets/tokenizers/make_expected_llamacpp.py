#!/usr/bin/env python3
"""Writes expected/smollm2-gguf.jsonl: llama.cpp's tokenization of every input of strings.jsonl
with the tokenizer stored in the SmolLM2-135M-Instruct GGUF (datasets/models/fetched/, fetched by
ci/install-deps.sh), through llama-cpp-python (version pinned in requirements.txt; it builds
llama.cpp from its vendored source).

Line i, same format as the other expected/*.jsonl:
  "ids":     llama_tokenize(utf8(text_i), add_special=false, parse_special=true): special-token
             text in the input ("<|im_start|>", ...) becomes that token, as Hugging Face does;
  "prefix"/"suffix": what add_special=true adds before/after those ids (this GGUF says
             tokenizer.ggml.add_bos_token = false and has no add_eos_token: nothing, checked);
  "decoded": llama_detokenize(ids, remove_special=false, unparse_special=false) as UTF-8 (control
             tokens render as nothing: the counterpart of skip_special_tokens=True), omitted when
             it equals text_i; "" when ids is empty, as in the other files.
Inputs are encoded as strict UTF-8: a string holding a lone surrogate (possible in JSON) stops the
script with an error instead of being guessed at; strings.jsonl holds none.

Usage: python3 datasets/tokenizers/make_expected_llamacpp.py [--model PATH] [--out PATH]
"""
import argparse
import ctypes
import os

import llama_cpp

from expected_lines import HERE, expected_line, read_strings, write_lines

ROOT = os.path.dirname(os.path.dirname(HERE))
DEFAULT_MODEL = os.path.join(ROOT, "datasets/models/fetched/SmolLM2-135M-Instruct.Q4_1.gguf")


def load(model_path):
    return llama_cpp.Llama(model_path=model_path, vocab_only=True, verbose=False)


def tokenize(llm, text, add_special):
    return llm.tokenize(text.encode("utf-8"), add_bos=add_special, special=True)


def detokenize(llm, ids):
    """llama.cpp's own llama_detokenize (the wrapper's Llama.detokenize concatenates pieces
    through a 32-byte buffer and strips a space after a leading BOS)."""
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    arr = (llama_cpp.llama_token * len(ids))(*ids)
    size = 64 + 8 * len(ids)
    while True:
        buf = ctypes.create_string_buffer(size)
        n = llama_cpp.llama_detokenize(vocab, arr, len(ids), buf, size, False, False)
        if n >= 0:
            return buf.raw[:n].decode("utf-8", errors="replace")
        size = -n + 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--out", default=os.path.join(HERE, "expected", "smollm2-gguf.jsonl"))
    args = ap.parse_args()
    llm = load(args.model)
    strings = read_strings()

    lines = []
    for s in strings:
        ids = tokenize(llm, s, False)
        special = tokenize(llm, s, True)
        decoded = detokenize(llm, ids) if ids else ""
        lines.append(expected_line(s, ids, special, decoded, "smollm2-gguf"))

    write_lines(args.out, lines)
    print(f"smollm2-gguf: {len(strings)} strings -> {args.out} (llama-cpp-python {llama_cpp.__version__})")


if __name__ == "__main__":
    main()
