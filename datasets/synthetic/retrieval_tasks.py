#!/usr/bin/env python3
"""Seeded generators of synthetic long-context retrieval tasks.

Each task is a prompt whose answer is a number stated once, far away, in the context; a model
can only answer by attending to those few tokens. Three kinds:

  passkey  a pass key hidden at a random depth in natural filler text, asked for at the end
  kv       many `key: value` pairs (keys are English words, values 4-digit numbers), one asked
  needle   natural filler with several "special magic number for <name>" needles, one asked
           (the others are distractors)

A task is (prompt, answer): the text the model reads and the text it must generate. Prompt and
answer are plain strings; pieces are joined by single spaces and never contain newlines, so
tokenize(prompt) + tokenize(answer) equals tokenize(prompt + " " + answer) for SentencePiece models
that split on whitespace. Lengths are counted in tokens of the tokenizer passed in: the prompt plus
answer plus BOS stays within `max_tokens` and above 3/4 of it.
"""
import random
import re

SENTENCE_SPLIT = re.compile(r'(?<=[.?!"])\s+(?=[A-Z"])')

FIRST_NAMES = (
    "Alice Bruno Clara Dmitri Elena Farid Greta Hiro Ingrid Jonas Kira Luis Mara Nils Olga Pavel "
    "Quinn Rosa Samir Tara Ugo Vera Walt Xenia Yusuf Zora Abel Bianca Cyril Dana Emil Flora Gus "
    "Hanna Ivo Jade Karl Lena Milo Nora Otto Petra Ralf Sonia Theo Uma Viktor Wanda Yann Zeno"
).split()


def split_sentences(text):
    return [s for s in SENTENCE_SPLIT.split(text) if s]


class Filler:
    """Natural sentences with cached token counts, drawn in document order from a random start."""

    def __init__(self, documents, tokenizer):
        self.sentences = []
        for doc in documents:
            self.sentences.extend(split_sentences(doc))
        self.counts = [len(tokenizer.encode(s)) for s in self.sentences]

    def take(self, rng, n_tokens):
        """Consecutive sentences totalling at most n_tokens tokens (at least one sentence)."""
        i = rng.randrange(len(self.sentences))
        out, total = [], 0
        while True:
            c = self.counts[i]
            if out and total + c > n_tokens:
                return out, total
            out.append(self.sentences[i])
            total += c
            i = (i + 1) % len(self.sentences)


def _number(rng, digits):
    return str(rng.randrange(10 ** (digits - 1), 10 ** digits))


def _count(tokenizer, text):
    return len(tokenizer.encode(text))


def _fit(pieces_fixed_tokens, max_tokens, answer_tokens):
    # BOS + fixed pieces + answer must fit; the rest is the filler budget.
    return max_tokens - 1 - answer_tokens - pieces_fixed_tokens


def passkey(rng, tokenizer, filler, max_tokens):
    key = _number(rng, 5)
    intro = "There is a pass key hidden in the text below. Remember it."
    needle = f"The pass key is {key}. Remember it. {key} is the pass key."
    query = "What is the pass key? The pass key is"
    fixed = sum(_count(tokenizer, p) for p in (intro, needle, query))
    budget = _fit(fixed, max_tokens, _count(tokenizer, key))
    sentences, _ = filler.take(rng, budget)
    at = rng.randint(0, len(sentences))
    body = sentences[:at] + [needle] + sentences[at:]
    return " ".join([intro] + body + [query]), key


def kv(rng, tokenizer, words, max_tokens):
    intro = "Below is a list of keys, each followed by its value. Remember them."
    answer_digits = 4
    # Budget pairs by measured token counts so the prompt fills the length.
    pairs, used = [], _count(tokenizer, intro) + 1 + 12 + answer_digits + 2
    chosen = set()
    while True:
        k = rng.choice(words)
        if k in chosen:
            if len(chosen) >= len(words) // 2:
                break
            continue
        v = _number(rng, answer_digits)
        piece = f"{k}: {v}."
        c = _count(tokenizer, piece)
        # query repeats the key twice
        need = used + c + 2 * _count(tokenizer, k) + 8
        if pairs and need > max_tokens:
            break
        chosen.add(k)
        pairs.append((k, v, piece))
        used += c
    key, value, _ = pairs[rng.randrange(len(pairs))]
    query = f"Question: what is the value of {key}? Answer: {key}:"
    prompt = " ".join([intro] + [p for _, _, p in pairs] + [query])
    return prompt, value


def needle(rng, tokenizer, filler, max_tokens, n_needles=None):
    n = n_needles or rng.randint(2, 5)
    names = rng.sample(FIRST_NAMES, n)
    numbers = [_number(rng, 5) for _ in names]
    needles = [f"The special magic number for {nm} is {num}." for nm, num in zip(names, numbers)]
    target = rng.randrange(n)
    query = (f"What is the special magic number for {names[target]}? "
             f"The special magic number for {names[target]} is")
    fixed = sum(_count(tokenizer, p) for p in needles + [query])
    budget = _fit(fixed, max_tokens, _count(tokenizer, numbers[target]))
    sentences, _ = filler.take(rng, budget)
    body = list(sentences)
    for nd in needles:
        body.insert(rng.randint(0, len(body)), nd)
    return " ".join(body + [query]), numbers[target]


def key_words(documents, minimum_count=20):
    """Lower-case alphabetic words of 4-9 letters seen at least minimum_count times, sorted."""
    counts = {}
    for doc in documents:
        for w in re.findall(r"\b[a-z]{4,9}\b", doc):
            counts[w] = counts.get(w, 0) + 1
    return sorted(w for w, c in counts.items() if c >= minimum_count)


TASKS = ("passkey", "kv", "needle")


def make_task(kind, rng, tokenizer, filler, words, max_tokens):
    if kind == "passkey":
        return passkey(rng, tokenizer, filler, max_tokens)
    if kind == "kv":
        return kv(rng, tokenizer, words, max_tokens)
    if kind == "needle":
        return needle(rng, tokenizer, filler, max_tokens)
    raise ValueError(f"unknown task kind {kind!r}")
