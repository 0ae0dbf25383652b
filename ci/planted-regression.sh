#!/usr/bin/env bash
# Shows that an accuracy gate catches a silent accuracy regression. In a copy of the tree, it
# plants one and builds kvcheck there, runs the gate that ci/test.sh runs and expects exit 1 with a
# table naming the planted rows. It then runs the same gate with the unplanted kvcheck, which must
# exit 0. Neither step is part of the test gate: the planted build takes a few minutes.
#   default     LeanKV's high tier stores its keys at 4 bits instead of the 8 its parameters (and
#               its policy name) still say; the gate is the embedded model's quick report,
#               kvcheck report --quick --baseline datasets/baselines/report-quick-kvcheck-tiny.json
#   --smollm2   every 4-bit group's scale is chosen for 14 levels instead of 15 (one step off: the
#               codes still cover the group, each step is 15/14 as wide); the gate is the real
#               model's short long-context report (the fetched SmolLM2 GGUF, ci/install-deps.sh),
#               kvcheck report --long --quick --baseline datasets/baselines/report-long-quick-smollm2.json
#
#   ./ci/planted-regression.sh [--smollm2] [KVCHECK]   KVCHECK: the unplanted binary (default build/bin/kvcheck)
#
# Environment: KVCHECK_PLANT_DIR (default build-planted: the planted copy and its build),
# KVCHECK_JOBS (default: cores). Exit 0 when the planted build fails the gate and the unplanted one
# passes it.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
smollm2=0
if [[ ${1:-} == --smollm2 ]]; then
  smollm2=1
  shift
fi
clean=${1:-build/bin/kvcheck}
[[ -x $clean ]] || { echo "ci/planted-regression.sh: $clean not found (build first: ./ci/test.sh)" >&2; exit 2; }
plant_dir=${KVCHECK_PLANT_DIR:-build-planted}
jobs=${KVCHECK_JOBS:-$(nproc)}
if [[ $smollm2 -eq 1 ]]; then
  model=datasets/models/fetched/SmolLM2-135M-Instruct.Q4_1.gguf
  [[ -f $model ]] || { echo "ci/planted-regression.sh: $model is not fetched: run ci/install-deps.sh" >&2; exit 2; }
  baseline=datasets/baselines/report-long-quick-smollm2.json
  gate=(report --model "$root/$model" --long --quick --quiet --baseline "$root/$baseline")
  target="$plant_dir/src/kernels/quant_math.h"
  original='const float levels = static_cast<float>((1u << bits) - 1u);'
  planted='const float levels = static_cast<float>((1u << bits) - (bits == 4 ? 2u : 1u));'
else
  baseline=datasets/baselines/report-quick-kvcheck-tiny.json
  gate=(report --quick --quiet --baseline "$root/$baseline")
  target="$plant_dir/src/optimized/leankv_policy.cpp"
  original='KvTier{bits_format(p_.high_k), bits_format(p_.high_v)}'
  planted='KvTier{bits_format(4), bits_format(p_.high_v)}'
fi

# The copy: every tracked file, then the plant (in choose_params only, for --smollm2).
rm -rf "$plant_dir/src"
mkdir -p "$plant_dir/src"
git ls-files -z | xargs -0 cp --parents -t "$plant_dir/src"
python3 - "$target" "$original" "$planted" <<'PY'
import sys
path, old, new = sys.argv[1:]
text = open(path).read()
if text.count(old) < 1:
    sys.exit(f"ci/planted-regression.sh: the plant did not apply to {path}")
open(path, "w").write(text.replace(old, new, 1))
PY
echo "planted: $(grep -nF "$planted" "$target" | head -n 1)"

cmake -S "$plant_dir/src" -B "$plant_dir/build" -DCMAKE_BUILD_TYPE=Release -DKVCHECK_CUDA=OFF -DKVCHECK_BUILD_TESTS=OFF >/dev/null
cmake --build "$plant_dir/build" -j "$jobs" --target kvcheck >/dev/null

status=0
echo "== planted: the gate must fail =="
planted_rc=0
"$plant_dir/build/bin/kvcheck" "${gate[@]}" --out "$plant_dir/report-planted" ||
  planted_rc=$?
if [[ $planted_rc -eq 1 ]]; then
  echo "planted: exit 1 (caught)"
else
  echo "planted: exit $planted_rc, expected 1: the gate missed the regression" >&2
  status=1
fi
echo "== unplanted: the gate must pass =="
clean_rc=0
"$clean" "${gate[@]}" --out "$plant_dir/report-clean" || clean_rc=$?
if [[ $clean_rc -eq 0 ]]; then
  echo "unplanted: exit 0"
else
  echo "unplanted: exit $clean_rc, expected 0" >&2
  status=1
fi
exit $status
