#!/usr/bin/env python3
"""Builds a vocab-only GGUF ("llama" / SentencePiece-style tokenizer) from the kvcheck-tiny
SentencePiece model, and the expected ids of every input of ../strings.jsonl from llama.cpp and
from SentencePiece itself.

Writes (paths relative to the repository root; run from anywhere):
  datasets/tokenizers/spm/kvcheck-tiny-spm.gguf
  datasets/tokenizers/expected/kvcheck-tiny-spm-llamacpp.jsonl
  datasets/tokenizers/expected/kvcheck-tiny-spm-sentencepiece.jsonl
and prints how many inputs the two tokenizers disagree on, with examples.

The GGUF follows llama.cpp's convert_hf_to_gguf.py (TextModel._create_vocab_sentencepiece and
_set_vocab_sentencepiece), which reads the model with SentencePieceProcessor:
  tokens      = IdToPiece(id) as UTF-8, in id order (no padding: vocab_size == model size);
  scores      = GetScore(id), float32;
  token_type  = 2 UNKNOWN if IsUnknown, else 3 CONTROL if IsControl, else 5 UNUSED if IsUnused,
                else 6 BYTE if IsByte, else 1 NORMAL (checked here against the piece text:
                <unk> -> 2, <s>/</s> -> 3, <0xXX> -> 6, the rest 1);
  tokenizer.ggml.model "llama", tokenizer.ggml.pre "default".
convert_hf_to_gguf.py takes the special ids and add_bos/add_eos from the HF config files
(SpecialVocab) and writes add_space_prefix for the llama architecture only from
tokenizer_config.json's add_prefix_space; llama.cpp's defaults for an SPM vocab are
add_space_prefix = true, add_bos = true, add_eos = false. This fixture writes them all
explicitly: bos/eos/unknown ids from the SentencePiece model, add_bos_token true, add_eos_token
false, add_space_prefix = the model's normalizer_spec.add_dummy_prefix (true).
No tensors and no llama.* hyperparameters: llama.cpp's vocab_only load reads only
general.architecture and the tokenizer.ggml.* keys (checked with llama-cpp-python 0.3.36: a file
holding only the model/tokens/scores/token_type/bos/eos/unk keys loads and gives the same ids on
all 2,200 inputs; it reports n_ctx_train = 0).

Expected ids, same format as ../expected/*.jsonl ({"ids","prefix","suffix"[,"decoded"]}):
  llamacpp:       as make_expected_llamacpp.py: tokenize(utf8, add_bos=False, special=True) for
                  ids (so "<s>", "</s>", "<unk>" in the text become tokens 1, 2, 0), prefix/
                  suffix from add_bos=True, "decoded" = llama_detokenize(ids, remove_special=
                  False, unparse_special=False) when it differs from the input.
  sentencepiece:  SentencePieceProcessor.encode(text) (the Python package, pinned version; the
                  text is plain text: no special-token parsing), prefix [1] and suffix [] (the
                  add_bos/add_eos of the GGUF: SentencePiece itself adds neither), "decoded" =
                  SentencePieceProcessor.decode(ids) when it differs from the input.

Usage: python3 datasets/tokenizers/spm/make_spm_gguf.py [--model PATH] [--quiet]
Needs: gguf==0.19.0, numpy, llama-cpp-python==0.3.36, sentencepiece==0.2.0.
"""
import argparse
import os
import re
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
TOK = os.path.dirname(HERE)
ROOT = os.path.dirname(os.path.dirname(TOK))
DEFAULT_MODEL = os.path.join(ROOT, "datasets/models/kvcheck-tiny/tokenizer.model")
GGUF_OUT = os.path.join(HERE, "kvcheck-tiny-spm.gguf")
sys.path.insert(0, TOK)
from expected_lines import expected_line, read_strings, write_lines  # noqa: E402
LLAMACPP_OUT = os.path.join(TOK, "expected", "kvcheck-tiny-spm-llamacpp.jsonl")
SPM_OUT = os.path.join(TOK, "expected", "kvcheck-tiny-spm-sentencepiece.jsonl")

# llama.cpp token types (gguf.TokenType)
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
BYTE_PIECE = re.compile(r"<0x[0-9A-F]{2}>")


# --- minimal protobuf reading (only the options that matter; avoids a protobuf dependency) ---

def _varint(b, i):
    v = shift = 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        shift += 7
        if c < 0x80:
            return v, i


