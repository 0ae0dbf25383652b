#!/usr/bin/env bash
# Mutation campaign: how many small, realistic bugs planted one at a time in the CPU code does the
# gate catch? A separate job, like ci/fuzz.sh and ci/sanitize.sh (a full campaign is hours: each
# mutant is an incremental build and a gate run). ci/mutate.py does the work:
#   - candidates: single-site edits by pattern (comparison flips < <= > >= == !=, + and -, && and
#     ||, integer constants ±1, index i -> i + 1, std::min/std::max swapped, two arguments
#     swapped, true/false, a whole-line assignment or call dropped) over kernels/cpu/,
#     optimized/, oracles/, cli/report_* and the loaders (reference/ safetensors, config, npy,
#     weights, tokenizers); comments and string literals are left alone;
#   - a seeded sample of --count of them (ids are stable hashes of file, line text and rule),
#     or the listed mutants of --mutants FILE.jsonl (datasets/mutation/*.jsonl);
#   - each one applied in a scratch copy of the tree (build-mutate/src, built once with ccache and
#     Ninja when installed, -DKVCHECK_CUDA=OFF), rebuilt incrementally (the CLI and the test
#     executables) and run with ctest --stop-on-failure and a timeout: first the gate's tests of
#     the mutated file's area (the test files that include its header), then, if those pass, the
#     whole gate, so a survivor has passed every gate test; then restored;
#   - a JSON summary: tried, killed, survived, timed_out, did_not_compile, equivalent (the ids in
#     datasets/mutation/equivalent.txt, each with its one-line argument), the kill rate over the
#     rest, and for every survivor its diff and the command that reproduces it. It is rewritten
#     after every mutant; --resume continues an interrupted campaign (same seed, count, shard).
#
#   ./ci/mutate.sh --seed 1 --count 150                        # the campaign (summary in mutate-out/)
#   ./ci/mutate.sh --seed 1 --count 150 --shard 2 --shards 4   # shard 2 of 4, one per machine
#   ./ci/mutate.sh --seed 1 --count 150 --list                 # what would be tried, without building
#   ./ci/mutate.sh --seed 1 --count 150 --shard 2 --shards 4 --resume   # continue that shard
#   ./ci/mutate.sh --only 3f2a9c1b0d4e --seed 1 --count 150    # reproduce one (summary-only.json)
#   ./ci/mutate.sh --merge mutate-out/summary-shard*.json mutate-out/rerun/summary-only.json
#                                  # one campaign.json; a re-run's outcome replaces the first
#   ./ci/mutate.sh --mutants datasets/mutation/looser_bounds.jsonl --ctest-args "-R Tight|Tolerance|GateEdges"
#
# Shards take every K-th mutant of the same sample, so their summaries' "mutants" lists merge
# into the whole campaign. Exit status 1 when a mutant survived.
# Environment: KVCHECK_JOBS (default: cores).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v python3 >/dev/null || { echo "ci/mutate.sh: python3 is needed" >&2; exit 2; }
exec python3 ci/mutate.py --jobs "${KVCHECK_JOBS:-$(nproc)}" "$@"
