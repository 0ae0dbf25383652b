#!/usr/bin/env python3
"""Checks a `kvcheck eval --task all --json FILE` result against the embedded model's acceptance
bars, and prints one line per bar with the measured value:

  - held-out perplexity at least 5x below the unigram perplexity of the same tokenizer and text;
  - retrieval exact match >= 90% over the whole committed set, and >= 80% in the longest bucket;
  - at least one KV head whose 95%-mass token count is under 20% of the context (sparsity);
  - at least one KV head with more than half of its attention mass on the first token (a sink).

Exit status 0 when every bar is met, 1 otherwise, 2 for a file that is not a full eval.

    build/bin/kvcheck eval --task all --json /tmp/eval.json
    python3 datasets/train/check_model.py /tmp/eval.json
"""
import json
import sys


def main(path):
    try:
        with open(path, encoding="utf-8") as f:
            j = json.load(f)
    except (OSError, ValueError) as e:
        print(f"{path}: cannot read a JSON eval result: {e}", file=sys.stderr)
        return 2
    if j.get("format") != "kvcheck-eval" or any(j.get(k) is None for k in ("ppl", "retrieval", "attention")):
        print(f"{path}: not a `kvcheck eval --task all` result (format, ppl, retrieval, attention)", file=sys.stderr)
        return 2
    if j.get("limit") is not None:
        print(f"{path}: evaluated with --limit {j['limit']}; the bars apply to the whole sets", file=sys.stderr)
        return 2
    by_length = j["retrieval_accuracy_by_length"]
    longest = max(by_length, key=int)
    heads = j["attention"]["heads"]
    best_sparse = min(heads, key=lambda h: h["frac_for_95"])
    best_sink = max(heads, key=lambda h: h["first_token_mass"])
    bars = [
        ("perplexity ratio (ppl / unigram) <= 0.2", j["perplexity_ratio"] <= 0.2,
         f"{j['perplexity']:.2f} / {j['unigram_perplexity']:.2f} = {j['perplexity_ratio']:.3f}"),
        ("retrieval exact match >= 0.90", j["retrieval_accuracy"] >= 0.90, f"{j['retrieval_accuracy']:.3f}"),
        (f"retrieval at the longest bucket ({longest}) >= 0.80", by_length[longest] >= 0.80,
         f"{by_length[longest]:.3f}  (by length: " +
         ", ".join(f"{k}: {by_length[k]:.3f}" for k in sorted(by_length, key=int)) + ")"),
        ("a head with frac_for_95 < 0.2", best_sparse["frac_for_95"] < 0.2,
         f"best: layer {best_sparse['layer']} kv_head {best_sparse['kv_head']}: {best_sparse['frac_for_95']:.3f}"),
        ("a head with first_token_mass > 0.5", best_sink["first_token_mass"] > 0.5,
         f"best: layer {best_sink['layer']} kv_head {best_sink['kv_head']}: {best_sink['first_token_mass']:.3f}"),
    ]
    ok = True
    for name, passed, value in bars:
        ok &= passed
        print(f"{'PASS' if passed else 'FAIL'}  {name}: {value}")
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
