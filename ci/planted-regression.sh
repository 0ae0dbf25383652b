#!/usr/bin/env bash
# Shows that the quick accuracy gate catches a silent accuracy regression. In a copy of the tree, it
# plants one: LeanKV's high tier stores its keys at 4 bits instead of the 8 its parameters (and
# its policy name) still say. It builds kvcheck there, runs the gate that ci/test.sh runs
#   kvcheck report --quick --baseline datasets/baselines/report-quick-kvcheck-tiny.json
# and expects exit 1 with a table naming the leankv row. It then runs the same gate with the
# unplanted kvcheck, which must exit 0. Neither step is part of the test gate: the planted build
# takes a few minutes.
#
#   ./ci/planted-regression.sh [KVCHECK]   KVCHECK: the unplanted binary (default build/bin/kvcheck)
#
# Environment: KVCHECK_PLANT_DIR (default build-planted: the planted copy and its build),
# KVCHECK_JOBS (default: cores). Exit 0 when the planted build fails the gate and the unplanted one
# passes it.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
clean=${1:-build/bin/kvcheck}
[[ -x $clean ]] || { echo "ci/planted-regression.sh: $clean not found (build first: ./ci/test.sh)" >&2; exit 2; }
plant_dir=${KVCHECK_PLANT_DIR:-build-planted}
jobs=${KVCHECK_JOBS:-$(nproc)}
baseline=datasets/baselines/report-quick-kvcheck-tiny.json

# The copy: every tracked file, then the plant.
rm -rf "$plant_dir/src"
mkdir -p "$plant_dir/src"
git ls-files -z | xargs -0 cp --parents -t "$plant_dir/src"
policy="$plant_dir/src/optimized/leankv_policy.cpp"
planted='KvTier{bits_format(4), bits_format(p_.high_v)}'
sed -i "s/KvTier{bits_format(p_.high_k), bits_format(p_.high_v)}/$planted/" "$policy"
grep -qF "$planted" "$policy" || { echo "ci/planted-regression.sh: the plant did not apply to $policy" >&2; exit 2; }
echo "planted: $(grep -nF "$planted" "$policy" | head -n 1)"

cmake -S "$plant_dir/src" -B "$plant_dir/build" -DCMAKE_BUILD_TYPE=Release -DKVCHECK_CUDA=OFF -DKVCHECK_BUILD_TESTS=OFF >/dev/null
cmake --build "$plant_dir/build" -j "$jobs" --target kvcheck >/dev/null

status=0
echo "== planted: the gate must fail =="
planted_rc=0
"$plant_dir/build/bin/kvcheck" report --quick --quiet --out "$plant_dir/report-planted" --baseline "$root/$baseline" ||
  planted_rc=$?
if [[ $planted_rc -eq 1 ]]; then
  echo "planted: exit 1 (caught)"
else
  echo "planted: exit $planted_rc, expected 1: the gate missed the regression" >&2
  status=1
fi
echo "== unplanted: the gate must pass =="
clean_rc=0
"$clean" report --quick --quiet --out "$plant_dir/report-clean" --baseline "$root/$baseline" || clean_rc=$?
if [[ $clean_rc -eq 0 ]]; then
  echo "unplanted: exit 0"
else
  echo "unplanted: exit $clean_rc, expected 0" >&2
  status=1
fi
exit $status
