#!/usr/bin/env bash
# The main job on the embedded default model (datasets/models/kvcheck-tiny): set up, build, then
#   1. generate with the reference transformer from a pass-key retrieval prompt,
#   2. evaluate it: held-out perplexity vs unigram, retrieval exact match by context length, and
#      the attention-structure report (JSON in $build_dir/reports/eval-embedded.json), and
#   3. verify the optimized engine (CPU backend) against the reference, full-fp32 and full-fp16
#      (JSON in $build_dir/reports/verify-*.json),
#   4. run the per-step oracle for every registered policy at its defaults (exit 3 on a
#      violation; JSON in $build_dir/reports/oracle-*.json), and
#   5. the accuracy report of every policy at three budgets (kvcheck report: report.json, report.md
#      and report.html in $build_dir/reports/report/), printing its summary table and the path of
#      report.html;
#   6. when ci/install-deps.sh fetched SmolLM2-135M-Instruct, its short long-context report
#      (kvcheck report --long --quick: windows of 1K and 2K tokens, retrieval by depth in the chat
#      template, every policy; in $build_dir/reports/report-long-smollm2/), printing where its
#      report.html is.
# KVCHECK_EVAL_LIMIT (default 48) bounds the evaluation; set it to 0 for the full sets.
set -euo pipefail
cd "$(dirname "$0")/.."

./ci/install-deps.sh

build_dir=${KVCHECK_BUILD_DIR:-build}
jobs=${KVCHECK_JOBS:-$(nproc)}
# shellcheck disable=SC2086
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release ${KVCHECK_CMAKE_ARGS:-}
cmake --build "$build_dir" -j "$jobs" --target kvcheck

kvcheck="$build_dir/bin/kvcheck"
mkdir -p "$build_dir/reports"
"$kvcheck" generate --prompt "There is a pass key hidden in the text below. Remember it. \
The committee met on Friday and the report was read aloud. The pass key is 70419. Remember it. \
70419 is the pass key. Nobody in the room said a word about the weather. What is the pass key? \
The pass key is" --max-new-tokens 8
limit=${KVCHECK_EVAL_LIMIT:-48}
limit_args=()
[[ $limit -gt 0 ]] && limit_args=(--limit "$limit")
"$kvcheck" eval --task all "${limit_args[@]}" --json "$build_dir/reports/eval-embedded.json"
for policy in full-fp32 full-fp16; do
  "$kvcheck" verify --policy "$policy" --prompts 8 --max-new-tokens 64 --json "$build_dir/reports/verify-$policy.json"
done
for policy in $("$kvcheck" verify --list-policies); do
  "$kvcheck" verify --verify-each-step --policy "$policy" --prompts 4 --prompt-tokens 96 --max-new-tokens 64 \
    --json "$build_dir/reports/oracle-$policy.json" | tail -n 1
done
"$kvcheck" report --budgets 32,64,128 --out "$build_dir/reports/report" --quiet
smollm2=datasets/models/fetched/SmolLM2-135M-Instruct.Q4_1.gguf
if [[ -f $smollm2 ]]; then
  "$kvcheck" report --model "$smollm2" --long --quick --out "$build_dir/reports/report-long-smollm2" --quiet
else
  echo "ci/main.sh: $smollm2 is not fetched (ci/install-deps.sh downloads it); the long-context report is skipped"
fi
