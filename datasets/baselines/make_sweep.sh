#!/usr/bin/env bash
# The committed accuracy sweep of the embedded model (issue 7's evidence): every registered policy
# at budgets of 32, 64, 96 and 128 tokens per head, plus LeanKV's key/value comparisons at equal
# bytes and the rotated quantizers beside their plain rows (rotate=hadamard at 4 and 2 bits), on
# 16 held-out windows (128 prompt + 128 fed tokens) and 60 retrieval items. Derived
# rows: each dynamic leankv row's static counterpart at the same mean tokens per head, and each
# xkv budget's averaged allocation from 16 further held-out windows (--xkv-calibrate 16), and each
# duo budget's calibrated retrieval heads from 24 retrieval items beyond the evaluated 60
# (--duo-calibrate 24, ranked by output error).
#   datasets/baselines/make_sweep.sh [build/bin/kvcheck]
set -euo pipefail
cd "$(dirname "$0")/../.."
kvcheck=${1:-build/bin/kvcheck}
"$kvcheck" verify --sweep --prompts 16 --prompt-tokens 128 --max-new-tokens 128 \
  --sweep-budgets 32,64,96,128 --sweep-retrieval 60 --xkv-calibrate 16 --duo-calibrate 24 --duo-rank output-error \
  --sweep-specs 'kv-bits:k=4,v=8;kv-bits:k=4,v=2;kv-bits:k=2,v=4;leankv:high_k=4,high_v=8,low_k=2,low_v=4;leankv:alpha_l=0.2;leankv:alpha_l=0.2,high_k=4,high_v=8,low_k=2,low_v=4;kivi2:residual=32;kivi4:residual=32;minikv:budget=64,residual=32;minikv:budget=64,pyramid=4,residual=32;int4:rotate=hadamard;int4:rotate=hadamard-signs,rotate_seed=1;kv-bits:k=2,v=2;kv-bits:k=2,v=2,rotate=hadamard;kivi2:rotate=hadamard;kivi4:rotate=hadamard;leankv:rotate=hadamard' \
  --json datasets/baselines/sweep-kvcheck-tiny.json
