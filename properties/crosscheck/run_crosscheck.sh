#!/usr/bin/env bash
# Holds the reference transformer against the independent PyTorch forward (hf_llama_torch.py)
# on several model shapes: GQA, Qwen2 biases + tied embeddings + bf16, explicit head_dim + f16,
# llama3 rope scaling past the original context, Mistral sliding window, Qwen3 (q/k norms) with
# GQA + tied embeddings + bf16 and head_dim x heads wider than the hidden size.
# Usage: run_crosscheck.sh path/to/kvcheck [python3]. Registered with ctest (label slow) when
# the configuring machine has python3-torch.
set -euo pipefail
kvcheck=$1
python=${2:-/usr/bin/python3}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ids=$("$python" -c "import random; random.seed(3); print(','.join(str(random.randrange(512)) for _ in range(150)))")

check() {  # name, config edit (python, on dict c), make-model flags...
  local name=$1 edit=$2
  shift 2
  "$kvcheck" make-model --random --vocab 512 --max-positions 1024 --out "$work/$name" "$@" >/dev/null
  if [ -n "$edit" ]; then
    "$python" -c "import json; p='$work/$name/config.json'; c=json.load(open(p)); $edit; json.dump(c, open(p, 'w'))"
  fi
  local gen
  gen=$("$kvcheck" generate --model "$work/$name" --ids "$ids" --max-new-tokens 10 --ignore-eos \
          --dump-logits "$work/$name.npy" | sed -n 's/^generated ids: //p' | tr ' ' ',')
  "$python" "$here/hf_llama_torch.py" --model "$work/$name" --ids "$ids,$gen" --logits "$work/$name.npy"
}

check llama-gqa "" --layers 3 --hidden 128 --heads 8 --kv-heads 2 --seed 1
check qwen2-bias-tied-bf16 "" --family qwen2 --layers 2 --hidden 96 --heads 6 --kv-heads 2 --tie --dtype bf16 --seed 2
check llama-head-dim-f16 "" --layers 2 --hidden 64 --heads 4 --kv-heads 1 --head-dim 48 --dtype f16 --seed 3
check llama3-rope-scaling \
  "c['rope_scaling'] = {'rope_type': 'llama3', 'factor': 8.0, 'low_freq_factor': 1.0, 'high_freq_factor': 4.0, 'original_max_position_embeddings': 32}; c['rope_theta'] = 500000.0" \
  --layers 2 --hidden 128 --heads 4 --kv-heads 2 --seed 4
check mistral-sliding-window "c['sliding_window'] = 32" --family mistral --layers 2 --hidden 64 --heads 4 --kv-heads 4 --seed 5
check qwen3-gqa-tied-bf16 "" --family qwen3 --layers 2 --hidden 96 --heads 6 --kv-heads 2 --head-dim 32 --tie --dtype bf16 --seed 6
