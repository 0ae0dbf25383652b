#!/usr/bin/env python3
"""Trains kvcheck's embedded default model: a small Llama-family transformer (RMSNorm, RoPE,
SwiGLU, grouped-query attention) on the Brown corpus mixed with synthetic long-context retrieval
tasks, and writes a Hugging Face-format checkpoint (config.json, model.safetensors,
tokenizer.model) that kvcheck's reference loader reads directly.

Offline tooling, never part of the test gate. Needs Debian's python3-torch, python3-numpy and
python3-sentencepiece; with OpenBLAS (libopenblas0-pthread) training on the CPU is ~8x faster
than with the reference BLAS. Seeds are fixed: data order, task generation and initialisation are
reproducible; multi-threaded float reductions may still differ in the last bits between machines.

Usage (from the repository root, after prepare_corpus.sh and train_tokenizer.sh):

    /usr/bin/python3 datasets/train/train.py --out datasets/models/kvcheck-tiny --steps 2400

Every --eval-every steps it prints held-out loss and teacher-forced retrieval exact match and
rewrites the checkpoint in --out, so an interrupted run still leaves a usable model.
With --device cuda (a GPU machine's PyTorch) the same float32 computation runs on the GPU; the
batches are still built on the CPU (about 20 ms for 64 rows of 512 tokens).
"""
import argparse
import json
import math
import os
import random
import struct
import sys
import time

import numpy as np
import sentencepiece as spm
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "synthetic"))
import retrieval_tasks  # noqa: E402


# ---------------------------------------------------------------------------------------------
# Model (the same computation as reference/model.h, in float32)


class RMSNorm(torch.nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Block(torch.nn.Module):
    def __init__(self, a):
        super().__init__()
        d, hd = a.d_model, a.head_dim
        self.n_heads, self.n_kv, self.hd = a.heads, a.kv_heads, hd
        self.input_layernorm = RMSNorm(d, a.rms_eps)
        self.q_proj = torch.nn.Linear(d, a.heads * hd, bias=False)
        self.k_proj = torch.nn.Linear(d, a.kv_heads * hd, bias=False)
        self.v_proj = torch.nn.Linear(d, a.kv_heads * hd, bias=False)
        self.o_proj = torch.nn.Linear(a.heads * hd, d, bias=False)
        self.post_attention_layernorm = RMSNorm(d, a.rms_eps)
        self.gate_proj = torch.nn.Linear(d, a.ffn, bias=False)
        self.up_proj = torch.nn.Linear(d, a.ffn, bias=False)
        self.down_proj = torch.nn.Linear(a.ffn, d, bias=False)

    def forward(self, x, cos, sin, mask):
        b, t, _ = x.shape
        n = self.input_layernorm(x)
        q = self.q_proj(n).view(b, t, self.n_heads, self.hd).transpose(1, 2)
        k = self.k_proj(n).view(b, t, self.n_kv, self.hd).transpose(1, 2)
        v = self.v_proj(n).view(b, t, self.n_kv, self.hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.n_heads // self.n_kv
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        att = torch.softmax((q @ k.transpose(-1, -2)) / math.sqrt(self.hd) + mask, dim=-1)
        self.first_token_mass = att[..., 0]  # [batch, heads, queries]: read by --sink-weight and validate()
        y = att @ v
        x = x + self.o_proj(y.transpose(1, 2).reshape(b, t, -1))
        n = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(n)) * self.up_proj(n))