def _fields(b):
    """Yields (field number, wire type, value) of one protobuf message."""
    i = 0
    while i < len(b):
        key, i = _varint(b, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(b, i)
        elif wt == 1:
            v, i = b[i:i + 8], i + 8
        elif wt == 2:
            n, i = _varint(b, i)
            v, i = b[i:i + n], i + n
        elif wt == 5:
            v, i = b[i:i + 4], i + 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wt}")
        yield num, wt, v


def read_options(model_bytes):
    """ModelProto.trainer_spec (2) / normalizer_spec (3) booleans, with the proto defaults."""
    opts = {"add_dummy_prefix": True, "remove_extra_whitespaces": True, "escape_whitespaces": True,
            "normalizer_name": "", "split_digits": False, "byte_fallback": False,
            "treat_whitespace_as_suffix": False}
    for num, wt, v in _fields(model_bytes):
        if num == 3 and wt == 2:      # NormalizerSpec
            for n, w, x in _fields(v):
                if n == 1 and w == 2:
                    opts["normalizer_name"] = x.decode("utf-8")
                elif n == 3 and w == 0:
                    opts["add_dummy_prefix"] = bool(x)
                elif n == 4 and w == 0:
                    opts["remove_extra_whitespaces"] = bool(x)
                elif n == 5 and w == 0:
                    opts["escape_whitespaces"] = bool(x)
        elif num == 2 and wt == 2:    # TrainerSpec
            for n, w, x in _fields(v):
                if n == 24 and w == 0:
                    opts["treat_whitespace_as_suffix"] = bool(x)
                elif n == 25 and w == 0:
                    opts["split_digits"] = bool(x)
                elif n == 35 and w == 0:
                    opts["byte_fallback"] = bool(x)
    return opts


# --- vocabulary -----------------------------------------------------------------------------

def read_vocab(sp):
    tokens, scores, types = [], [], []
    for i in range(sp.GetPieceSize()):
        piece = sp.IdToPiece(i)
        if sp.IsUnknown(i):
            t = UNKNOWN
        elif sp.IsControl(i):
            t = CONTROL
        elif sp.IsUnused(i):
            t = UNUSED
        elif sp.IsByte(i):
            t = BYTE
        else:
            t = NORMAL
        # the brief's rule by piece text must agree with convert_hf_to_gguf's by piece type
        by_text = (UNKNOWN if piece == "<unk>" else CONTROL if piece in ("<s>", "</s>")
                   else BYTE if BYTE_PIECE.fullmatch(piece) else NORMAL)
        if t != by_text:
            raise SystemExit(f"token {i} {piece!r}: type {t} from SentencePiece, {by_text} by text")
        tokens.append(piece)
        scores.append(sp.GetScore(i))
        types.append(t)
    return tokens, scores, types


