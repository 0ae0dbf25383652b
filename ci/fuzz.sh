#!/usr/bin/env bash
# Fuzzing campaign: builds the libFuzzer targets of properties/fuzz with clang, ASan and UBSan
# (build-fuzz/), runs every target as K independent seeded shards for N minutes each, and writes
# a JSON summary (executions, coverage, seeds, crashes with the command that reproduces each).
# A crash is minimised (-minimize_crash) and the minimised input copied into
# datasets/fuzz/<target>/, where the unit suite replays it from then on (FuzzCorpora.*).
#
#   ./ci/fuzz.sh --minutes 10 --shards 2 --out fuzz-out
#
# Shards are independent processes (seed = shard + 1, each with its own working corpus under
# --out, all starting from datasets/fuzz/<target>/): scale out by running shards on more machines
# and merging the summaries' "runs" lists. Exit status 1 when any shard found a crash.
set -euo pipefail
cd "$(dirname "$0")/.."

minutes=1
shards=1
out=fuzz-out
targets=(safetensors config tokenizer page_manager workload_jsonl report_baseline)
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) minutes=$2; shift 2 ;;
    --shards) shards=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --targets) IFS=, read -r -a targets <<<"$2"; shift 2 ;;
    *) echo "ci/fuzz.sh: unknown argument $1 (--minutes N --shards K --out DIR --targets a,b)" >&2; exit 2 ;;
  esac
done

./ci/install-deps.sh
command -v clang++ >/dev/null || { echo "ci/fuzz.sh: clang++ is needed (Debian package clang)" >&2; exit 2; }

build_dir=${KVCHECK_FUZZ_DIR:-build-fuzz}
CXX=clang++ cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVCHECK_CUDA=OFF -DKVCHECK_BUILD_TESTS=OFF \
  -DKVCHECK_WERROR=OFF -DKVCHECK_FUZZ=ON -DKVCHECK_SANITIZE=address,undefined >/dev/null
cmake --build "$build_dir" -j "${KVCHECK_JOBS:-$(nproc)}" --target $(printf 'kvcheck_fuzz_%s ' "${targets[@]}")

mkdir -p "$out"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
pids=()
for t in "${targets[@]}"; do
  for ((s = 0; s < shards; ++s)); do
    dir="$out/$t/shard$s"
    mkdir -p "$dir/corpus" "$dir/artifacts"
    extra=()
    # SentencePiece's encoder (not instrumented: a Debian library) is slow on long random input.
    [ "$t" = tokenizer ] && extra=(-max_len=512)
    "$build_dir/bin/kvcheck_fuzz_$t" "${extra[@]}" -seed=$((s + 1)) -max_total_time=$((minutes * 60)) -timeout=10 -rss_limit_mb=4096 \
      -print_final_stats=1 -artifact_prefix="$dir/artifacts/" "$dir/corpus" "datasets/fuzz/$t" >"$dir/log" 2>&1 &
    pids+=($!)
  done
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done

# Minimise every crash into a regression input.
for t in "${targets[@]}"; do
  for a in "$out/$t"/shard*/artifacts/*; do
    [ -e "$a" ] || continue
    min="$a.min"
    "$build_dir/bin/kvcheck_fuzz_$t" -minimize_crash=1 -runs=20000 -exact_artifact_path="$min" "$a" >/dev/null 2>&1 || true
    [ -s "$min" ] || cp "$a" "$min"
    cp "$min" "datasets/fuzz/$t/regression-$(sha1sum "$min" | cut -c1-12)"
  done
done

python3 - "$out" "$build_dir" "$minutes" "$shards" "${targets[@]}" <<'PY'
import json, os, re, sys
out, build, minutes, shards, targets = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5:]
runs = []
for t in targets:
    for s in range(shards):
        d = os.path.join(out, t, f"shard{s}")
        log = open(os.path.join(d, "log"), errors="replace").read()
        def stat(name):
            m = re.findall(rf"stat::{name}:\s*(\d+)", log)
            return int(m[-1]) if m else None
        cov = re.findall(r"cov: (\d+) ft: (\d+)", log)
        crashes = sorted(f for f in os.listdir(os.path.join(d, "artifacts")) if not f.endswith(".min"))
        runs.append({
            "target": t, "shard": s, "seed": s + 1, "seconds": minutes * 60,
            "executions": stat("number_of_executed_units"),
            "executions_per_second": stat("average_exec_per_sec"),
            "coverage_edges": int(cov[-1][0]) if cov else None,
            "coverage_features": int(cov[-1][1]) if cov else None,
            "corpus_files": len(os.listdir(os.path.join(d, "corpus"))),
            "crashes": [{"input": os.path.join(d, "artifacts", c),
                         "reproduce": f"{build}/bin/kvcheck_fuzz_{t} {os.path.join(d, 'artifacts', c)}"} for c in crashes],
        })
summary = {"format": "kvcheck-fuzz", "version": 1, "minutes": minutes, "shards": shards, "runs": runs,
           "crashes": sum(len(r["crashes"]) for r in runs)}
json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=2)
for r in runs:
    print(f"{r['target']:12s} shard {r['shard']}: {r['executions']} executions, {r['coverage_edges']} edges, "
          f"{len(r['crashes'])} crashes")
print(f"ci/fuzz.sh: summary in {os.path.join(out, 'summary.json')}")
PY
exit $status
