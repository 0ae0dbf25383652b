#!/usr/bin/env bash
# The test gate: install dependencies if missing, configure, build, run every test suite, then
# build the Python package (pip install ./python) and run its tests (pytest python/tests).
#
#   ./ci/test.sh                      everything but the real-shape reports (labels unit, property,
#                                     slow, gpu; label real-shape is ci/real-shapes.sh's job)
#   ./ci/test.sh -L unit              extra arguments go to ctest
#
# Environment: KVCHECK_BUILD_DIR (default build), KVCHECK_JOBS (default: number of cores),
# KVCHECK_CMAKE_ARGS (extra configure flags, e.g. -DKVCHECK_CUDA=OFF), KVCHECK_PYTHON_TESTS=0
# (skip the Python package; it also skips, saying so, when ci/install-deps.sh could not install
# its build tools).
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
ctest --test-dir "$build_dir" --output-on-failure -j "$jobs" -LE "gpu|real-shape" "$@" 2>&1 | tee "$main_log" ||
  status=$?

# The Python package: built against nothing but the sources (no download: --no-build-isolation,
# the tools ci/install-deps.sh pinned) into BUILD/python-site, not python3's site-packages, so
# that gates of other checkouts on the machine do not replace each other's package; pytest finds
# it (and its plugin) through PYTHONPATH. Its build folder is BUILD/python-wheel/, so a second
# run rebuilds only what changed.
py_log=$(mktemp)
trap 'rm -f "$gpu_log" "$main_log" "$py_log"' EXIT
py_start=$(date +%s)
if [ "${KVCHECK_PYTHON_TESTS:-1}" = 0 ]; then
  echo "== Python tests: skipped (KVCHECK_PYTHON_TESTS=0) =="
elif ! python3 -c "import nanobind, scikit_build_core, pytest, numpy" 2>/dev/null; then
  echo "== Python tests: skipped: nanobind, scikit-build-core, pytest or numpy missing (ci/install-deps.sh installs them) =="
else
  echo
  echo "== Python package and tests (pip install ./python; pytest python/tests) =="
  py_site=$(realpath -m "$build_dir/python-site")
  if CMAKE_BUILD_PARALLEL_LEVEL=$jobs python3 -m pip install --quiet --no-build-isolation --no-deps \
       --disable-pip-version-check --upgrade --target "$py_site" \
       -C build-dir="$(realpath -m "$build_dir/python-wheel")/{wheel_tag}" ./python >"$py_log" 2>&1; then
    PYTHONPATH="$py_site${PYTHONPATH:+:$PYTHONPATH}" python3 -m pytest python/tests -q -p no:cacheprovider 2>&1 |
      tee -a "$py_log" || status=$?
  else
    cat "$py_log"
    echo "ci/test.sh: pip install ./python failed"
    status=1
  fi
  echo "ci/test.sh: Python package and tests took $(( $(date +%s) - py_start )) s"
fi

# One plain closing line over every run (ctest's own summary counts a skipped test as passed).
count() { sed -nE "s/$2/\1/p" "$1" | tail -1 | grep . || echo 0; }
total=$(( $(count "$gpu_log" '.*tests failed out of ([0-9]+).*') +
          $(count "$main_log" '.*tests failed out of ([0-9]+).*') ))
failed=$(( $(count "$gpu_log" '.*tests passed, ([0-9]+) tests? failed out of.*') +
           $(count "$main_log" '.*tests passed, ([0-9]+) tests? failed out of.*') ))
skipped=$(( $(grep -c '\*\*\*Skipped' "$gpu_log" || true) + $(grep -c '\*\*\*Skipped' "$main_log" || true) ))
# pytest's last line: "N passed, M failed, K skipped in S s" (any of them may be absent).
py_count() { grep -oE "[0-9]+ $1" "$py_log" | tail -1 | grep -oE '^[0-9]+' || echo 0; }
py_failed=$(( $(py_count failed) + $(py_count error) ))
total=$(( total + $(py_count passed) + py_failed + $(py_count skipped) ))
failed=$(( failed + py_failed ))
skipped=$(( skipped + $(py_count skipped) ))
echo "ci/test.sh: tests took $(( $(date +%s) - built )) s, exit status $status"
echo "tests: $(( total - failed - skipped )) passed, $failed failed, $skipped skipped"
exit $status
