#!/usr/bin/env python3
"""kvcheck bridge: run vLLM offline on a kvcheck items file and write a top-k engine output (JSONL)
that `kvcheck compare` reads (docs/reports.md, "Checking another engine").

Written against: vLLM 0.6 (LLM.generate with TokensPrompt, SamplingParams.prompt_logprobs,
kv_cache_dtype "auto" | "fp8" | "fp8_e4m3" | "fp8_e5m2"). Not run by the test gate.

    kvcheck export --model MODEL_DIR --out items.jsonl
    python3 bridges/vllm_offline.py --model MODEL_DIR --items items.jsonl --out vllm-fp8.jsonl --kv-cache-dtype fp8 --top-k 20
    kvcheck compare --model MODEL_DIR --items items.jsonl --engine-output vllm-fp8.jsonl --name vllm-fp8 --out cmp/

Text items: prompt_ids + continuation_ids go in as one prompt with prompt_logprobs=K; vLLM returns,
per prompt position, the K most likely tokens plus the actual token, which is exactly the top-k
row kvcheck wants for each continuation position (the positions of continuation_ids). Note that a
prompt is prefilled at once, so this checks the prefill path with the chosen KV dtype (the KV cache
is written and read within the prefill's chunks); decode-time reads are checked by the retrieval
items, generated greedily (temperature 0, ignore_eos) with max_tokens = max_new_tokens.
KL is then a lower bound (top-K plus one bucket for the rest of the mass), labelled so by kvcheck.
"""
import argparse
import json

from vllm import LLM, SamplingParams
from vllm.inputs import TokensPrompt


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--items", required=True)
    p.add_argument("--out", required=True, help="the .jsonl engine output to write")
    p.add_argument("--kv-cache-dtype", default="auto")
    p.add_argument("--top-k", type=int, default=20)
    p.add_argument("--dtype", default="auto")
    args = p.parse_args()
    with open(args.items) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    header, items = lines[0], lines[1:]
    llm = LLM(model=args.model, dtype=args.dtype, kv_cache_dtype=args.kv_cache_dtype, enable_prefix_caching=False)
    text = [it for it in items if it["kind"] == "text"]
    retrieval = [it for it in items if it["kind"] == "retrieval"]
    with open(args.out, "w") as out:
        params = SamplingParams(max_tokens=1, prompt_logprobs=args.top_k, temperature=0.0)
        results = llm.generate([TokensPrompt(prompt_token_ids=it["prompt_ids"] + it["continuation_ids"]) for it in text], params)
        for it, r in zip(text, results):
            start = len(it["prompt_ids"])  # prompt_logprobs[j] is the distribution of token j given tokens < j
            rows = [{str(t): lp.logprob for t, lp in r.prompt_logprobs[j].items()} for j in range(start, start + len(it["continuation_ids"]))]
            out.write(json.dumps({"id": it["id"], "top_logprobs": rows}) + "\n")
        for it in retrieval:
            params = SamplingParams(max_tokens=it["max_new_tokens"], temperature=0.0, ignore_eos=True)
            r = llm.generate([TokensPrompt(prompt_token_ids=it["prompt_ids"])], params)[0]
            out.write(json.dumps({"id": it["id"], "generated_ids": list(r.outputs[0].token_ids)}) + "\n")
    print(f"wrote {len(items)} items to {args.out} (vocab {header['vocab_size']})")


if __name__ == "__main__":
    main()
