#!/usr/bin/env python3
"""Known answers for SmolLM2-135M-Instruct's chat template and a greedy continuation, made with
independent implementations: jinja2 (rendering as transformers' apply_chat_template does) and
llama.cpp through llama-cpp-python (pinned in datasets/tokenizers/requirements.txt).

Writes, next to this file:
  smollm2-chat-template.jinja  the GGUF's tokenizer.chat_template, byte for byte (read with gguf);
  smollm2-chat.jsonl           one conversation a line: {"messages", "add_generation_prompt",
                               "text": the rendering, "ids": llama.cpp's
                               tokenize(utf8(text), add_special=false, parse_special=true)};
  smollm2-greedy.json          greedy generation (16 new tokens at most, n_ctx 512) for one prompt,
                               with the llama-cpp-python version and the calls used.

Rendering: jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
extensions=[loopcontrols]) with transformers' tojson filter and raise_exception global, rendered
with messages, add_generation_prompt and the GGUF's bos_token / eos_token strings.

Usage: python3 datasets/chat/make_chat_expected.py [--model PATH] [--no-greedy]
"""
import argparse
import json
import os

import jinja2
import jinja2.ext
import jinja2.sandbox
import llama_cpp
from gguf import GGUFReader

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DEFAULT_MODEL = os.path.join(ROOT, "datasets/models/fetched/SmolLM2-135M-Instruct.Q4_1.gguf")

CONVERSATIONS = [
    ([{"role": "user", "content": "What is the capital of France?"}], True),
    ([{"role": "user", "content": "What is the capital of France?"}], False),
    ([{"role": "system", "content": "You are a terse assistant."},
      {"role": "user", "content": "Name three primes."}], True),
    ([{"role": "user", "content": "Hi!"},
      {"role": "assistant", "content": "Hello! How can I help you today?"},
      {"role": "user", "content": "Tell me a joke."}], True),
    ([{"role": "system", "content": "Answer in French."},
      {"role": "user", "content": "Good morning"},
      {"role": "assistant", "content": "Bonjour"}], False),
    ([{"role": "user", "content": ""}], True),
    ([{"role": "system", "content": ""}, {"role": "user", "content": ""}], False),
    ([{"role": "user", "content": "line one\nline two\n\n  indented\tand tabbed\n"}], True),
    ([{"role": "user", "content": "Ünïcödé: 你好，世界 — مرحبا — नमस्ते 😀👍🏽 e\u0301"}], True),
    ([{"role": "user", "content": "Quote this: <|im_start|>system\nignore<|im_end|>\n<|endoftext|>"}], True),
    ([{"role": "user", "content": "{{ not a template }} {% raw %}"}], True),
]
GREEDY_PROMPT = [{"role": "user", "content": "What is the capital of France?"}]
MAX_NEW = 16
N_CTX = 512


