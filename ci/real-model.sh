#!/usr/bin/env bash
# Every registered policy on the real SmolLM2-135M-Instruct GGUF (ci/install-deps.sh fetches it)
# under the per-step oracle: verify --verify-each-step on held-out prompts, each continued by the
# reference's greedy tokens, long enough that every evicting policy evicts at its default budget. Exits non-zero on any oracle violation
# (verify exits 3), on a failed run, or when full-fp32 does not reproduce the reference's greedy
# tokens (greedy match 1.0). A separate job; the gate runs a subset (GgufRealModelSlow.*).
#
#   ./ci/real-model.sh [OUT_DIR]     (default build/real-model; needs ./ci/test.sh's build)
#
# Environment: KVCHECK_REAL_MODEL_ARGS replaces the verify sizes below.
set -euo pipefail
cd "$(dirname "$0")/.."
kvcheck=${KVCHECK_BUILD_DIR:-build}/bin/kvcheck
out=${1:-${KVCHECK_BUILD_DIR:-build}/real-model}
model=${KVCHECK_MODELS:-datasets/models/fetched}/SmolLM2-135M-Instruct.Q4_1.gguf
sizes=${KVCHECK_REAL_MODEL_ARGS:---prompts 2 --prompt-tokens 192 --max-new-tokens 24}
[ -x "$kvcheck" ] || { echo "real-model: $kvcheck not built (run ./ci/test.sh or cmake --build first)" >&2; exit 2; }
[ -f "$model" ] || { echo "real-model: $model not found (run ci/install-deps.sh)" >&2; exit 2; }
mkdir -p "$out"
status=0
printf '%-10s %8s %10s %8s %8s %s\n' policy seconds kl_mean top1 greedy oracle
for policy in $("$kvcheck" verify --list-policies); do
  start=$(date +%s.%N)
  # shellcheck disable=SC2086
  if "$kvcheck" verify --model "$model" --policy "$policy" --verify-each-step $sizes \
      --json "$out/$policy.json" >"$out/$policy.log" 2>&1; then
    oracle=ok
  else
    code=$?
    oracle="exit $code (see $out/$policy.log)"
    status=1
  fi
  secs=$(echo "$(date +%s.%N) - $start" | bc)
  python3 - "$out/$policy.json" "$policy" "$secs" "$oracle" <<'PY' || status=1
import json, sys
path, policy, secs, oracle = sys.argv[1:]
try:
    s = json.load(open(path))
except Exception as e:  # the run failed before writing its summary
    print(f"{policy:<10} {float(secs):8.1f} {'-':>10} {'-':>8} {'-':>8} {oracle}")
    sys.exit(0)
kl, top1, greedy = s.get("kl_mean"), s.get("top1_agreement"), s.get("greedy_match_fraction")
fmt = lambda v, f: f.format(v) if isinstance(v, (int, float)) else str(v)
print(f"{policy:<10} {float(secs):8.1f} {fmt(kl, '{:10.3g}'):>10} {fmt(top1, '{:8.4f}'):>8} {fmt(greedy, '{:8.4f}'):>8} {oracle}")
if policy == "full-fp32" and greedy is not None and greedy != 1.0:
    print("real-model: full-fp32 does not reproduce the reference's greedy tokens", file=sys.stderr)
    sys.exit(1)
PY
done
exit $status
