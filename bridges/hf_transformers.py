#!/usr/bin/env python3
"""kvcheck bridge: run Hugging Face transformers on a kvcheck items file and write an engine output
that `kvcheck compare` reads (docs/reports.md, "Checking another engine").

Versions: the dynamic cache was run with torch 2.11 and transformers 5.x on an H100; the quantized
cache follows transformers' current API, QuantizedCache(backend=..., config=...) (4.56 and later,
5.x), and keeps the older QuantizedCacheConfig path (4.42 to 4.55); quanto needs optimum-quanto,
hqq needs hqq. kvpress 0.0.x optional. The test gate runs the argument handling, the items
reader and the output writer without torch (python/tests/test_bridges.py); the model runs belong
to the GPU machine (ci/gpu.sh).

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

# torch and transformers are imported where they are used, so that the argument handling, the
# items reader and the output writer run (and are tested) without them.


def read_items(path):
    with open(path) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    header, items = lines[0], lines[1:]
    if header.get("format") != "kvcheck-items":
        raise SystemExit(f"{path}: not a kvcheck items file")
    return header, items


def make_cache(args, model):
    import transformers
    if args.cache == "dynamic":
        return transformers.DynamicCache()
    return make_quantized_cache(transformers, args, model)


def make_quantized_cache(transformers, args, model):
    """The quantized cache of whichever API this transformers has (module passed in for the tests)."""
    import inspect
    cls = getattr(transformers, "QuantizedCache", None)
    params = inspect.signature(cls.__init__).parameters if cls is not None else {}
    if "backend" in params and "config" in params:  # 4.56 and later, 5.x: one class, layers from the config
        return cls(backend=args.backend, config=model.config, nbits=args.nbits, residual_length=args.residual_length)
    if hasattr(transformers, "QuantizedCacheConfig"):  # 4.42 to 4.55
        config = transformers.QuantizedCacheConfig(backend=args.backend, nbits=args.nbits,
                                                   residual_length=args.residual_length,
                                                   compute_dtype=model.dtype, device=model.device)
        kind = transformers.QuantoQuantizedCache if args.backend == "quanto" else transformers.HQQQuantizedCache
        return kind(cache_config=config)
    raise SystemExit(f"transformers {transformers.__version__}: no quantized KV cache API this bridge knows "
                     "(QuantizedCache(backend=, config=) or QuantizedCacheConfig)")


def press_context(args, model):
    if not args.press:
        return contextlib.nullcontext()
    import kvpress  # https://github.com/NVIDIA/kvpress
    press = {"snapkv": kvpress.SnapKVPress, "knorm": kvpress.KnormPress, "expected_attention": kvpress.ExpectedAttentionPress,
             "streaming_llm": kvpress.StreamingLLMPress}[args.press](compression_ratio=args.compression_ratio)
    return press(model)  # compresses the KV cache during the prefill


def text_rows(model, args, prompt_ids, continuation_ids):
    import torch
    with torch.no_grad():
        return _text_rows(torch, model, args, prompt_ids, continuation_ids)


def _text_rows(torch, model, args, prompt_ids, continuation_ids):
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


def generate(model, args, prompt_ids, n):
    import torch
    with torch.no_grad():
        return _generate(torch, model, args, prompt_ids, n)


def _generate(torch, model, args, prompt_ids, n):
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


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--items", required=True)
    p.add_argument("--out", required=True, help="directory of ITEM_ID.npy and generated.jsonl")
    p.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    p.add_argument("--device", default=None, help="default: cuda when available, else cpu")
    p.add_argument("--cache", default="dynamic", choices=["dynamic", "quantized"])
    p.add_argument("--backend", default="quanto", choices=["quanto", "hqq"])
    p.add_argument("--nbits", type=int, default=4, choices=[2, 4, 8])
    p.add_argument("--residual-length", type=int, default=0)
    p.add_argument("--press", default="", choices=["", "snapkv", "knorm", "expected_attention", "streaming_llm"],
                   help="a kvpress press")
    p.add_argument("--compression-ratio", type=float, default=0.5)
    args = p.parse_args(argv)
    if args.residual_length < 0:
        p.error("--residual-length must be >= 0")
    if not 0 <= args.compression_ratio < 1:
        p.error("--compression-ratio must be in [0, 1)")
    return args


def write_outputs(out_dir, items, rows_of, generated_of):
    """The engine output kvcheck compare reads: OUT/ITEM_ID.npy (float32 [C, vocab]) per text item,
    OUT/generated.jsonl ({"id", "generated_ids"}) for the others. rows_of(item) and generated_of(item)
    run the engine."""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "generated.jsonl"), "w") as gen:
        for item in items:
            if item["kind"] == "text":
                rows = np.asarray(rows_of(item), dtype=np.float32)
                if rows.shape[0] != len(item["continuation_ids"]):
                    raise SystemExit(f"item {item['id']}: {rows.shape[0]} logits rows for "
                                     f"{len(item['continuation_ids'])} continuation tokens")
                np.save(os.path.join(out_dir, item["id"] + ".npy"), rows)
            else:
                ids = [int(t) for t in generated_of(item)]
                gen.write(json.dumps({"id": item["id"], "generated_ids": ids}) + "\n")


def main(argv=None):
    args = parse_args(argv)
    header, items = read_items(args.items)
    import torch
    from transformers import AutoModelForCausalLM
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    model = AutoModelForCausalLM.from_pretrained(args.model, torch_dtype=getattr(torch, args.dtype)).to(device).eval()
    if model.config.vocab_size != header["vocab_size"]:
        raise SystemExit(f"{args.model}: vocab_size {model.config.vocab_size}, the items say {header['vocab_size']}")
    write_outputs(args.out, items,
                  lambda item: text_rows(model, args, item["prompt_ids"], item["continuation_ids"]),
                  lambda item: generate(model, args, item["prompt_ids"], item["max_new_tokens"]))
    print(f"wrote {len(items)} items to {args.out}")


if __name__ == "__main__":
    main()
