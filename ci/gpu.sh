#!/usr/bin/env bash
# The GPU job, on a machine with a CUDA device: the GPU test suite, compute-sanitizer (memcheck,
# racecheck, initcheck, synccheck) over it, the GPU micro-benchmarks, the transformers bridge on
# the embedded model (when python3 has torch and transformers), and a summary table.
#
#   ./ci/gpu.sh                      configure with -DKVCHECK_CUDA=ON, build, run
#   ./ci/gpu.sh --prebuilt .gpu      run what ci/gpu-pack.sh packed (a GPU machine without the
#                                    Debian packages: the packed loader and libraries run it)
#   ./ci/gpu.sh --out DIR            logs and benchmark JSON into DIR (default $OUT or gpu-out)
#   ./ci/gpu.sh --quick [...]        the short check (about 5 minutes of device time, issue 49): the
#                                    GPU suite with short properties beside compute-sanitizer
#                                    memcheck, decode attention per format at 4K and 32K x batch 1,
#                                    16, 64 against the same run's device-to-device copy, the
#                                    compaction benchmark, kvcheck bench --workload chat on the
#                                    host-copy (--device cuda) and the resident (--device
#                                    cuda-resident) engines; then OUT/quick.json (format
#                                    kvcheck-gpu-quick, docs/gpu.md)
# KVCHECK_GPU_TIMEOUT (seconds, default 1800; --quick: 150) bounds each suite; one that runs out
# reads rc=124.
#
# The sanitizer runs shorten the properties (RC_PARAMS max_success) because every kernel launch
# is instrumented, and leave out the two embedded-model engine comparisons (whole generations over
# six and eleven policies: over 150 s per tool on an H100; the random-model engine tests and the
# resident engine's ledger test keep every engine kernel path under the sanitizers); the plain run
# uses the suite's own counts and every test.
set -uo pipefail
sanitized_tests=-EngineGpu.EmbeddedModelTokensEqualTheCpuBackend:EngineGpu.ResidentEngineGivesTheHostCopyEnginesTokensAndLogits
cd "$(dirname "$0")/.."

prebuilt=""
quick=0
out=${OUT:-gpu-out}
while [[ $# -gt 0 ]]; do
  case $1 in
    --prebuilt) prebuilt=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    --out) out=$2; shift 2 ;;
    *) echo "ci/gpu.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
export PATH=$PATH:/usr/local/cuda/bin

if [[ -n $prebuilt ]]; then
  bin=$prebuilt/bin
  cuda_libs=/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/lib/x86_64-linux-gnu
  # the packed loader, so the packed libc and libraries are the ones used
  loader=("$prebuilt/lib/ld-linux-x86-64.so.2" --library-path "$prebuilt/lib:$cuda_libs")
  export KVCHECK_SOURCE_DIR=$PWD
else
  build_dir=${KVCHECK_BUILD_DIR:-build-cuda}
  # shellcheck disable=SC2086
  cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DKVCHECK_CUDA=ON ${KVCHECK_CMAKE_ARGS:-} >/dev/null || exit 1
  cmake --build "$build_dir" -j "$(nproc)" --target kvcheck kvcheck_gpu_tests kvcheck_bench_kernels \
    kvcheck_bench_pages kvcheck_bench_attention >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
  bin=$build_dir/bin
  cp "$build_dir/properties/kvcheck_gpu_tests" "$bin/" 2>/dev/null || true
  loader=()
fi

nvidia-smi -L 2>/dev/null | tee "$out/device.txt" || echo "nvidia-smi not available" | tee "$out/device.txt"

suite() {  # name, then the command; writes $out/<name>.result: pass/fail, seconds, gtest counts
  local name=$1; shift
  local log="$out/$name.log"
  local start=$SECONDS
  timeout -k 10 "${KVCHECK_GPU_TIMEOUT:-1800}" "$@" >"$log" 2>&1
  local rc=$?
  local counts
  counts=$(grep -E "^\[ +(PASSED|FAILED|SKIPPED) +\] [0-9]+ tests?[,.]" "$log" | sed -E 's/[][]//g; s/ +/ /g; s/, listed below://' |
    tr '\n' ';')
  local sanitizer
  sanitizer=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -1)
  echo "rc=$rc $((SECONDS - start))s ${counts} ${sanitizer}" >"$out/$name.result"
}