def write_gguf(path, tokens, scores, types, sp, opts):
    import gguf
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("kvcheck-tiny-spm (vocab only)")
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores([float(np.float32(x)) for x in scores])  # stored as float32
    w.add_token_types(types)
    w.add_bos_token_id(sp.bos_id())
    w.add_eos_token_id(sp.eos_id())
    w.add_unk_token_id(sp.unk_id())
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(opts["add_dummy_prefix"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# --- llama.cpp ------------------------------------------------------------------------------

class _quiet_stderr:
    """llama.cpp logs a warning to stderr for every input that starts with "<s>" when add_bos
    is on (two BOS tokens); silence fd 2 around those calls."""

    def __enter__(self):
        sys.stderr.flush()
        self.saved = os.dup(2)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.close(devnull)

    def __exit__(self, *exc):
        os.dup2(self.saved, 2)
        os.close(self.saved)


def llamacpp_lines(model_path, strings):
    """The expected lines, and the ids without special-token parsing (for the comparison)."""
    import llama_cpp
    llm = llama_cpp.Llama(model_path=model_path, vocab_only=True, verbose=False)

    # llama_detokenize, as the SmolLM2 expected ids were made (one helper for both scripts).
    from make_expected_llamacpp import detokenize as llamacpp_detokenize

    def detokenize(ids):
        return llamacpp_detokenize(llm, ids)

    out, plain = [], []
    for s in strings:
        b = s.encode("utf-8")
        ids = llm.tokenize(b, add_bos=False, special=True)
        with _quiet_stderr():
            special = llm.tokenize(b, add_bos=True, special=True)
        plain.append(llm.tokenize(b, add_bos=False, special=False))
        out.append(expected_line(s, ids, special, detokenize(ids) if ids else "", "llama.cpp"))
    return out, plain, llama_cpp.__version__


def spm_lines(sp, strings):
    out = []
    for s in strings:
        ids = sp.encode(s)
        out.append(expected_line(s, ids, [sp.bos_id()] + ids, sp.decode(ids) if ids else "", "sentencepiece"))
    return out


# --- comparison -----------------------------------------------------------------------------

SPECIAL_TEXT = re.compile(r"(<s>|</s>|<unk>)")


def classify(s, ids, plain, spm_ids):
    """Why llama.cpp's ids differ from SentencePiece's on s."""
    if plain != spm_ids:
        return "llama.cpp differs even without special-token parsing"
    parts = SPECIAL_TEXT.split(s)   # text, special, text, special, ..., text
    if len(parts) > 1 and any(i in (0, 1, 2) for i in ids):
        if any(parts[k] for k in range(2, len(parts), 2)):
            return ("special-token text (<s>, </s>, <unk>) read as the control/unknown token, "
                    "and the text after it gets llama.cpp's space prefix")
        return "special-token text (<s>, </s>, <unk>) read as the control/unknown token"
    return "other"


def compare(strings, lc, plain, sm, tokens, show):
    diff = [i for i in range(len(strings)) if lc[i]["ids"] != sm[i]["ids"]]
    nplain = sum(plain[i] != sm[i]["ids"] for i in range(len(strings)))
    causes = {}
    for i in diff:
        causes.setdefault(classify(strings[i], lc[i]["ids"], plain[i], sm[i]["ids"]), []).append(i)
    print(f"llama.cpp vs SentencePiece: {len(diff)} of {len(strings)} inputs differ in ids "
          f"({nplain} with llama.cpp's special-token parsing off)")
    for c, idx in sorted(causes.items()):
        print(f"  {c}: {len(idx)} (lines {', '.join(str(i + 1) for i in idx[:12])}"
              f"{', ...' if len(idx) > 12 else ''})")
    for i in diff[:show]:
        a, b = lc[i]["ids"], sm[i]["ids"]
        k = next((j for j in range(min(len(a), len(b))) if a[j] != b[j]), min(len(a), len(b)))
        lo = max(0, k - 3)
        print(f"  line {i + 1}: {strings[i][:80]!r}")
        print(f"    llama.cpp     [{k}:] {[tokens[t] for t in a[lo:k + 6]]}")
        print(f"    sentencepiece [{k}:] {[tokens[t] for t in b[lo:k + 6]]}")
    dec_lc = sum("decoded" in l for l in lc)
    dec_sm = sum("decoded" in l for l in sm)
    print(f"decode differs from the input: llama.cpp {dec_lc}, SentencePiece {dec_sm}")
    return diff


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--show", type=int, default=8, help="examples of differences to print")
    args = ap.parse_args()

    import sentencepiece
    t0 = time.perf_counter()
    model_bytes = open(args.model, "rb").read()
    opts = read_options(model_bytes)
    sp = sentencepiece.SentencePieceProcessor(model_proto=model_bytes)
    tokens, scores, types = read_vocab(sp)
    print(f"{os.path.relpath(args.model, ROOT)}: {len(tokens)} pieces, options {opts}")
    print("token types: " + ", ".join(f"{t}: {types.count(t)}" for t in sorted(set(types))))
    write_gguf(GGUF_OUT, tokens, scores, types, sp, opts)
    t1 = time.perf_counter()
    print(f"wrote {os.path.relpath(GGUF_OUT, ROOT)} ({os.path.getsize(GGUF_OUT)} bytes) "
          f"in {t1 - t0:.2f} s")

    strings = read_strings()
    for s in strings:
        s.encode("utf-8")  # strict: stops on a lone surrogate

    lc, plain, lc_version = llamacpp_lines(GGUF_OUT, strings)
    t2 = time.perf_counter()
    write_lines(LLAMACPP_OUT, lc)
    print(f"llama.cpp (llama-cpp-python {lc_version}): {len(strings)} strings -> "
          f"{os.path.relpath(LLAMACPP_OUT, ROOT)} in {t2 - t1:.2f} s")
    if any(l["prefix"] != [sp.bos_id()] or l["suffix"] for l in lc):
        raise SystemExit("llama.cpp: add_special did not add exactly <s> before the ids")

    sm = spm_lines(sp, strings)
    t3 = time.perf_counter()
    write_lines(SPM_OUT, sm)
    print(f"SentencePiece (sentencepiece {sentencepiece.__version__}): {len(strings)} strings -> "
          f"{os.path.relpath(SPM_OUT, ROOT)} in {t3 - t2:.2f} s")

    compare(strings, lc, plain, sm, tokens, args.show)


if __name__ == "__main__":
    main()
