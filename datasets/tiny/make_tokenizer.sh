#!/bin/sh
# Regenerates datasets/tiny/tokenizer.model from datasets/tiny/corpus.txt.
# Run from the repository root. Needs spm_train (Debian package "sentencepiece", 0.1.97).
# Single-threaded, fixed seed, no sentence sampling, and fixed relative paths (the trainer
# options, paths included, are stored inside the model): the output is byte-for-byte reproducible.
set -eu
spm_train \
  --input=datasets/tiny/corpus.txt \
  --model_prefix=datasets/tiny/tokenizer \
  --model_type=bpe \
  --vocab_size=512 \
  --byte_fallback=true \
  --character_coverage=1.0 \
  --bos_id=1 --eos_id=2 --unk_id=0 --pad_id=-1 \
  --normalization_rule_name=identity \
  --remove_extra_whitespaces=false \
  --split_digits=true \
  --input_sentence_size=0 \
  --shuffle_input_sentence=false \
  --num_threads=1 \
  --random_seed=1 \
  --minloglevel=1
rm -f datasets/tiny/tokenizer.vocab
