#!/usr/bin/env bash
# The real-shape reports at full --quick size: every registered policy on the published shapes
# of Qwen2.5-0.5B (with the committed Qwen tokenizer) and Llama-3.2-1B (with Llama 3's tokenizer,
# when fetched: datasets/tokenizers/README.md), random bf16 weights from make-model --shape.
# A separate job, like ci/sanitize.sh: about 30 min for the 0.5B shape and 70 min for the 1B one
# on 2 cores. It first runs the smaller version (RealShapeReportSlow.*, label real-shape: a policy
# of each kind, 3 + 5 minutes), which the gate (ci/test.sh) leaves to this job to stay within its
# 30 minutes.
#
#   ./ci/real-shapes.sh [OUT_DIR]        (default build/real-shapes; needs ./ci/test.sh's build)
#
# Each report ends with its wall time and peak RSS (`run:` line, report.json "run"); the script
# exits non-zero when a report fails or its per-step oracle finds a violation.
set -euo pipefail
cd "$(dirname "$0")/.."
kvcheck=${KVCHECK_BUILD_DIR:-build}/bin/kvcheck
out=${1:-${KVCHECK_BUILD_DIR:-build}/real-shapes}
mkdir -p "$out"
[ -x "$kvcheck" ] || { echo "real-shapes: $kvcheck not built (run ./ci/test.sh or cmake --build first)" >&2; exit 2; }

tokenizer_dir() {  # NAME -> the directory holding its tokenizer.json, or nothing
  for d in "${KVCHECK_TOKENIZERS:-/nonexistent}/$1" "datasets/tokenizers/$1" "datasets/tokenizers/fetched/$1"; do
    if [ -f "$d/tokenizer.json" ]; then echo "$d"; return; fi
  done
}

status=0
echo "== RealShapeReportSlow.* (ctest -L real-shape)"
ctest --test-dir "${KVCHECK_BUILD_DIR:-build}" --output-on-failure -L real-shape || status=1
run_shape() {  # shape, tokenizer name
  local shape=$1 tok
  tok=$(tokenizer_dir "$2")
  if [ -z "$tok" ]; then
    echo "real-shapes: $shape skipped: no $2 tokenizer.json (datasets/tokenizers/README.md says how to fetch it)"
    return
  fi
  echo "== $shape with $tok/tokenizer.json"
  /usr/bin/time -f "make-model: %e s wall, peak RSS %M KiB" \
    "$kvcheck" make-model --random --shape "$shape" --seed 3 --tokenizer-json "$tok/tokenizer.json" --out "$out/$shape"
  "$kvcheck" report --quick --quiet --model "$out/$shape" --out "$out/$shape-report" |
    tee "$out/$shape-report.log" | grep -E "^\| |^run:|REGRESS|violation" || status=1
  rm -f "$out/$shape/model.safetensors"  # 1-2.5 GB each; the report stays
}

run_shape qwen2.5-0.5b qwen3
run_shape llama3.2-1b llama3
exit $status
