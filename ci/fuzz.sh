#!/usr/bin/env bash
# Fuzzing campaign: builds the libFuzzer targets of properties/fuzz with clang, ASan and UBSan
# (build-fuzz/), runs every target as K independent seeded shards for N minutes each, and writes
# a JSON summary (executions, coverage, seeds, crashes with the command that reproduces each).
# A crash is minimised (-minimize_crash) and the minimised input copied into
# datasets/fuzz/<target>/, where the unit suite replays it from then on (FuzzCorpora.*).
#
# The target `properties` is the RapidCheck suite at length: each shard runs
# kvcheck_property_tests (the gate's GCC build, in build/) round after round for N minutes, every
# round with a new seed and RC_PARAMS max_success=M (--property-success, default 1000; the gate
# runs each property at 100 to 500 cases), and the summary lists each failed round's seed with
# the command that reproduces it.
#
#   ./ci/fuzz.sh --minutes 10 --shards 2 --out fuzz-out
#   ./ci/fuzz.sh --minutes 30 --targets properties --property-success 5000
#
# Shards are independent processes (seed = shard + 1, each with its own working corpus under
# --out, all starting from datasets/fuzz/<target>/; property rounds seeded 1000 * (shard + 1) +
# round): scale out by running shards on more machines and merging the summaries' "runs" lists.
# Exit status 1 when any shard found a crash or a failing property.
set -euo pipefail
cd "$(dirname "$0")/.."

minutes=1
shards=1
out=fuzz-out
property_success=1000
targets=(safetensors gguf config tokenizer tokenizer_json page_manager scheduler workload_jsonl report_baseline engine_output properties)
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) minutes=$2; shift 2 ;;
    --shards) shards=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --targets) IFS=, read -r -a targets <<<"$2"; shift 2 ;;
    --property-success) property_success=$2; shift 2 ;;
    *) echo "ci/fuzz.sh: unknown argument $1 (--minutes N --shards K --out DIR --targets a,b --property-success M)" >&2; exit 2 ;;
  esac
done
fuzzers=()
run_properties=0
for t in "${targets[@]}"; do
  if [ "$t" = properties ]; then run_properties=1; else fuzzers+=("$t"); fi
done

./ci/install-deps.sh
command -v clang++ >/dev/null || { echo "ci/fuzz.sh: clang++ is needed (Debian package clang)" >&2; exit 2; }

