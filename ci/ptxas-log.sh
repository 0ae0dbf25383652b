#!/usr/bin/env bash
# CMake's compiler launcher for kvcheck's CUDA sources (kernels/CMakeLists.txt): runs the nvcc
# command it is given, which carries -Xptxas -v, and writes ptxas's resource report for the object
# to OBJECT.ptxas beside it (the "ptxas info" lines and the stack/spill lines under them, without
# the compile times, which change from run to run). Every other line of the compiler's stderr
# passes through, so warnings still show and --Werror still fails the build. ci/ptxas_budget.py
# reads the reports: the kernel budgets come from the build's own objects, at no extra compile.
#
#   ptxas-log.sh NVCC ARGS... -o OBJECT ...
set -uo pipefail
out=""
prev=""
for a in "$@"; do
  if [ "$prev" = "-o" ]; then out=$a; fi
  prev=$a
done
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$@" 2>"$log"
status=$?
grep -vE '^ptxas info|^    [0-9]+ bytes stack frame' "$log" >&2
if [ -n "$out" ] && [ "$status" -eq 0 ]; then
  grep -E '^ptxas info|^    [0-9]+ bytes stack frame' "$log" | grep -v 'Compile time' >"$out.ptxas.tmp"
  mv "$out.ptxas.tmp" "$out.ptxas"
fi
exit "$status"