if [[ $quick == 1 ]]; then
  export KVCHECK_GPU_TIMEOUT=${KVCHECK_GPU_TIMEOUT:-150}
  git rev-parse HEAD >"$out/commit.txt" 2>/dev/null || echo unknown >"$out/commit.txt"
  short=(env RC_PARAMS="seed=20261122 max_success=10")
  suite gpu-tests "${short[@]}" "${loader[@]}" "$bin/kvcheck_gpu_tests" &
  if command -v compute-sanitizer >/dev/null; then
    suite sanitize-memcheck "${short[@]}" compute-sanitizer --tool memcheck --error-exitcode 1 \
      "${loader[@]}" "$bin/kvcheck_gpu_tests" --gtest_filter="$sanitized_tests" &
  else
    echo "skipped: compute-sanitizer not on PATH" >"$out/sanitize-memcheck.result"
  fi
  wait
  suite bench-attention "${loader[@]}" "$bin/kvcheck_bench_attention" \
    --benchmark_filter='BM_DecodeAttentionCuda/[^/]+/ctx:(4096|32768)/batch:(1|16|64)($|/)' \
    --benchmark_out="$out/bench-attention.json" --benchmark_out_format=json
  suite bench-pages "${loader[@]}" "$bin/kvcheck_bench_pages" --benchmark_filter=Gpu --benchmark_out="$out/bench-pages.json" \
    --benchmark_out_format=json
  suite bench-serving "${loader[@]}" "$bin/kvcheck" bench --workload chat --requests 32 --device cuda \
    --json "$out/bench-serving.json"
  suite bench-serving-resident "${loader[@]}" "$bin/kvcheck" bench --workload chat --requests 32 \
    --device cuda-resident --json "$out/bench-serving-resident.json"
  # The PyTorch peer and the read stream, in their own process (bench/peer_sdpa.py).
  if python3 -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    suite peer-sdpa python3 bench/peer_sdpa.py --out "$out/peer-sdpa.json"
  else
    echo "skipped: python3 has no torch with CUDA" >"$out/peer-sdpa.result"
  fi
  python3 ci/gpu_quick_json.py "$out" || echo "ci/gpu.sh: python3 could not assemble $out/quick.json"
  echo
  echo "== ci/gpu.sh --quick summary (logs in $out) =="
  status=0
  for name in gpu-tests sanitize-memcheck bench-attention bench-pages bench-serving bench-serving-resident peer-sdpa; do
    r=$(cat "$out/$name.result" 2>/dev/null || echo "not run")
    printf '%-20s %s\n' "$name" "$r"
    [[ $r == rc=0* || $r == skipped* ]] || status=1
  done
  exit $status
fi

suite gpu-tests "${loader[@]}" "$bin/kvcheck_gpu_tests"
# The four sanitizer tools run side by side (each is its own process on the one device).
short=(env RC_PARAMS="seed=20261122 max_success=10")
for tool in memcheck racecheck initcheck synccheck; do
  if command -v compute-sanitizer >/dev/null; then
    suite "sanitize-$tool" "${short[@]}" compute-sanitizer --tool "$tool" --error-exitcode 1 \
      "${loader[@]}" "$bin/kvcheck_gpu_tests" --gtest_filter="$sanitized_tests" &
  else
    echo "skipped: compute-sanitizer not on PATH" >"$out/sanitize-$tool.result"
  fi
done
wait
# Benchmarks after the sanitizers, alone on the device.
suite bench-kernels "${loader[@]}" "$bin/kvcheck_bench_kernels" --benchmark_filter=Cuda --benchmark_out="$out/bench-kernels.json" \
  --benchmark_out_format=json
suite bench-pages "${loader[@]}" "$bin/kvcheck_bench_pages" --benchmark_filter=Gpu --benchmark_out="$out/bench-pages.json" \
  --benchmark_out_format=json
suite bench-attention "${loader[@]}" "$bin/kvcheck_bench_attention" --benchmark_filter=Cuda --benchmark_out="$out/bench-attention.json" \
  --benchmark_out_format=json

# bridges/hf_transformers.py on the embedded model, held by kvcheck compare: the dynamic cache (KL
# near float rounding) and the quantized cache of each backend installed (quanto: optimum-quanto,
# hqq). The gate runs the bridge's argument handling and output writer only (no torch there).
bridges=(bridge-dynamic bridge-quanto bridge-hqq)
bridge() {  # result name, cache, backend (timeout runs programs, not functions: one bash -c line)
  local dir="$out/bridge-$2-$3" items="$out/bridge-items.jsonl"
  suite "$1" bash -c "python3 bridges/hf_transformers.py --model datasets/models/kvcheck-tiny --items '$items' \
    --out '$dir' --cache $2 --backend $3 --nbits 4 --device cuda &&
    ${loader[*]} '$bin/kvcheck' compare --items '$items' --engine-output '$dir' --name hf-$2-$3 --out '$dir-compare' &&
    cat '$dir-compare/report.md'"
}
if python3 -c "import torch, transformers; assert torch.cuda.is_available()" 2>/dev/null &&
   "${loader[@]}" "$bin/kvcheck" export --quick --out "$out/bridge-items.jsonl" >/dev/null 2>&1; then
  bridge bridge-dynamic dynamic quanto
  for backend in quanto hqq; do
    module=$([[ $backend == quanto ]] && echo optimum.quanto || echo hqq)
    if python3 -c "import $module" 2>/dev/null; then
      bridge "bridge-$backend" quantized "$backend"
    else
      echo "skipped: python3 cannot import $module" >"$out/bridge-$backend.result"
    fi
  done
else
  for name in "${bridges[@]}"; do echo "skipped: python3 lacks torch (with CUDA) or transformers" >"$out/$name.result"; done
fi

echo
echo "== ci/gpu.sh summary (logs in $out) =="
status=0
for name in gpu-tests sanitize-memcheck sanitize-racecheck sanitize-initcheck sanitize-synccheck bench-kernels bench-pages \
  bench-attention "${bridges[@]}"; do
  r=$(cat "$out/$name.result" 2>/dev/null || echo "not run")
  printf '%-20s %s\n' "$name" "$r"
  [[ $r == rc=0* || $r == skipped* ]] || status=1
done
exit $status
