"""The line format of expected/*.jsonl, shared by the scripts that write those files.

Line i, for input text_i of strings.jsonl:
  {"ids": the ids of text_i without special tokens,
   "prefix"/"suffix": what encoding with special tokens adds before/after those ids,
   "decoded": the ids decoded, omitted when it equals text_i}
The C++ test (properties/reference/tokenizer_json_ids_test.cpp) reads prefix + ids + suffix as the
encoding with special tokens.
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def dump(obj):
    """Compact, non-ASCII kept as is (as JSON.stringify wrote the first files)."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def read_strings():
    with open(os.path.join(HERE, "strings.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def expected_line(text, ids, special, decoded, who):
    """The line of `text`: `special` must be `ids` with something added before and/or after.

    Where `ids` fit at several offsets, the last is taken: with a BOS-only wrapper, ids that are
    all BOS (the input "<s>") or none would otherwise read as prefix [] and suffix [BOS]. `who`
    names the writer in the error.
    """
    p = len(special) - len(ids)
    at = next((k for k in range(p, -1, -1) if special[k:k + len(ids)] == ids), -1)
    if at < 0:
        raise SystemExit(f"{who}: the encoding with special tokens does not wrap the ids of {text!r}")
    line = {"ids": ids, "prefix": special[:at], "suffix": special[at + len(ids):]}
    if decoded != text:
        line["decoded"] = decoded
    return line


def write_lines(path, lines):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write("".join(dump(line) + "\n" for line in lines))