build_dir=${KVCHECK_FUZZ_DIR:-build-fuzz}
if [ ${#fuzzers[@]} -gt 0 ]; then
  CXX=clang++ cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVCHECK_CUDA=OFF -DKVCHECK_BUILD_TESTS=OFF \
    -DKVCHECK_WERROR=OFF -DKVCHECK_FUZZ=ON -DKVCHECK_SANITIZE=address,undefined >/dev/null
  cmake --build "$build_dir" -j "${KVCHECK_JOBS:-$(nproc)}" --target $(printf 'kvcheck_fuzz_%s ' "${fuzzers[@]}")
fi
props_dir=${KVCHECK_BUILD_DIR:-build}
props_bin="$props_dir/properties/kvcheck_property_tests"
if [ $run_properties = 1 ]; then
  # shellcheck disable=SC2086
  cmake -S . -B "$props_dir" -DCMAKE_BUILD_TYPE=Release ${KVCHECK_CMAKE_ARGS:-} >/dev/null
  cmake --build "$props_dir" -j "${KVCHECK_JOBS:-$(nproc)}" --target kvcheck_property_tests
fi

# One property shard: rounds of the whole RapidCheck suite until the time is up (the last round
# is cut short by the deadline, and counted as cut, not failed).
property_shard() {
  local s=$1 dir=$2 deadline=$((SECONDS + minutes * 60)) round=0 seed rc start
  : >"$dir/rounds.jsonl"
  while [ $SECONDS -lt $deadline ]; do
    seed=$((1000 * (s + 1) + round))
    start=$SECONDS
    rc=0
    RC_PARAMS="seed=$seed max_success=$property_success" timeout $((deadline - SECONDS)) "$props_bin" --gtest_brief=1 \
      >"$dir/round$round.log" 2>&1 || rc=$?
    echo "{\"round\": $round, \"seed\": $seed, \"exit\": $rc, \"seconds\": $((SECONDS - start))}" >>"$dir/rounds.jsonl"
    round=$((round + 1))
  done
}

mkdir -p "$out"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
pids=()
if [ $run_properties = 1 ]; then
  for ((s = 0; s < shards; ++s)); do
    mkdir -p "$out/properties/shard$s"
    property_shard "$s" "$out/properties/shard$s" &
    pids+=($!)
  done
fi
for t in "${fuzzers[@]}"; do
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
for t in "${fuzzers[@]}"; do
  for a in "$out/$t"/shard*/artifacts/*; do
    [ -e "$a" ] || continue
    min="$a.min"
    "$build_dir/bin/kvcheck_fuzz_$t" -minimize_crash=1 -runs=20000 -max_total_time=120 -timeout=10 -exact_artifact_path="$min" "$a" >/dev/null 2>&1 || true
    [ -s "$min" ] || cp "$a" "$min"
    cp "$min" "datasets/fuzz/$t/regression-$(sha1sum "$min" | cut -c1-12)"
  done
done

python3 - "$out" "$build_dir" "$minutes" "$shards" "$props_bin" "$property_success" "${targets[@]}" <<'PY' || status=1
import json, os, re, sys
out, build, minutes, shards = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
props_bin, property_success, targets = sys.argv[5], int(sys.argv[6]), sys.argv[7:]
runs = []
failed_properties = 0
for s in range(shards) if "properties" in targets else []:
    d = os.path.join(out, "properties", f"shard{s}")
    rounds = [json.loads(line) for line in open(os.path.join(d, "rounds.jsonl"))]
    failures = []
    for r in rounds:
        if r["exit"] in (0, 124):
            continue
        log = open(os.path.join(d, f"round{r['round']}.log"), errors="replace").read()
        tests = sorted(set(re.findall(r"\[  FAILED  \] ([\w/.]+)", log)))
        failures.append({"seed": r["seed"], "tests": tests, "log": os.path.join(d, f"round{r['round']}.log"),
                         "reproduce": f"RC_PARAMS=\"seed={r['seed']} max_success={property_success}\" {props_bin}"
                                      + (f" --gtest_filter='{':'.join(tests)}'" if tests else "")})
    failed_properties += len(failures)
    runs.append({"target": "properties", "shard": s, "seconds": minutes * 60, "max_success": property_success,
                 "rounds_completed": sum(r["exit"] != 124 for r in rounds),
                 "rounds_cut_by_deadline": sum(r["exit"] == 124 for r in rounds),
                 "seeds": [r["seed"] for r in rounds], "failures": failures})
for t in (t for t in targets if t != "properties"):
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
           "crashes": sum(len(r.get("crashes", [])) for r in runs), "failed_property_rounds": failed_properties}
json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=2)
for r in runs:
    if r["target"] == "properties":
        print(f"{'properties':15s} shard {r['shard']}: {r['rounds_completed']} rounds at max_success {r['max_success']} "
              f"(+{r['rounds_cut_by_deadline']} cut by the deadline), {len(r['failures'])} failed")
        for f in r["failures"]:
            print(f"  reproduce: {f['reproduce']}")
    else:
        print(f"{r['target']:15s} shard {r['shard']}: {r['executions']} executions, {r['coverage_edges']} edges, "
              f"{len(r['crashes'])} crashes")
print(f"ci/fuzz.sh: summary in {os.path.join(out, 'summary.json')}")
sys.exit(1 if failed_properties else 0)
PY
exit $status
