#!/usr/bin/env bash
# The test gate: install dependencies if missing, configure, build, run every test suite.
#
#   ./ci/test.sh                      everything (labels unit, property, slow, gpu)
#   ./ci/test.sh -L unit              extra arguments go to ctest
#
# Environment: KVCHECK_BUILD_DIR (default build), KVCHECK_JOBS (default: number of cores),
# KVCHECK_CMAKE_ARGS (extra configure flags, e.g. -DKVCHECK_CUDA=OFF).
# GPU tests run when the build has CUDA and a device exists; otherwise they are reported as
# skipped, with the reason, at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

./ci/install-deps.sh

build_dir=${KVCHECK_BUILD_DIR:-build}
jobs=${KVCHECK_JOBS:-$(nproc)}
start=$(date +%s)
# shellcheck disable=SC2086
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release ${KVCHECK_CMAKE_ARGS:-}
cmake --build "$build_dir" -j "$jobs"
built=$(date +%s)
echo "ci/test.sh: build took $((built - start)) s"

status=0
# GPU tests first, so their skip reasons are visible and the closing summary below counts
# every suite. They run when the build has CUDA and a device exists; otherwise each reports
# why it skipped.
echo "== GPU tests (label gpu) =="
gpu_log=$(mktemp)
main_log=$(mktemp)
trap 'rm -f "$gpu_log" "$main_log"' EXIT
ctest --test-dir "$build_dir" --output-on-failure -L gpu -V "$@" >"$gpu_log" 2>&1 || status=$?
grep -E "Skipped|skipped|Passed|Failed|tests passed|No tests" "$gpu_log" | grep -vE "^\s*$" || true
echo
echo "== unit, property and slow tests =="
ctest --test-dir "$build_dir" --output-on-failure -j "$jobs" -LE gpu "$@" 2>&1 | tee "$main_log" ||
  status=$?

# One plain closing line over both runs (ctest's own summary counts a skipped test as passed).
count() { sed -nE "s/$2/\1/p" "$1" | tail -1 | grep . || echo 0; }
total=$(( $(count "$gpu_log" '.*tests failed out of ([0-9]+).*') +
          $(count "$main_log" '.*tests failed out of ([0-9]+).*') ))
failed=$(( $(count "$gpu_log" '.*tests passed, ([0-9]+) tests? failed out of.*') +
           $(count "$main_log" '.*tests passed, ([0-9]+) tests? failed out of.*') ))
skipped=$(( $(grep -c '\*\*\*Skipped' "$gpu_log" || true) + $(grep -c '\*\*\*Skipped' "$main_log" || true) ))
echo "ci/test.sh: tests took $(( $(date +%s) - built )) s, exit status $status"
echo "tests: $(( total - failed - skipped )) passed, $failed failed, $skipped skipped"
exit $status
