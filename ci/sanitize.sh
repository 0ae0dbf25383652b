#!/usr/bin/env bash
# The sanitizer job: builds kvcheck and its test suites with AddressSanitizer and
# UndefinedBehaviorSanitizer (-fsanitize=address,undefined, any UB report fatal) and runs the
# unit, property and slow suites (the GPU suite is left to ci/gpu.sh: ASan and the CUDA runtime
# do not mix). Not part of .ci/run: docs/developer/testing.md ("Sanitizers"); times in docs/perf/.
#
#   ./ci/sanitize.sh                  everything
#   ./ci/sanitize.sh -R PagedKvCache  extra arguments go to ctest
#
# Environment: KVCHECK_SANITIZE_DIR (default build-sanitize), KVCHECK_JOBS (default: cores).
set -euo pipefail
cd "$(dirname "$0")/.."

./ci/install-deps.sh

build_dir=${KVCHECK_SANITIZE_DIR:-build-sanitize}
jobs=${KVCHECK_JOBS:-$(nproc)}
start=$(date +%s)
# -O1 keeps the stacks readable and the run within a few times the release one.
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" \
  -DKVCHECK_CUDA=OFF -DKVCHECK_SANITIZE=address,undefined
cmake --build "$build_dir" -j "$jobs"
built=$(date +%s)
echo "ci/sanitize.sh: build took $((built - start)) s"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
ctest --test-dir "$build_dir" --output-on-failure -j "$jobs" -LE gpu "$@" || status=$?
echo "ci/sanitize.sh: tests took $(( $(date +%s) - built )) s, exit status $status"
exit $status
