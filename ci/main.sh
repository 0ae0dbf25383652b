#!/usr/bin/env bash
# The main job on the embedded default: set up, build, and run kvcheck.
#
# For now the main job writes a small random-weight Llama checkpoint with the bundled test
# tokenizer (datasets/tiny/tokenizer.model) and generates from it with the reference
# transformer. (A later issue replaces it with the accuracy report on the embedded trained model.)
set -euo pipefail
cd "$(dirname "$0")/.."

./ci/install-deps.sh

build_dir=${KVCHECK_BUILD_DIR:-build}
jobs=${KVCHECK_JOBS:-$(nproc)}
# shellcheck disable=SC2086
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release ${KVCHECK_CMAKE_ARGS:-}
cmake --build "$build_dir" -j "$jobs" --target kvcheck

kvcheck="$build_dir/bin/kvcheck"
model="$build_dir/models/tiny-random"
"$kvcheck" make-model --random --layers 4 --hidden 128 --heads 8 --kv-heads 2 --max-positions 1024 \
  --tokenizer datasets/tiny/tokenizer.model --seed 1 --out "$model"
"$kvcheck" generate --model "$model" --prompt "The cache keeps the keys and values of every token" \
  --max-new-tokens 24 --dump-logits "$build_dir/models/tiny-random-logits.npy"
