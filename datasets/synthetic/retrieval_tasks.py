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


# --- Chat-style tasks with the asked fact at a chosen depth (datasets/synthetic/make_long_sets.py).
#
# The prompt is a user message: an instruction line, a blank line, the haystack, a blank line and
# the question. The model's answer starts with `answer_prefix` (the start of the assistant's turn,
# appended after the chat template's generation prompt) and continues with " " + answer.
# The haystack is a list of units joined by single spaces: filler sentences (passkey, needle; the
# needle task's distractor needles count as units), or `key: value.` pairs (kv). The asked fact is
# one more unit, inserted at the unit boundary where the share of the other units' tokens before it
# comes closest to depth / 100 (0: the haystack's first unit; 100: its last, right before the
# question). Token counts per unit are counted alone (approximate); the generator measures the
# exact depth on the tokenized prompt.

LONG_TASKS = ("passkey", "kv", "needle")


class DepthTask:
    """A built chat task: the prompt and the character spans the depth is measured on."""

    def __init__(self, prompt, answer_prefix, answer, haystack, fact):
        self.prompt = prompt
        self.answer_prefix = answer_prefix
        self.answer = answer
        self.haystack = haystack  # (start, end) character offsets of the haystack in the prompt
        self.fact = fact          # (start, end) character offsets of the asked fact in the prompt


def depth_index(counts, depth):
    """The insertion index i in 0..len(counts) whose share sum(counts[:i]) / sum(counts) is closest
    to depth / 100 (ties: the lower index)."""
    total = sum(counts)
    target = depth / 100 * total
    best, best_err, before = 0, abs(target), 0
    for i, c in enumerate(counts):
        before += c
        err = abs(before - target)
        if err < best_err:
            best, best_err = i + 1, err
    return best


def _layout(intro, units, fact_at, question):
    """prompt text, haystack span and fact span for units joined by spaces."""
    head = intro + "\n\n"
    parts, pos, fact = [], len(head), None
    for i, u in enumerate(units):
        if i:
            pos += 1
        if i == fact_at:
            fact = (pos, pos + len(u))
        parts.append(u)
        pos += len(u)
    haystack = " ".join(parts)
    prompt = head + haystack + "\n\n" + question
    return prompt, (len(head), len(head) + len(haystack)), fact


def passkey_at_depth(rng, tokenizer, filler, budget, depth):
    key = _number(rng, 5)
    intro = "There is a pass key hidden in the text below. Remember it."
    fact = f"The pass key is {key}. Remember it. {key} is the pass key."
    sentences, _ = filler.take(rng, budget - _count(tokenizer, fact))
    counts = [_count(tokenizer, s) for s in sentences]
    at = depth_index(counts, depth)
    units = sentences[:at] + [fact] + sentences[at:]
    prompt, hay, span = _layout(intro, units, at, "What is the pass key?")
    return DepthTask(prompt, "The pass key is", key, hay, span)


def kv_at_depth(rng, tokenizer, words, budget, depth, answer_digits=4):
    intro = "Below is a list of keys, each followed by its value. Remember them."
    order = rng.sample(words, len(words))
    pairs, counts, used = [], [], 0
    for k in order:
        piece = f"{k}: {_number(rng, answer_digits)}."
        c = _count(tokenizer, piece)
        if pairs and used + c > budget:
            break
        pairs.append((k, piece))
        counts.append(c)
        used += c
    else:
        raise ValueError(f"kv: {len(words)} key words cannot fill {budget} tokens")
    asked = rng.randrange(len(pairs))
    key, fact = pairs.pop(asked)
    counts.pop(asked)
    at = depth_index(counts, depth)
    units = [p for _, p in pairs]
    units.insert(at, fact)
    value = fact[len(key) + 2:-1]
    prompt, hay, span = _layout(intro, units, at, f"What is the value of {key}?")
    return DepthTask(prompt, f"The value of {key} is", value, hay, span)


def needle_at_depth(rng, tokenizer, filler, budget, depth, n_needles=None):
    intro = "Some special magic numbers are hidden in the text below. Remember them."
    n = n_needles or rng.randint(2, 5)
    names = rng.sample(FIRST_NAMES, n)
    numbers = [_number(rng, 5) for _ in names]
    needles = [f"The special magic number for {nm} is {num}." for nm, num in zip(names, numbers)]
    target = rng.randrange(n)
    fixed = sum(_count(tokenizer, s) for s in needles)
    sentences, _ = filler.take(rng, budget - fixed)
    body = list(sentences)
    for i, nd in enumerate(needles):
        if i != target:
            body.insert(rng.randint(0, len(body)), nd)
    counts = [_count(tokenizer, s) for s in body]
    at = depth_index(counts, depth)
    body.insert(at, needles[target])
    name = names[target]
    prompt, hay, span = _layout(intro, body, at, f"What is the special magic number for {name}?")
    return DepthTask(prompt, f"The special magic number for {name} is", numbers[target], hay, span)


def make_depth_task(kind, rng, tokenizer, filler, words, budget, depth):
    if kind == "passkey":
        return passkey_at_depth(rng, tokenizer, filler, budget, depth)
    if kind == "kv":
        return kv_at_depth(rng, tokenizer, words, budget, depth)
    if kind == "needle":
        return needle_at_depth(rng, tokenizer, filler, budget, depth)
    raise ValueError(f"unknown task kind {kind!r}")
