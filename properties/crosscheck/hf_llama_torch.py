#!/usr/bin/env python3
"""Cross-check kvcheck's reference transformer against an independent PyTorch implementation.

The PyTorch forward below follows the Hugging Face transformers Llama/Mistral/Qwen2/Qwen3 modelling
code (float32 throughout, rotate-half RoPE, llama3 rope scaling, repeat_kv for GQA, causal softmax,
Qwen3's q_norm / k_norm over each head before RoPE), written separately from the C++ reference. It reads the same checkpoint directory, and compares
its logits with the .npy that `kvcheck generate --dump-logits` wrote.

Offline tooling, not part of the test gate (it needs Debian's python3-torch, which
ci/install-deps.sh does not install):

    apt-get install python3-torch
    build/bin/kvcheck make-model --random ... --out M
    build/bin/kvcheck generate --model M --ids 1,2,3 --max-new-tokens 0 --dump-logits L.npy
    python3 properties/crosscheck/hf_llama_torch.py --model M --ids 1,2,3 --logits L.npy

Exit status 0 when the logits agree to NMSE < 1e-10 (float32 vs double accumulation), else 1.
"""
import argparse
import json
import math
import struct
import sys

import numpy as np
import torch


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = data[base + begin : base + end]
        shape = info["shape"]
        dtype = info["dtype"]
        if dtype == "F32":
            arr = np.frombuffer(raw, dtype="<f4").copy()
        elif dtype == "F16":
            arr = np.frombuffer(raw, dtype="<f2").astype(np.float32)
        elif dtype == "BF16":
            arr = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise SystemExit(f"{path}: {name}: unsupported dtype {dtype}")
        out[name] = torch.from_numpy(arr.reshape(shape))
    return out


def load_weights(model_dir):
    import os

    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
        weights = {}
        for shard in shards:
            weights.update(read_safetensors(os.path.join(model_dir, shard)))
        return weights
    return read_safetensors(os.path.join(model_dir, "model.safetensors"))


def rope_inv_freq(cfg, head_dim):
    base = cfg.get("rope_theta", 10000.0)
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    scaling = cfg.get("rope_scaling")
    if scaling and scaling.get("rope_type", scaling.get("type")) == "llama3":
        factor = scaling["factor"]
        low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
        old = scaling["original_max_position_embeddings"]
        low_wavelen, high_wavelen = old / low, old / high
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
        inv_freq = torch.where(medium, smoothed, scaled)
    return inv_freq


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def rms_norm(x, w, eps):
    variance = x.pow(2).mean(-1, keepdim=True)
    return w * (x * torch.rsqrt(variance + eps))


def forward(cfg, w, ids):
    h_size = cfg["hidden_size"]
    n_heads = cfg["num_attention_heads"]
    n_kv = cfg.get("num_key_value_heads") or n_heads
    qwen3 = cfg["model_type"] == "qwen3"
    # Qwen3Config's head_dim defaults to 128; the others derive it from the hidden size.
    d = cfg.get("head_dim") or (128 if qwen3 else h_size // n_heads)
    eps = cfg.get("rms_norm_eps", 1e-6)
    window = cfg.get("sliding_window") if cfg["model_type"] == "mistral" else None
    t = len(ids)
    x = w["model.embed_tokens.weight"][torch.tensor(ids)]
    pos = torch.arange(t).float()
    freqs = torch.outer(pos, rope_inv_freq(cfg, d))
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    mask = torch.full((t, t), float("-inf")).triu(1)
    if window:
        mask = mask + torch.full((t, t), float("-inf")).tril(-window)
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        n = rms_norm(x, w[p + "input_layernorm.weight"], eps)

        def lin(name, inp):
            y = inp @ w[p + name + ".weight"].T
            if p + name + ".bias" in w:
                y = y + w[p + name + ".bias"]
            return y

        q = lin("self_attn.q_proj", n).view(t, n_heads, d)
        k = lin("self_attn.k_proj", n).view(t, n_kv, d)
        if qwen3:  # Qwen3Attention: q_norm / k_norm on the head dimension, before RoPE
            q = rms_norm(q, w[p + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, w[p + "self_attn.k_norm.weight"], eps)
        q = q.transpose(0, 1)
        k = k.transpose(0, 1)
        v = lin("self_attn.v_proj", n).view(t, n_kv, d).transpose(0, 1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(n_heads // n_kv, dim=0)
        v = v.repeat_interleave(n_heads // n_kv, dim=0)
        scores = q @ k.transpose(1, 2) / math.sqrt(d) + mask
        attn = torch.softmax(scores, dim=-1) @ v
        x = x + lin("self_attn.o_proj", attn.transpose(0, 1).reshape(t, n_heads * d))
        n = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        act = torch.nn.functional.silu(lin("mlp.gate_proj", n)) * lin("mlp.up_proj", n)
        x = x + lin("mlp.down_proj", act)
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else w["lm_head.weight"]
    return x @ head.T


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--ids", required=True, help="comma-separated token ids (the whole sequence)")
    ap.add_argument("--logits", required=True, help=".npy written by kvcheck generate --dump-logits")
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    with open(f"{args.model}/config.json") as f:
        cfg = json.load(f)
    ids = [int(x) for x in args.ids.split(",")]
    ours = torch.from_numpy(np.load(args.logits)).double()
    theirs = forward(cfg, load_weights(args.model), ids).double()
    if ours.shape != theirs.shape:
        print(f"shape mismatch: kvcheck {tuple(ours.shape)} vs torch {tuple(theirs.shape)}")
        return 1
    nmse = ((ours - theirs) ** 2).sum().item() / (theirs**2).sum().item()
    max_abs = (ours - theirs).abs().max().item()
    same_top1 = (ours.argmax(-1) == theirs.argmax(-1)).float().mean().item()
    print(f"{args.model}: {tuple(ours.shape)} nmse {nmse:.3e} max|diff| {max_abs:.3e} top-1 agreement {same_top1:.4f}")
    return 0 if nmse < 1e-10 else 1


if __name__ == "__main__":
    sys.exit(main())
