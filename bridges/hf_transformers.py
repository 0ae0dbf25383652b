#!/usr/bin/env python3
"""kvcheck bridge: run Hugging Face transformers on a kvcheck items file and write an engine output
that `kvcheck compare` reads (docs/reports.md, "Checking another engine").

Written against: Python 3.10+, torch 2.3, transformers 4.45 (DynamicCache / QuantizedCache /
`cache_implementation`), numpy 1.26; kvpress 0.0.x optional. Not run by the test gate.

    kvcheck export --quick --model MODEL_DIR --out items.jsonl
    python3 bridges/hf_transformers.py --model MODEL_DIR --items items.jsonl --out engine-out/ \
        [--cache dynamic|quantized --nbits 4 --backend quanto] [--press snapkv --compression-ratio 0.5] \
        [--dtype float32] [--device cuda]
    kvcheck compare --model MODEL_DIR --items items.jsonl --engine-output engine-out --name hf-quant4 --out cmp/

Text items: the prompt is prefilled into the cache, then each continuation token is fed one decode
step at a time, so the KV cache under test (its quantization, a press's eviction) is what the
continuation attends to. The logits row predicting continuation token i is saved: the prefill's
last row, then the rows of the first C-1 fed tokens -> ITEM_ID.npy float32 [C, vocab]. Retrieval
items: greedy generation of max_new_tokens tokens (EOS ignored) -> generated.jsonl.
"""
import argparse
import contextlib
import json
import os

import numpy as np
import torch
from transformers import AutoModelForCausalLM, DynamicCache


def read_items(path):
    with open(path) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    header, items = lines[0], lines[1:]
    if header.get("format") != "kvcheck-items":
        raise SystemExit(f"{path}: not a kvcheck items file")
    return header, items


def make_cache(args, model):
    if args.cache == "dynamic":
        return DynamicCache()
    from transformers import QuantizedCacheConfig, QuantoQuantizedCache, HQQQuantizedCache  # transformers >= 4.42
    config = QuantizedCacheConfig(backend=args.backend, nbits=args.nbits, residual_length=args.residual_length,
                                  compute_dtype=model.dtype, device=model.device)
    return (QuantoQuantizedCache if args.backend == "quanto" else HQQQuantizedCache)(cache_config=config)


def press_context(args, model):
    if not args.press:
        return contextlib.nullcontext()
    import kvpress  # https://github.com/NVIDIA/kvpress
    press = {"snapkv": kvpress.SnapKVPress, "knorm": kvpress.KnormPress, "expected_attention": kvpress.ExpectedAttentionPress,
             "streaming_llm": kvpress.StreamingLLMPress}[args.press](compression_ratio=args.compression_ratio)
    return press(model)  # compresses the KV cache during the prefill


@torch.no_grad()
def text_rows(model, args, prompt_ids, continuation_ids):
    cache = make_cache(args, model)
    ids = torch.tensor([prompt_ids], device=model.device)
    with press_context(args, model):
        out = model(input_ids=ids, past_key_values=cache, use_cache=True)
    rows = [out.logits[0, -1].float().cpu().numpy()]
    cache = out.past_key_values
    for token in continuation_ids[:-1]:
        out = model(input_ids=torch.tensor([[token]], device=model.device), past_key_values=cache, use_cache=True)
        cache = out.past_key_values
        rows.append(out.logits[0, -1].float().cpu().numpy())
    return np.stack(rows).astype(np.float32)


@torch.no_grad()
def generate(model, args, prompt_ids, n):
    cache = make_cache(args, model)
    ids = torch.tensor([prompt_ids], device=model.device)
    with press_context(args, model):
        out = model(input_ids=ids, past_key_values=cache, use_cache=True)
    generated = []
    for _ in range(n):
        token = int(out.logits[0, -1].argmax())
        generated.append(token)
        out = model(input_ids=torch.tensor([[token]], device=model.device), past_key_values=out.past_key_values, use_cache=True)
    return generated


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--items", required=True)
    p.add_argument("--out", required=True, help="directory of ITEM_ID.npy and generated.jsonl")
    p.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--cache", default="dynamic", choices=["dynamic", "quantized"])
    p.add_argument("--backend", default="quanto", choices=["quanto", "hqq"])
    p.add_argument("--nbits", type=int, default=4)
    p.add_argument("--residual-length", type=int, default=0)
    p.add_argument("--press", default="", help="a kvpress press: snapkv, knorm, expected_attention, streaming_llm")
    p.add_argument("--compression-ratio", type=float, default=0.5)
    args = p.parse_args()
    model = AutoModelForCausalLM.from_pretrained(args.model, torch_dtype=getattr(torch, args.dtype)).to(args.device).eval()
    header, items = read_items(args.items)
    if model.config.vocab_size != header["vocab_size"]:
        raise SystemExit(f"{args.model}: vocab_size {model.config.vocab_size}, the items say {header['vocab_size']}")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "generated.jsonl"), "w") as gen:
        for item in items:
            if item["kind"] == "text":
                np.save(os.path.join(args.out, item["id"] + ".npy"), text_rows(model, args, item["prompt_ids"], item["continuation_ids"]))
            else:
                ids = generate(model, args, item["prompt_ids"], item["max_new_tokens"])
                gen.write(json.dumps({"id": item["id"], "generated_ids": ids}) + "\n")
    print(f"wrote {len(items)} items to {args.out}")


if __name__ == "__main__":
    main()
