#!/usr/bin/env python3
"""Writes the seed corpus of the gguf fuzz target (datasets/fuzz/gguf/): small GGUF files written
by gguf-py (datasets/gguf/requirements.txt pins it), valid and broken: a two-layer llama model
with a byte-level tokenizer, the same with every metadata value type, quantized tensors of each
readable type, and truncated / mis-versioned copies. Deterministic.
Run from the repository root: python3 properties/fuzz/make_gguf_seeds.py"""
import os

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q

OUT = os.path.join("datasets", "fuzz", "gguf")


def byte_tokens():
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    tokens, extra = [], 0
    for b in range(256):
        if b in printable:
            tokens.append(chr(b))
        else:
            tokens.append(chr(256 + extra))
            extra += 1
    return tokens + ["<s>", "</s>", "he", "hel"]


def model(path, value_types=False, quant=None):
    rng = np.random.default_rng(1)
    w = gguf.GGUFWriter(path, "llama")
    hidden, heads, kv, d, ff, layers = 32, 4, 2, 8, 64, 2
    tokens = byte_tokens()
    vocab = len(tokens)
    w.add_context_length(64)
    w.add_embedding_length(hidden)
    w.add_block_count(layers)
    w.add_feed_forward_length(ff)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_vocab_size(vocab)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_types([1] * 256 + [3, 3, 1, 1])
    w.add_token_merges(["h e", "he l"])
    w.add_bos_token_id(256)
    w.add_eos_token_id(257)
    w.add_add_bos_token(True)
    w.add_chat_template("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}")
    if value_types:
        w.add_uint8("t.u8", 7)
        w.add_int8("t.i8", -7)
        w.add_uint16("t.u16", 700)
        w.add_int16("t.i16", -700)
        w.add_int32("t.i32", -70000)
        w.add_float64("t.f64", 0.1)
        w.add_uint64("t.u64", 2**40)
        w.add_int64("t.i64", -(2**40))
        w.add_bool("t.bool", True)
        w.add_array("t.nested", [[1, 2], [3]])

    def tensor(name, shape):
        x = (rng.standard_normal(shape) * 0.2).astype(np.float32)
        if quant is not None and len(shape) == 2 and shape[-1] % 32 == 0:
            w.add_tensor(name, gguf.quants.quantize(x, quant), raw_dtype=quant)
        else:
            w.add_tensor(name, x)

    tensor("token_embd.weight", (vocab, hidden))
    for l in range(layers):
        tensor(f"blk.{l}.attn_norm.weight", (hidden,))
        tensor(f"blk.{l}.ffn_norm.weight", (hidden,))
        tensor(f"blk.{l}.attn_q.weight", (heads * d, hidden))
        tensor(f"blk.{l}.attn_k.weight", (kv * d, hidden))
        tensor(f"blk.{l}.attn_v.weight", (kv * d, hidden))
        tensor(f"blk.{l}.attn_output.weight", (hidden, heads * d))
        tensor(f"blk.{l}.ffn_gate.weight", (ff, hidden))
        tensor(f"blk.{l}.ffn_up.weight", (ff, hidden))
        tensor(f"blk.{l}.ffn_down.weight", (hidden, ff))
    tensor("output_norm.weight", (hidden,))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    os.makedirs(OUT, exist_ok=True)
    files = {
        "tiny_llama_f32.gguf": dict(),
        "value_types.gguf": dict(value_types=True),
        "tiny_llama_q8_0.gguf": dict(quant=Q.Q8_0),
        "tiny_llama_q4_1.gguf": dict(quant=Q.Q4_1),
        "tiny_llama_bf16.gguf": dict(quant=Q.BF16),
    }
    for name, kw in files.items():
        model(os.path.join(OUT, name), **kw)
    data = open(os.path.join(OUT, "tiny_llama_q8_0.gguf"), "rb").read()
    open(os.path.join(OUT, "truncated.gguf"), "wb").write(data[: len(data) // 2])
    open(os.path.join(OUT, "version1.gguf"), "wb").write(data[:4] + b"\x01\x00\x00\x00" + data[8:200])
    open(os.path.join(OUT, "header_only.gguf"), "wb").write(data[:24])


if __name__ == "__main__":
    main()