class TinyLlama(torch.nn.Module):
    def __init__(self, a):
        super().__init__()
        self.a = a
        self.embed_tokens = torch.nn.Embedding(a.vocab, a.d_model)
        self.layers = torch.nn.ModuleList(Block(a) for _ in range(a.layers))
        self.norm = RMSNorm(a.d_model, a.rms_eps)
        inv_freq = 1.0 / (a.rope_theta ** (torch.arange(0, a.head_dim, 2).float() / a.head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02
                if name.endswith("o_proj.weight") or name.endswith("down_proj.weight"):
                    std = 0.02 / math.sqrt(2 * a.layers)
                torch.nn.init.normal_(p, mean=0.0, std=std)

    def forward(self, ids):
        t = ids.shape[1]
        pos = torch.arange(t, dtype=torch.float32, device=ids.device)
        freqs = torch.outer(pos, self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[None, None], emb.sin()[None, None]
        mask = torch.full((t, t), float("-inf"), device=ids.device).triu(1)
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        return self.norm(x) @ self.embed_tokens.weight.T  # tied embeddings


# ---------------------------------------------------------------------------------------------
# Checkpoint export (HF names; the tied lm_head is not stored)


def hf_tensors(model):
    out = {"model.embed_tokens.weight": model.embed_tokens.weight, "model.norm.weight": model.norm.weight}
    for i, l in enumerate(model.layers):
        p = f"model.layers.{i}."
        out[p + "input_layernorm.weight"] = l.input_layernorm.weight
        out[p + "post_attention_layernorm.weight"] = l.post_attention_layernorm.weight
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            out[p + f"self_attn.{proj}.weight"] = getattr(l, proj).weight
        for proj in ("gate_proj", "up_proj", "down_proj"):
            out[p + f"mlp.{proj}.weight"] = getattr(l, proj).weight
    return {k: v.detach().to("cpu", torch.float32).contiguous().numpy() for k, v in out.items()}


def load_hf(model, path):
    """Loads float32 weights written by export() (warm start of a second training phase)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    want = hf_tensors(model)
    params = dict(model.named_parameters())
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if name not in want or info["dtype"] != "F32" or list(want[name].shape) != info["shape"]:
            raise SystemExit(f"{path}: {name}: does not match the model ({info['dtype']} {info['shape']})")
        b, e = info["data_offsets"]
        arr = np.frombuffer(data[8 + n + b:8 + n + e], dtype="<f4").reshape(info["shape"])
        key = name.replace("model.", "", 1).replace("self_attn.", "").replace("mlp.", "")
        with torch.no_grad():
            params[key].copy_(torch.from_numpy(arr.copy()))


def write_safetensors(path, tensors, metadata):
    header, offset, blobs = {"__metadata__": metadata}, 0, []
    for name in sorted(tensors):
        raw = tensors[name].astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def hf_config(a):
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": a.d_model,
        "intermediate_size": a.ffn,
        "num_hidden_layers": a.layers,
        "num_attention_heads": a.heads,
        "num_key_value_heads": a.kv_heads,
        "head_dim": a.head_dim,
        "vocab_size": a.vocab,
        "max_position_embeddings": a.ctx,
        "rms_norm_eps": a.rms_eps,
        "rope_theta": a.rope_theta,
        "tie_word_embeddings": True,
        "hidden_act": "silu",
        "attention_bias": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "float32",
    }


def export(model, a, step, history):
    os.makedirs(a.out, exist_ok=True)
    meta = {"format": "pt", "kvcheck_training_step": str(step), "kvcheck_seed": str(a.seed)}
    write_safetensors(os.path.join(a.out, "model.safetensors"), hf_tensors(model), meta)
    tmp = os.path.join(a.out, "config.json.tmp")
    with open(tmp, "w") as f:
        json.dump(hf_config(a), f, indent=2)
        f.write("\n")
    os.replace(tmp, os.path.join(a.out, "config.json"))
    with open(os.path.join(a.out, "training_log.json"), "w") as f:
        json.dump({"args": {k: v for k, v in vars(a).items()}, "history": history}, f, indent=1)
        f.write("\n")


# ---------------------------------------------------------------------------------------------
# Data


class Data:
    def __init__(self, a, sp):
        self.a, self.sp = a, sp
        train_docs = [json.loads(l)["text"] for l in open(a.train_docs, encoding="utf-8")]
        held_docs = [json.loads(l)["text"] for l in open(a.heldout, encoding="utf-8")]
        self.stream = self.token_stream(train_docs)
        self.held = self.token_stream(held_docs)
        self.filler = retrieval_tasks.Filler(train_docs, sp)
        self.held_filler = retrieval_tasks.Filler(held_docs, sp)
        self.words = retrieval_tasks.key_words(train_docs)
        self.rng = random.Random(a.seed)
        print(f"data: {len(self.stream)} training tokens, {len(self.held)} held-out tokens, "
              f"{len(self.words)} key words", flush=True)

    def token_stream(self, docs):
        """The documents' tokens joined as <s> doc </s> <s> doc </s> ..."""
        ids = []
        for doc in docs:
            ids.append(1)
            ids.extend(self.sp.encode(doc))
            ids.append(2)
        return np.array(ids, dtype=np.int64)

    def natural(self, rng, n, stream=None):
        s = self.stream if stream is None else stream
        start = rng.randrange(len(s) - n)
        return list(s[start:start + n])

    def task_ids(self, rng, kind, length, filler):
        prompt, answer = retrieval_tasks.make_task(kind, rng, self.sp, filler, self.words, length)
        p = [1] + self.sp.encode(prompt)
        ans = self.sp.encode(answer)
        return p, ans

    def batch(self):
        a, rng = self.a, self.rng
        n = a.ctx + 1
        rows, weights = [], []
        for _ in range(a.batch):
            w = [1.0] * (n - 1)
            if rng.random() < a.task_share:
                kind = rng.choice(a.task_kinds)
                length = rng.randint(a.min_task_len, a.ctx)
                p, ans = self.task_ids(rng, kind, length, self.filler)
                ids = (p + ans + [2])[:n]
                for j in range(len(p), min(len(p) + len(ans), n)):
                    w[j - 1] = a.answer_weight  # target index j is predicted at position j - 1
                if len(ids) < n:
                    ids += self.natural(rng, n - len(ids))
            elif rng.random() < a.repeat_share / max(1e-9, 1.0 - a.task_share):
                # A span of natural text seen twice, some text apart: every token of the second
                # copy is predictable only by looking back (induction), the mechanism every
                # retrieval task needs, with hundreds of loss tokens per row instead of five.
                # With --repeat-random the span is random tokens (no n-gram shortcut, only copying
                # helps) repeated until the row is full.
                span_len = rng.randint(8, a.ctx // 3)
                if a.repeat_random:
                    span = [rng.randrange(3, a.repeat_vocab or a.vocab) for _ in range(span_len)]
                    ids = [1]
                    while len(ids) < n:
                        ids += span
                    ids = ids[:n]
                else:
                    gap = rng.randint(0, n - 2 * span_len - 1)
                    span = self.natural(rng, span_len)
                    ids = (span + self.natural(rng, gap) + span)[:n]
                    ids += self.natural(rng, n - len(ids))
            else:
                ids = self.natural(rng, n)
            if a.bos_first and ids[0] != 1:
                # Every row starts with <s>, as every evaluated prompt does: a fixed first token
                # that heads can park attention on (an attention sink).
                ids = [1] + ids[:n - 1]
            rows.append(ids)
            weights.append(w)
        t = torch.tensor(rows, dtype=torch.long)
        return t[:, :-1], t[:, 1:], torch.tensor(weights)


# ---------------------------------------------------------------------------------------------
# Validation


@torch.no_grad()
def validate(model, data, a):
    model.eval()
    rng = random.Random(12345)
    losses = []
    for _ in range(a.val_windows):
        ids = torch.tensor([data.natural(rng, a.ctx + 1, data.held)], device=a.device)
        logits = model(ids[:, :-1])
        losses.append(F.cross_entropy(logits[0], ids[0, 1:]).item())
    correct = {}
    for kind in retrieval_tasks.TASKS:
        for length in (128, 256, 384, a.ctx):
            ok = 0
            for _ in range(a.val_items):
                p, ans = data.task_ids(rng, kind, length, data.held_filler)
                ids = torch.tensor([p + ans], device=a.device)
                pred = model(ids[:, :-1])[0].argmax(-1)
                ok += int(all(pred[len(p) - 1 + j].item() == ans[j] for j in range(len(ans))))
            correct[f"{kind}@{length}"] = ok / a.val_items
    model.train()
    return float(np.mean(losses)), correct, first_token_mass(model, data, a)


@torch.no_grad()
def first_token_mass(model, data, a):
    """Mean attention on <s> over the last quarter of the queries of held-out windows that start
    with <s>, per layer and KV head (the group's query heads averaged), as `kvcheck eval --task
    attention` measures it."""
    rng = random.Random(54321)
    rows = [[1] + data.natural(rng, a.ctx - 1, data.held) for _ in range(a.val_windows)]
    model(torch.tensor(rows, device=a.device))
    last = a.ctx // 4
    out = []
    for l in model.layers:
        m = l.first_token_mass[:, :, -last:].mean(dim=(0, 2))  # per query head
        out.append([round(x, 4) for x in m.view(l.n_kv, -1).mean(-1).tolist()])
    return out


# ---------------------------------------------------------------------------------------------


def sink_term(model, a):
    """The sink-shaping term of --sink-weight, in nats: how far each query head's attention on the
    first token (<s>) falls short of --sink-target, max(0, log(target) - log(p0)), averaged over
    the queries after the first and over the heads of the layers from --sink-from-layer on. Every
    head is pushed by the same amount, so a head with nothing better to attend to parks its
    attention on <s>, while one whose content lowers the language-model loss more than the term
    costs keeps attending to it: the model, not the term, decides which heads become sinks."""
    terms = []
    for l in model.layers[a.sink_from_layer:]:
        p0 = l.first_token_mass[:, :, 1:]  # [batch, heads, queries]
        terms.append(torch.relu(math.log(a.sink_target) - torch.log(p0 + 1e-9)).mean())
    return torch.stack(terms).mean()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="datasets/models/kvcheck-tiny")
    ap.add_argument("--tokenizer", default=None, help="default: OUT/tokenizer.model")
    ap.add_argument("--train-docs", default="build/corpus/brown_train_docs.jsonl")
    ap.add_argument("--heldout", default="datasets/eval/heldout.jsonl")
    ap.add_argument("--steps", type=int, default=2400)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--d-model", type=int, default=192)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=32)
    ap.add_argument("--ffn", type=int, default=512)
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    ap.add_argument("--rms-eps", type=float, default=1e-5)
    ap.add_argument("--task-share", type=float, default=0.5)
    ap.add_argument("--repeat-share", type=float, default=0.0,
                    help="share of rows holding a repeated span of natural text")
    ap.add_argument("--repeat-random", action="store_true",
                    help="repeated spans are random tokens, repeated to the end of the row")
    ap.add_argument("--repeat-vocab", type=int, default=0,
                    help="random spans use token ids below this (0: the whole vocabulary)")
    ap.add_argument("--task-kinds", default=",".join(retrieval_tasks.TASKS),
                    help="comma-separated task kinds to draw from; repeat a kind to weight it (kv,kv,needle)")
    ap.add_argument("--bos-first", action="store_true",
                    help="start every row with <s> (natural-text windows too), as evaluated prompts do")
    ap.add_argument("--init-from", default=None, help="start from the weights in this checkpoint")
    ap.add_argument("--min-task-len", type=int, default=64)
    ap.add_argument("--answer-weight", type=float, default=10.0)
    ap.add_argument("--eval-every", type=int, default=200)
    ap.add_argument("--val-windows", type=int, default=8)
    ap.add_argument("--val-items", type=int, default=6)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="cpu, or cuda to train on a GPU (same float32 computation)")
    ap.add_argument("--seed", type=int, default=20261122)
    ap.add_argument("--sink-weight", type=float, default=0.0,
                    help="weight of the sink-shaping term (see sink_term); 0: off")
    ap.add_argument("--sink-target", type=float, default=0.75,
                    help="attention on <s> above which a query is not pushed further")
    ap.add_argument("--sink-from-layer", type=int, default=1,
                    help="first layer the sink-shaping term applies to")
    a = ap.parse_args()

    a.task_kinds = [k for k in a.task_kinds.split(",") if k]
    unknown = sorted(set(a.task_kinds) - set(retrieval_tasks.TASKS))
    if unknown or not a.task_kinds:
        ap.error(f"--task-kinds: unknown kind(s) {unknown}; known: {retrieval_tasks.TASKS}")
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    sp = spm.SentencePieceProcessor(model_file=a.tokenizer or os.path.join(a.out, "tokenizer.model"))
    a.vocab = sp.get_piece_size()
    data = Data(a, sp)
    model = TinyLlama(a)
    if a.init_from:
        load_hf(model, os.path.join(a.init_from, "model.safetensors"))
        print(f"initialised from {a.init_from}", flush=True)
    model.to(a.device)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params} parameters ({n_params * 4 / 2**20:.2f} MiB as float32)", flush=True)

    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=a.lr, betas=(0.9, 0.95))

    def lr_at(step):
        if step < a.warmup:
            return a.lr * (step + 1) / a.warmup
        frac = (step - a.warmup) / max(1, a.steps - a.warmup)
        return a.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))

    history, start, tokens = [], time.time(), 0
    for step in range(a.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        x, y, w = (t.to(a.device) for t in data.batch())
        logits = model(x)
        loss_tok = F.cross_entropy(logits.reshape(-1, a.vocab), y.reshape(-1), reduction="none")
        loss = (loss_tok * w.reshape(-1)).sum() / w.sum()
        if a.sink_weight > 0:
            loss = loss + a.sink_weight * sink_term(model, a)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        tokens += x.numel()
        if step % 20 == 0:
            el = time.time() - start
            print(f"step {step} loss {loss.item():.3f} lr {lr_at(step):.2e} {tokens / el:.0f} tok/s "
                  f"elapsed {el / 60:.1f} min", flush=True)
        if (step + 1) % a.eval_every == 0 or step + 1 == a.steps:
            val_loss, acc, sink = validate(model, data, a)
            el = time.time() - start
            rec = {"step": step + 1, "elapsed_s": round(el), "train_tokens": tokens,
                   "heldout_loss": round(val_loss, 4), "heldout_ppl": round(math.exp(val_loss), 2),
                   "retrieval": acc, "first_token_mass": sink}
            history.append(rec)
            print("eval " + json.dumps(rec), flush=True)
            export(model, a, step + 1, history)
    print(f"done: {a.steps} steps, {tokens} tokens, {(time.time() - start) / 60:.1f} min", flush=True)


if __name__ == "__main__":
    main()
