#!/usr/bin/env bash
# Trains the embedded model's tokenizer on the Brown training documents (never on held-out text).
# Single-threaded, fixed seed, no sampling: the same spm_train (Debian sentencepiece 0.1.97) gives
# a byte-identical model.
#
# Usage (from the repository root, after prepare_corpus.sh):
#   datasets/train/train_tokenizer.sh [WORK] [OUT_DIR]   (defaults: build/corpus datasets/models/kvcheck-tiny)
set -euo pipefail
cd "$(dirname "$0")/../.."
work=${1:-build/corpus}
out=${2:-datasets/models/kvcheck-tiny}
mkdir -p "$out"
spm_train \
  --input="$work/brown_train.txt" \
  --model_prefix="$out/tokenizer" \
  --model_type=bpe \
  --vocab_size=2048 \
  --byte_fallback=true \
  --character_coverage=1.0 \
  --bos_id=1 --eos_id=2 --unk_id=0 --pad_id=-1 \
  --normalization_rule_name=identity \
  --remove_extra_whitespaces=false \
  --split_digits=true \
  --max_sentence_length=65536 \
  --input_sentence_size=0 \
  --shuffle_input_sentence=false \
  --num_threads=1 \
  --random_seed=1 \
  --minloglevel=1
rm -f "$out/tokenizer.vocab"