def dump(obj):
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def compile_template(source):
    """As transformers.utils.chat_template_utils._compile_jinja_template does (less its
    {% generation %} tracker, which this template does not use)."""
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env.from_string(source)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--no-greedy", action="store_true", help="skip the greedy generation")
    args = ap.parse_args()

    reader = GGUFReader(args.model)
    source = reader.fields["tokenizer.chat_template"].contents()
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    bos = tokens[reader.fields["tokenizer.ggml.bos_token_id"].contents()]
    eos = tokens[reader.fields["tokenizer.ggml.eos_token_id"].contents()]
    with open(os.path.join(HERE, "smollm2-chat-template.jinja"), "w", encoding="utf-8", newline="") as f:
        f.write(source)
    template = compile_template(source)

    def render(messages, add_generation_prompt):
        return template.render(messages=messages, add_generation_prompt=add_generation_prompt,
                               bos_token=bos, eos_token=eos)

    vocab = llama_cpp.Llama(model_path=args.model, vocab_only=True, verbose=False)
    lines = []
    for messages, agp in CONVERSATIONS:
        text = render(messages, agp)
        ids = vocab.tokenize(text.encode("utf-8"), add_bos=False, special=True)
        lines.append(dump({"messages": messages, "add_generation_prompt": agp, "text": text, "ids": ids}))
    with open(os.path.join(HERE, "smollm2-chat.jsonl"), "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(lines) + "\n")
    print(f"{len(lines)} conversations -> smollm2-chat.jsonl")
    if args.no_greedy:
        return

    # Greedy continuation, three ways that must agree: (1) llama.cpp evaluates the prompt in one
    # batch, then one token at a time, and the argmax of each step's logits is taken here, with
    # the top 3 logits kept (a small margin means a near tie that other kernels may flip);
    # (2) Llama.generate with llama.cpp's sampler chain at top_k=1; (3) create_completion.
    # Stops at 16 tokens or at an end-of-generation token (not included).
    import numpy as np
    prompt_text = render(GREEDY_PROMPT, True)
    prompt_ids = vocab.tokenize(prompt_text.encode("utf-8"), add_bos=False, special=True)
    llm = llama_cpp.Llama(model_path=args.model, n_ctx=N_CTX, n_threads=2, n_batch=N_CTX, seed=0, verbose=False)
    lvocab = llama_cpp.llama_model_get_vocab(llm.model)
    llm.reset()
    llm.eval(prompt_ids)
    generated, steps = [], []
    while len(generated) < MAX_NEW:
        row = llama_cpp.llama_get_logits_ith(llm.ctx, -1)  # the last evaluated token's logits
        logits = np.ctypeslib.as_array(row, shape=(llm.n_vocab(),)).astype(np.float64)
        top = [int(t) for t in np.argsort(-logits, kind="stable")[:3]]
        tok = top[0]
        steps.append({"top3_ids": top, "top3_logits": [round(float(logits[t]), 4) for t in top],
                      "margin": round(float(logits[top[0]] - logits[top[1]]), 4)})
        if llama_cpp.llama_vocab_is_eog(lvocab, tok):
            break
        generated.append(tok)
        llm.eval([tok])
    text = llm.detokenize(generated).decode("utf-8", errors="replace")
    sampled = []
    for tok in llm.generate(prompt_ids, top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0, reset=True):
        if llama_cpp.llama_vocab_is_eog(lvocab, tok) or len(sampled) == MAX_NEW:
            break
        sampled.append(tok)
    completion = llm.create_completion(prompt=prompt_ids, max_tokens=MAX_NEW, temperature=0.0, top_k=1,
                                       top_p=1.0, min_p=0.0, repeat_penalty=1.0)
    ctext = completion["choices"][0]["text"]
    if sampled != generated or ctext != text:
        raise SystemExit(f"greedy disagreement: argmax {generated} {text!r}, generate {sampled}, "
                         f"create_completion {ctext!r}")
    out = {
        "model": os.path.basename(args.model),
        "llama_cpp_python": llama_cpp.__version__,
        "messages": GREEDY_PROMPT,
        "add_generation_prompt": True,
        "prompt_text": prompt_text,
        "prompt_ids": prompt_ids,
        "generated_ids": generated,
        "generated_text": text,
        "stopped_at_eog": len(generated) < MAX_NEW,
        "steps": steps,
        "min_margin": min(s["margin"] for s in steps),
        "calls": [
            f"llama_cpp.Llama(model_path=..., n_ctx={N_CTX}, n_threads=2, n_batch={N_CTX}, seed=0, verbose=False)",
            "Llama.reset(); Llama.eval(prompt_ids); then per step: argmax of llama_get_logits_ith(ctx, -1) "
            "(top 3 and margin recorded in steps), Llama.eval([token])",
            "Llama.generate(prompt_ids, top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0, "
            "reset=True): same ids",
            f"Llama.create_completion(prompt=prompt_ids, max_tokens={MAX_NEW}, temperature=0.0, top_k=1, "
            f"top_p=1.0, min_p=0.0, repeat_penalty=1.0): same text, finish_reason "
            f"{completion['choices'][0]['finish_reason']!r}",
        ],
        "note": "CPU run, 2 threads, Q4_1 weights. The prompt is evaluated in one batch and each new "
                "token alone; steps[i].margin is the logit gap between the first and second choice: "
                "where it is small another implementation (or llama.cpp evaluating the whole sequence "
                "in one batch) may pick the other token and diverge from there, so hold a "
                "reimplementation to these ids only up to the first near tie.",
    }
    with open(os.path.join(HERE, "smollm2-greedy.json"), "w", encoding="utf-8", newline="\n") as f:
        f.write(json.dumps(out, ensure_ascii=False, indent=2) + "\n")
    print(f"greedy: {generated} {text!r} (min margin {out['min_margin']})")


if __name__ == "__main__":
    main()
